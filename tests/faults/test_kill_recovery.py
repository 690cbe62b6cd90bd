"""Recovery for real: the driver process is SIGKILLed in the middle of epoch k (one partition's
tail has written its file, the others have not), started again, resumes from checkpoint k-1,
recomputes only epoch k onwards, and ends bit-for-bit equal to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from include.runner import IterationRunner
from include.runtime import IterationJob
from tests.conftest import ROOT
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KILL_EPOCH = 3
MAX_EPOCHS = 6


def run_job(tmp_path, edges, failpoints: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ITERATIONS_FAILPOINTS", "ITERATIONS_DRIVER_PID")}
    env["PYTHONPATH"] = ROOT
    if failpoints:
        env["ITERATIONS_FAILPOINTS"] = failpoints
    cmd = [
        sys.executable, "-m", "spark_jobs.run_job", "--job-id", "pr", "--body", "pagerank",
        "--input", str(edges), "--checkpoint-root", str(tmp_path / "store"),
        "--max-epochs", str(MAX_EPOCHS), "--tolerance", "0", "--num-partitions", "3",
    ]
    # Its own session: the failpoint kills the driver's whole process group (driver, JVM,
    # Python workers) at once, as when the machine running the epoch dies.
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          start_new_session=True)


def test_sigkill_in_the_middle_of_an_epoch(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.12, seed=21))

    killed = run_job(tmp_path, edges, f"tail.partition_written@epoch={KILL_EPOCH}@partition=1=kill-driver")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    cfg = pagerank_config(tmp_path, edges, max_epochs=MAX_EPOCHS, tolerance=0.0)
    job = IterationJob(cfg)
    assert job.log.latest_id() == KILL_EPOCH - 1, "epochs before k are committed, k is not"
    (dead_attempt,) = job.log.attempt_ids(KILL_EPOCH)
    reported = {r.partition for r in job.log.reports(KILL_EPOCH, dead_attempt)}
    assert 1 not in reported and len(reported) < 3, f"the kill landed inside epoch k's tail ({reported})"
    written = [o.key for o in job.store.list(job.log.layout.attempt(KILL_EPOCH, dead_attempt) + "/ranks/")]
    assert any("part-00001-" in k for k in written), "partition 1 had written its file when it was killed"

    resumed = run_job(tmp_path, edges)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["restored_from"] == KILL_EPOCH - 1
    assert summary["epochs_computed"] == list(range(KILL_EPOCH, MAX_EPOCHS)), "only epoch k onwards is recomputed"
    assert summary["epochs_adopted"] == []
    assert summary["status"] == "TERMINATED"
    assert dead_attempt not in job.log.attempt_ids(KILL_EPOCH), "the killed attempt's files are garbage collected"

    recovered = ranks_of(IterationRunner(cfg, spark).run().outputs["ranks"])
    reference_cfg = pagerank_config(tmp_path / "ref", edges, max_epochs=MAX_EPOCHS, tolerance=0.0)
    reference = ranks_of(IterationRunner(reference_cfg, spark).run().outputs["ranks"])
    assert recovered == reference, "bit-for-bit equal to the uninterrupted run"


def test_sigkill_during_publication_publishes_exactly_once(spark, tmp_path):
    """The process dies for real (SIGKILL) half way through publishing the final outputs: one
    output is committed, the other's files written but not recorded. The next run publishes
    what is left, once, and recomputes nothing."""
    import numpy as np
    import pandas as pd

    from include.config import JobConfig
    from include.outputs import published, published_increments

    rng = np.random.default_rng(9)
    X = rng.normal(size=(90, 2)) + np.repeat([[0, 0], [5, 5], [-5, 5]], 30, axis=0)
    pd.DataFrame({"id": np.arange(90), "x": X[:, 0], "y": X[:, 1]}).to_parquet(tmp_path / "points.parquet")
    env = {k: v for k, v in os.environ.items() if k not in ("ITERATIONS_FAILPOINTS", "ITERATIONS_DRIVER_PID")}
    env["PYTHONPATH"] = ROOT
    cmd = [sys.executable, "-m", "spark_jobs.run_job", "--job-id", "km", "--body", "kmeans",
           "--input", str(tmp_path / "points.parquet"), "--checkpoint-root", str(tmp_path / "store"),
           "--output-path", str(tmp_path / "out"), "--max-epochs", "3", "--tolerance", "0",
           "--num-partitions", "2", "--param", "k=3"]
    killed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, start_new_session=True,
                            env={**env, "ITERATIONS_FAILPOINTS": "publish.after_output@checkpoint=3@output=centroids=kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    job = IterationJob(JobConfig(job_id="km", body="kmeans", input=str(tmp_path / "points.parquet"),
                                 checkpoint_root=str(tmp_path / "store")))
    assert set(job.log.publications(3)) == {"assignments"}, "killed between the two outputs' publications"

    resumed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["restored_from"] == 3 and summary["epochs_computed"] == [] and summary["status"] == "TERMINATED"
    assert set(job.log.publications(3)) == {"assignments", "centroids"}
    assert len(job.log.attempt_ids(3)) == 1, "finish ran once"
    for name in ("centroids", "assignments"):
        p = published(str(tmp_path / "out"), name)
        assert (p.checkpoint_id, p.manifest["replaces"]) == (3, None), f"{name} published once"
    assert published_increments(str(tmp_path / "out"), "centroid_history").checkpoints == (("km", 0), ("km", 1), ("km", 2))
