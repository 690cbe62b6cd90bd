"""docs/airflow.md, "Forking a job", run as written: a PageRank job to epoch 3 under
``airflow dags test``, then three forks of its checkpoint 3 at three dampings, in a checkout-like
directory of its own (the project's .venv, dags and plugins linked in; the demo's input made
small) with ``ITERATIONS_LOCAL_DIR`` there, so the DAG's defaults land in it. Each fork equals,
epoch for epoch, numpy's PageRank from the parent's checkpoint 3 at its damping; the parent's
directory is byte for byte what it was; each fork's asset event names its parent."""

from __future__ import annotations

import os
import subprocess

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.publication.outputs import published
from include.store import LocalStore
from tests.conftest import ROOT, free_port
from tests.dags.conftest import asset_events
from tests.docs import block
from tests.helpers import graph_with_dangling
from tests.integration.test_forks import pagerank_steps, tree_digest, variable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_three_damping_sweep_from_the_docs(tmp_path):
    import pandas as pd

    work = tmp_path / "checkout"
    work.mkdir()
    for name in (".venv", "dags", "plugins"):
        (work / name).symlink_to(os.path.join(ROOT, name))
    local = work / ".local"
    graph = graph_with_dangling(25, 0.15, seed=7)
    (local / "demo" / "input").mkdir(parents=True)
    pd.DataFrame(list(graph.edges()), columns=["src", "dst"]).to_parquet(local / "demo" / "input" / "edges.parquet")
    sweep = block("docs/airflow.md", "export AIRFLOW_HOME=$PWD/.local/airflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ITERATIONS"))}
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}  # a newcomer's shell: the .venv has the project
    env.update(ITERATIONS_LOCAL_DIR=str(local), ITERATIONS_SPARK_CONNECT_PORT=str(free_port()))
    try:
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + sweep.text], cwd=work, env=env,
                              capture_output=True, text=True, timeout=1200)
    finally:
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), "-m", "spark_jobs.connect_server", "stop"],
                       cwd=ROOT, env=env, capture_output=True, timeout=120)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert log.count("state=success") >= 4, log[-3000:]

    root = local / "dags" / "iterate_pagerank"
    store = LocalStore(str(root / "store"))
    start = variable(store, "sweep", 3)
    # the parent's directory is only read by the forks: nothing in it is younger than the first fork
    parent = root / "store" / "jobs" / "sweep"
    first_fork = min((root / "store" / "jobs" / f"sweep-{d}" / "fork.json").stat().st_mtime for d in (0.5, 0.7, 0.95))
    assert max(p.stat().st_mtime for p in parent.rglob("*") if p.is_file()) < first_fork
    before = tree_digest(parent)
    assert CheckpointLog(store, "sweep").load(3, verify="full").kind == "epoch"
    for d in (0.5, 0.7, 0.95):
        job = f"sweep-{d}"
        log_ = CheckpointLog(store, job)
        assert log_.latest().kind == "final" and log_.checkpoint_ids() == [6, 7, 8]  # retain_last 3
        for epoch, want in zip(range(4, 8), pagerank_steps(graph, start, d, 4)):
            if epoch in log_.checkpoint_ids():
                got = variable(store, job, epoch)
                assert max(abs(got[k] - want[k]) for k in want) < 1e-12, (d, epoch)
        ranks = pd.concat(pd.read_parquet(f) for f in published(str(root / "output" / job), "ranks").locations)
        assert max(abs(r - want[n]) for n, r in zip(ranks["node"], ranks["rank"])) < 1e-12, "epoch 7's ranks"
        [event] = asset_events({"AIRFLOW_HOME": str(local / "airflow")}, (root / "output" / job / "ranks").as_uri())
        assert event["extra"]["forked_from"] == {"job_id": "sweep", "checkpoint_id": 3, "epoch": 3}
        assert event["extra"]["job_id"] == job
    assert tree_digest(parent) == before, "reading the forks' checkpoints changed nothing"

    # the page's Python block prints each fork's top nodes
    shown = subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), "-c",
                            block("docs/airflow.md", "import pandas as pd\n\nfrom include.publication").text],
                           cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert [line.split(" ", 1)[0] for line in shown.stdout.splitlines()] == ["0.5", "0.7", "0.95"]
    assert all("'node'" in line and "'rank'" in line for line in shown.stdout.splitlines())
