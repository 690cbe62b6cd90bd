"""An unbounded job through a DAG (HeadOperatorTest's unbounded iteration, seed 000): the
ticker job of tests/ticker.py, no epoch limit (``max_epochs: null`` in the run's conf), batch
after batch with retention bounded by the run's params; the store holds as many objects after
the third batch as after the second (the lease two records, whatever the number of tasks that
took it), and a run with ``stop: drain`` finishes it with every epoch counted once."""

from __future__ import annotations

import json
import os

import pytest

from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from tests.dags.conftest import airflow
from tests.helpers import read_published, write_dag_file
from tests.integration.test_unbounded import objects

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_an_unbounded_job_runs_batch_after_batch_in_a_bounded_store(airflow_env, tmp_path):
    dags = write_dag_file(tmp_path / "dags", "ticker", "tests.ticker:Ticker", epochs_per_batch=4, job_id="ticker",
                          input_path=str(tmp_path / "no-input"), output_path=str(tmp_path / "out"),
                          checkpoint_root=str(tmp_path / "store"), tolerance=0, num_partitions=2)
    env = {**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": dags}
    conf = {"max_epochs": None, "retain_last": 2, "retain_batches": 1, "retain_history": 4, "continuation": False}
    root = str(tmp_path / "store" / "jobs" / "ticker")
    seen = []
    for batch in range(3):
        done = airflow(env, "dags", "test", "ticker", f"2026-05-0{batch + 1}", "--conf", json.dumps(conf))
        log = done.stdout + done.stderr
        assert "state=success" in log, log[-5000:]
        seen.append(objects(root))
    job = IterationJob(JobConfig(job_id="ticker", body="tests.ticker:Ticker", input=str(tmp_path / "no-input"),
                                 checkpoint_root=str(tmp_path / "store")))
    latest = job.log.latest()
    assert (latest.epoch, latest.head_state.status.value) == (11, "RUNNING"), "nothing but a stop ends it"
    assert seen[1] == seen[2], seen
    assert seen[2]["retired"] == 4 and seen[2]["lease"] == 2, seen[2]
    assert sorted(os.listdir(os.path.join(root, "batches"))) != [], "the newest batches' records stay"

    done = airflow(env, "dags", "test", "ticker", "2026-05-04", "--conf", json.dumps({**conf, "stop": "drain"}))
    log = done.stdout + done.stderr
    assert "state=success" in log and "final checkpoint 16 committed" in log, log[-5000:]
    counts = read_published(tmp_path / "out" / "ticker", "counts")
    assert sorted(counts["n"]) == [16] * 8, "every epoch counted once"
