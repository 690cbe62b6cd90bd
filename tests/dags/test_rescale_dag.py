"""Rescale on restore through the DAGs (F14): the batch after a change of ``num_partitions``
resumes the job with the new count - k-means (its variable replayed into the new partitions,
the head state's counts following it) and the incremental job (its split enumerator goes on
assigning files to the new partitions) end as a run that never changed it; a job whose
coordinator cannot carry its state over to another count (the coordinator-events job: each
coordinator feeds one partition by number) is refused before anything is written, naming the
coordinator, both counts and the way out."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from spark_jobs.runner import IterationRunner
from tests.dags.conftest import airflow
from tests.helpers import read_published

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def dags_test(env, dag_id, conf, *, ok=True):
    done = airflow(env, "dags", "test", dag_id, "--conf", json.dumps(conf))
    log = done.stdout + done.stderr
    assert ("state=success" in log) is ok, log[-5000:]
    return log


def test_kmeans_resumes_with_another_partition_count(airflow_env, spark, tmp_path):
    """Batch 1 (epochs 0-2) with 2 partitions, batch 2 (epochs 3-4 and finish) with 3: the
    assignments equal a 2-partition run's, the centroids to 1e-9 (sums in another order)."""
    env = {**airflow_env, "ITERATIONS_EPOCHS_PER_BATCH": "3"}
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 2)) + np.repeat([[0, 0], [6, 6], [-6, 6]], 100, axis=0)
    pd.DataFrame({"id": np.arange(len(X)), "x": X[:, 0], "y": X[:, 1]}).to_parquet(tmp_path / "points.parquet")
    conf = {"job_id": "km-rescale", "input_path": str(tmp_path / "points.parquet"),
            "checkpoint_root": str(tmp_path / "store"), "output_path": str(tmp_path / "out"), "max_epochs": 5,
            "tolerance": 0, "num_partitions": 2, "k": 3, "seed": 7, "continuation": False}
    dags_test(env, "iterate_kmeans", conf)
    job = IterationJob(JobConfig(job_id="km-rescale", body="kmeans", input=conf["input_path"],
                                 checkpoint_root=conf["checkpoint_root"]))
    assert (job.log.latest().epoch, job.log.latest().num_partitions) == (2, 2)

    log = dags_test(env, "iterate_kmeans", {**conf, "num_partitions": 3})
    assert "epoch 3 committed" in log and "epoch 4 committed" in log and "final checkpoint 5 committed" in log
    final = job.log.latest()
    assert (final.kind, final.num_partitions) == ("final", 3)
    assert all(len(ds.partitions) == 3 for ds in final.variables.values()), "the variables live in 3 partitions"

    reference = JobConfig(job_id="km-lib", body="kmeans", input=conf["input_path"], checkpoint_root=str(tmp_path / "lib"),
                          body_params={"k": 3, "seed": 7}, max_epochs=5, tolerance=0.0, num_partitions=2)
    outputs = IterationRunner(reference, spark).run().outputs
    expected = outputs["centroids"].toPandas().sort_values("cluster_id")
    got = read_published(tmp_path / "out", "centroids").sort_values("cluster_id")
    np.testing.assert_allclose(got[["x", "y"]].to_numpy(), expected[["x", "y"]].to_numpy(), rtol=0, atol=1e-9)
    assigned = read_published(tmp_path / "out", "assignments").sort_values("id")
    expected_assigned = outputs["assignments"].toPandas().sort_values("id")
    assert assigned["cluster_id"].tolist() == expected_assigned["cluster_id"].tolist()


def test_the_incremental_job_resumes_with_another_partition_count(airflow_env, tmp_path):
    """Six files and the end marker in place: batch 1 (2 partitions) processes four of them in
    two epochs, batch 2 (3 partitions) the two its split enumerator's state still holds, then
    the job ends: every file once, the
    model equal to numpy's replay of the epochs' files."""
    from tests.integration.test_incremental import LR, check_exactly_once, drop_file, end_input

    env = {**airflow_env, "ITERATIONS_EPOCHS_PER_BATCH": "2", "ITERATIONS_INPUT_POLL_SECONDS": "1"}
    inbox = str(tmp_path / "in")
    for i in range(6):
        drop_file(inbox, i)
    end_input(inbox)
    conf = {"job_id": "sgd-rescale", "input_path": inbox, "checkpoint_root": str(tmp_path / "store"),
            "output_path": str(tmp_path / "out"), "num_partitions": 2, "learning_rate": LR,
            "max_splits_per_epoch": 2, "continuation": False}
    dags_test(env, "iterate_sgd_incremental", conf)
    job = IterationJob(JobConfig(job_id="sgd-rescale", body="sgd", input=inbox, checkpoint_root=conf["checkpoint_root"]))
    first = job.log.latest()
    assert (first.epoch, first.num_partitions) == (1, 2)
    assert first.coordinators["splits"]["state"]["pending"] == ["batch-004.parquet", "batch-005.parquet"], \
        "four files assigned, two pending in the enumerator's state"

    log = dags_test(env, "iterate_sgd_incremental", {**conf, "num_partitions": 3})
    assert "terminating (end of input)" in log, log[-3000:]
    final = job.log.latest()
    assert (final.kind, final.num_partitions) == ("final", 3)
    check_exactly_once(inbox, conf["output_path"], files=6)


def test_a_coordinator_that_cannot_rescale_is_refused_naming_it(airflow_env, tmp_path):
    """The coordinator-events job, 2 epochs with 2 partitions, then a batch with 3: the head of
    its first epoch fails at once (no Airflow retry) with the coordinator's refusal; no attempt
    is recorded, the latest checkpoint stays; the same batch with 2 partitions goes on."""
    from tests.faults.airflow_sweep import EVENTS_DAG

    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "coordinator_events_dag.py").write_text(EVENTS_DAG.format(
        input=str(tmp_path / "no-input"), output=str(tmp_path / "out"), store=str(tmp_path / "store")))
    env = {**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"), "ITERATIONS_EPOCHS_PER_BATCH": "2"}
    conf = {"n_fast": 100, "n_slow": 10, "num_partitions": 2, "continuation": False}
    dags_test(env, "coordinator_events", conf)
    job = IterationJob(JobConfig(job_id="events", body="tests.coordinator_events:DagReceiver",
                                 input=str(tmp_path / "no-input"), checkpoint_root=str(tmp_path / "store")))
    assert job.log.latest_id() == 1
    attempts = sorted(os.listdir(tmp_path / "store" / "jobs" / "events" / "attempts"))

    log = dags_test(env, "coordinator_events", {**conf, "num_partitions": 3}, ok=False)
    assert ("num_partitions=3 is refused: the checkpoint's state of coordinator 'fast' was taken with 2 "
            "partitions and it cannot be rescaled (EventSendingCoordinator does not say how to rescale its state "
            "(Coordinator.rescale)); resume with num_partitions=2") in log
    assert log.count("[DAG TEST] starting task_id=epoch_0.run") == 1, "refused at once: not retried"
    assert job.log.latest_id() == 1
    assert sorted(os.listdir(tmp_path / "store" / "jobs" / "events" / "attempts")) == attempts, \
        "no attempt recorded for epoch 2"

    dags_test(env, "coordinator_events", conf)
    assert job.log.latest_id() == 3, "with 2 partitions the job goes on"
