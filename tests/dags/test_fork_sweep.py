"""docs/airflow.md, "Forking a job": the sweep of three dampings, with the page's own confs (read
from its code block) under ``airflow dags test`` on the warm Airflow, each run given this test's
input, store and output in place of the demo's. A PageRank job to epoch 2, then three forks of its
checkpoint 2: each fork equals, epoch for epoch, numpy's PageRank from the parent's checkpoint 2
at its damping; the parent's directory is byte for byte what it was; each fork's asset event
names its parent; the page's Python block prints each fork's top nodes."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pandas as pd
import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.publication.outputs import published
from include.store import LocalStore
from tests.dags.conftest import airflow, asset_events
from tests.docs import block
from tests.helpers import graph_with_dangling, tree_digest
from tests.integration.test_forks import pagerank_steps, variable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def sweep_confs() -> list[dict]:
    """The confs of the page's sweep, in order: the parent's, then one per damping of its loop."""
    text = block("docs/airflow.md", "export AIRFLOW_HOME=$PWD/.local/airflow").text
    parent = json.loads(re.search(r"--conf '(\{.*?\})'", text)[1])
    dampings = re.search(r"for d in ([0-9. ]+); do", text)[1].split()
    template = re.search(r'--conf "(\{.*\})"', text)[1].replace('\\"', '"')
    return [parent, *(json.loads(template.replace("$d", d)) for d in dampings)]


def test_the_three_damping_sweep_from_the_docs(airflow_env, tmp_path):
    graph = graph_with_dangling(25, 0.15, seed=7)
    edges = tmp_path / "edges.parquet"
    pd.DataFrame(list(graph.edges()), columns=["src", "dst"]).to_parquet(edges)
    root, out = tmp_path / "store", tmp_path / "output"
    confs = sweep_confs()
    assert [c.get("fork_from") for c in confs] == [None, "sweep:2", "sweep:2", "sweep:2"]
    parent_dir = root / "jobs" / "sweep"
    env = {**airflow_env, "ITERATIONS_EPOCHS_PER_BATCH": "4"}  # each job one batch: no empty epoch groups to skip
    for conf in confs:
        # the DAG's default output is one per job (<default>/<job_id>): here as well
        conf = {**conf, "input_path": str(edges), "checkpoint_root": str(root), "output_path": str(out / conf["job_id"])}
        done = airflow(env, "dags", "test", "iterate_pagerank", "--conf", json.dumps(conf))
        text = done.stdout + done.stderr
        assert done.returncode == 0 and "state=success" in text, \
            "\n".join(line for line in text.splitlines() if "rror" in line or "efused" in line or "Exception" in line)[-5000:]
        if conf.get("fork_from") is None:
            before = tree_digest(parent_dir)
            assert CheckpointLog(LocalStore(str(root)), "sweep").load(2, verify="full").kind == "epoch"
    assert tree_digest(parent_dir) == before, "the forks only read their parent"

    store = LocalStore(str(root))
    start = variable(store, "sweep", 2)
    forks = [c["job_id"] for c in confs[1:]]
    for conf in confs[1:]:
        job, d = conf["job_id"], conf["damping"]
        log_ = CheckpointLog(store, job)
        assert log_.latest().kind == "final" and log_.checkpoint_ids() == [4, 5, 6]  # retain_last 3
        for epoch, want in zip(range(3, 6), pagerank_steps(graph, start, d, 3)):
            if epoch in log_.checkpoint_ids():
                got = variable(store, job, epoch)
                assert max(abs(got[k] - want[k]) for k in want) < 1e-12, (d, epoch)
        ranks = pd.concat(pd.read_parquet(f) for f in published(str(out / job), "ranks").locations)
        assert max(abs(r - want[n]) for n, r in zip(ranks["node"], ranks["rank"])) < 1e-12, "epoch 5's ranks"
        [event] = asset_events(airflow_env, (out / job / "ranks").as_uri())
        assert event["extra"]["forked_from"] == {"job_id": "sweep", "checkpoint_id": 2, "epoch": 2}
        assert event["extra"]["job_id"] == job

    # the page's Python block prints each fork's top nodes (its paths are the demo's: here, this
    # test's). Run in this process: a Python process that read Parquet with pyarrow may abort
    # as it exits ("terminate called without an active exception", apache/arrow#34314, seen
    # here once after the block had printed all it should), which says nothing of the block
    code = block("docs/airflow.md", "import pandas as pd\n\nfrom include.publication").text
    code = code.replace(".local/dags/iterate_pagerank/output", str(out))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/airflow.md", "exec"), {"__name__": "__main__"})
    lines = printed.getvalue().splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [f.split("-", 1)[1] for f in forks]
    assert all("'node'" in line and "'rank'" in line for line in lines)
