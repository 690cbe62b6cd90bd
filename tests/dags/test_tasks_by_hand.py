"""Every task of a DAG works under ``airflow tasks test``, one after the other, by hand, as a
newcomer would run them (no scheduler, no XCom between the commands)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from include.contract.config import JobConfig
from spark_jobs.runner import IterationRunner
from tests.dags.conftest import airflow
from tests.helpers import read_published

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("commit_in_head", ["default", "0"])
def test_kmeans_tasks_in_order(airflow_env, spark, tmp_path, commit_in_head):
    """As docs/airflow.md runs them. With ``commit_in_head`` (the default) the run task aligns
    and commits its epoch, and align and commit, run after it, find the epoch committed;
    without it the sensor and the commit task do their work from what the store holds."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=150, centers=3, n_features=2, random_state=8)
    points = str(tmp_path / "points.parquet")
    pd.DataFrame({"id": np.arange(len(X)), "x": X[:, 0], "y": X[:, 1]}).to_parquet(points)
    params = {"job_id": "km-hand", "input_path": points, "checkpoint_root": str(tmp_path / "store"),
              "output_path": str(tmp_path / "out"), "max_epochs": 1, "tolerance": 0, "num_partitions": 2,
              "k": 3, "seed": 7}

    env = {k: v for k, v in airflow_env.items() if k != "ITERATIONS_COMMIT_IN_HEAD"}
    if commit_in_head != "default":
        env["ITERATIONS_COMMIT_IN_HEAD"] = commit_in_head

    def task(task_id):
        done = airflow(env, "tasks", "test", "-t", json.dumps(params), "iterate_kmeans", task_id, "2026-01-01")
        log = done.stdout + done.stderr
        assert done.returncode == 0, log[-4000:]
        return log

    head, align, commit = task("epoch_0.run"), task("epoch_0.align"), task("epoch_0.commit")
    aligned = "epoch 0 globally aligned: feedback=3 terminated=True (max epochs reached (1))"
    if commit_in_head == "default":
        assert aligned in head and "epoch 0 committed" in head and "-> terminating" in head
        assert "epoch 0 is committed: nothing for epoch_0.align to do" in align
        assert "epoch 0 is committed: nothing for epoch_0.commit to do" in commit
    else:
        assert "globally aligned" not in head and aligned in align
        assert "epoch 0 committed" in commit and "-> terminating" in commit
        return  # what follows the commit does not depend on which task made it (the default's run)
    assert "epoch 0 is committed (checkpoint 0): restored, not recomputed" in task("epoch_0.run")
    assert "is TERMINATING: epoch 1 is not needed" in task("epoch_1.run")
    assert "final checkpoint 1 committed" in task("finish")
    # (the continue task of a terminated job: tests/dags/test_dags_run.py)

    reference = JobConfig(job_id="km-lib", body="kmeans", input=points, checkpoint_root=str(tmp_path / "lib"),
                          body_params={"k": 3, "seed": 7}, max_epochs=1, tolerance=0.0, num_partitions=2)
    expected = IterationRunner(reference, spark).run().outputs["centroids"].toPandas().sort_values("cluster_id")
    got = read_published(tmp_path / "out", "centroids").sort_values("cluster_id")
    # k-means averages in double: equal up to the order Spark adds in.
    np.testing.assert_allclose(got[["x", "y"]].to_numpy(), expected[["x", "y"]].to_numpy(), rtol=0, atol=1e-12)
