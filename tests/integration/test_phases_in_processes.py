"""Each phase of an epoch on its own, the way Airflow tasks will call them: plan here, the Spark
job through ``spark-submit spark_jobs/epoch.py`` in another process, align and commit here; then
two attempts of one epoch, both run, one committed."""

from __future__ import annotations

import os
import subprocess
import sys

import networkx as nx
import pytest

from include.checkpoints.head_state import HeadStatus
from include.epoch.job import IterationJob
from include.errors import AlignmentIncomplete, CheckpointSuperseded
from spark_jobs.epoch import EpochExecutor
from spark_jobs.runner import IterationRunner
from tests.conftest import ROOT
from tests.helpers import pagerank_config, ranks_of, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def spark_submit(plan, cfg) -> subprocess.CompletedProcess:
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    env = {**os.environ, "PYTHONPATH": ROOT, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("ITERATIONS_DRIVER_PID", None)
    cmd = [
        submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        os.path.join(ROOT, "spark_jobs", "epoch.py"),
        "--checkpoint-root", cfg.checkpoint_root, "--job-id", cfg.job_id,
        "--checkpoint-id", str(plan.checkpoint_id), "--attempt-id", plan.attempt_id,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_epoch_phases_in_separate_processes(spark, tmp_path):
    graph = nx.DiGraph([(1, 2), (2, 3), (3, 1), (3, 4), (5, 1)])
    edges = write_edges(tmp_path / "edges.csv", graph)
    cfg = pagerank_config(tmp_path, edges, max_epochs=3, tolerance=0.0, num_partitions=2)

    plan = IterationJob(cfg).attempts.plan_epoch()
    with pytest.raises(AlignmentIncomplete, match="no report yet from ranks/0, ranks/1"):
        IterationJob(cfg).committer.align(plan)

    done = spark_submit(plan, cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"attempt {plan.attempt_id}: 2 partition reports" in done.stdout + done.stderr

    job = IterationJob(cfg)  # a new process would build exactly this from the same config
    decision = job.committer.align(plan)
    assert decision.epoch == 0 and decision.feedback_count == 5 and not decision.terminated
    manifest = job.committer.commit(plan, decision)
    assert manifest.checkpoint_id == 0 and job.committer.commit(plan, decision).attempt_id == plan.attempt_id

    # epoch 1, planned twice: both run (their Spark jobs on this process's session, as a second
    # spark-submit would run them: the same EpochExecutor), one commits
    rival = IterationJob(cfg).attempts.plan_epoch()
    other = IterationJob(cfg).attempts.plan_epoch()
    assert rival.epoch == other.epoch == 1 and rival.attempt_id != other.attempt_id
    for p in (rival, other):
        assert len(EpochExecutor(spark).run(p, job.store)) == 2
    job.committer.commit(rival)
    with pytest.raises(CheckpointSuperseded, match=f"committed by {rival.attempt_id}; attempt {other.attempt_id} is superseded"):
        job.committer.commit(other)

    result = IterationRunner(cfg, spark).run()
    assert result.status is HeadStatus.TERMINATED and result.epochs_computed == [2]
    power = {n: 1 / 5 for n in graph}
    for _ in range(3):
        power = {n: 0.15 / 5 + 0.85 * (sum(power[u] / graph.out_degree(u) for u in graph.predecessors(n))
                                       + sum(power[u] for u in graph if graph.out_degree(u) == 0) / 5) for n in graph}
    assert ranks_of(result.outputs["ranks"]) == pytest.approx(power, abs=1e-15)
