"""Variables handed from one process to the next through a shared Spark Connect session (an
Airflow batch's run tasks): taken over only when they are exactly the committed checkpoint's
objects, freed when they are not, read from the checkpoint when gone; the checkpoints are the
same bits as with every epoch read from the store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers import graph_with_dangling, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TAKEN = "'ranks' taken over from the Spark Connect session"


def test_kept_variables_pass_between_processes_of_a_session(airflow_env, connect_url, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.1, seed=5))
    done = subprocess.run([sys.executable, "tests/dags/session_handoff_job.py", connect_url, edges, str(tmp_path)],
                          env=airflow_env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    lines = got["pr-shared"]["lines"]

    def origin(epoch: str) -> list[str]:
        return [m for m in lines if m.startswith(f"job pr-shared {epoch}:")]

    for epoch in ("epoch 1", "epoch 2", "epoch 5", "final 6"):
        assert any(TAKEN in m for m in origin(epoch)), (epoch, lines)
    # an attempt's relation whose checkpoint never committed: freed, the checkpoint read
    assert any("is not checkpoint 2's: freed" in m for m in origin("epoch 3")), lines
    assert not any(TAKEN in m for m in origin("epoch 3")), lines
    assert got["stale_freed"], "the stale relation is released in the session"
    # the named relation is gone: the checkpoint is read
    assert any("kept in the session is gone" in m and "DATAFRAME_NOT_FOUND" in m for m in origin("epoch 4")), lines
    assert any("read from the checkpoint" in m for m in origin("epoch 4")), lines
    assert not any(TAKEN in m for m in got["pr-read"]["lines"])
    # the static data: loaded once, then taken over from the session by each new process, and
    # loaded again when a view is gone or a name is not ours; an input file touched (the same
    # bytes, a new time) is the input the job pinned (its SHA-256 says so): taken over too
    static = got["pr-shared"]["static"]

    def static_from(epoch: int) -> str:
        found = [m for m in static if m.startswith(f"job pr-shared epoch {epoch} attempt ") and "static input" in m]
        assert len(found) == 1, (epoch, static)
        return found[0]

    for epoch in (1, 3, 5):
        assert "(taken over from the Spark Connect session)" in static_from(epoch), static
    for epoch in (0, 2, 4):
        assert "(loaded)" in static_from(epoch), static
    assert any(m.startswith("job pr-shared epoch 2:") and "static data named in the session is gone" in m
               and "TABLE_OR_VIEW_NOT_FOUND" in m for m in static), static
    assert not any("the input changed" in m for m in static), static
    assert not any("taken over" in m for m in got["pr-read"]["static"])
    # the same bits, epoch by epoch, as the job that read every epoch from the store
    assert got["pr-shared"]["digests"] == got["pr-read"]["digests"]
