"""``overlap_commits``: what a DAG run reports when each epoch's commit runs behind the next
epoch's Spark job, in the next head's task (docs/airflow.md, "The commit behind the next
epoch"). Failures inside the overlap are the Airflow fault sweep's (tests/dags/test_fault_sweep.py,
shape "overlapped commits") and the data checks test's (tests/dags/test_dags_run.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from tests.dags.conftest import airflow
from tests.faults.sweep import KMEANS_EPOCHS, kmeans_workload
from tests.helpers import StatsdListener, lineage_events

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_each_epoch_is_reported_by_the_task_that_committed_it(airflow_env, tmp_path):
    """k-means (an output appended every epoch) for three epochs in a batch of ten: epochs 0 and
    1 are aligned by their own run task and committed by the next one, behind its Spark job;
    epoch 2 decides termination (max_epochs) and commits in its own task. Every epoch's progress
    line, StatsD figures (its duration from its own head's start) and OpenLineage outputs are
    there once, from the task that committed it; the last head's lineage names the outputs of
    both epochs it committed; each run task's align and commit are skipped."""
    w = kmeans_workload(tmp_path, seed=3)
    cfg = w.config(tmp_path, job_id="km-overlap")
    conf = {"job_id": cfg.job_id, "input_path": cfg.input.path, "checkpoint_root": cfg.checkpoint_root,
            "output_path": cfg.output_path, "max_epochs": KMEANS_EPOCHS, "tolerance": 0,
            "num_partitions": cfg.num_partitions, **cfg.body_params, "continuation": False}
    lineage = tmp_path / "openlineage.jsonl"
    statsd = StatsdListener()
    env = {**airflow_env, **statsd.env(), "ITERATIONS_OVERLAP_COMMITS": "1",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "iterations-test"}
    try:
        done = airflow(env, "dags", "test", "iterate_kmeans", "--conf", json.dumps(conf))
        time.sleep(0.5)  # the last datagrams
    finally:
        statsd.close()
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "state=success" in log, log[-5000:]
    for e in (0, 1):
        assert f"epoch {e}: its checks and commit are left to the next epoch's head" in log
        assert f"committing it behind epoch {e + 1}'s Spark job" in log
    assert "epoch 2: its checks and commit are left" not in log
    assert [e for e in range(4) if log.count(f"epoch {e} committed: ") == 1] == [0, 1, 2], "one progress line each"

    name = f"airflow.iterations.iterate_kmeans.{cfg.job_id}.epoch"
    assert statsd.values(f"{name}.number", "g") == [0, 1, 2], statsd.lines[:50]
    assert statsd.values(f"{name}.committed", "c") == [1] * 3
    durations = statsd.values(f"{name}.duration", "ms")
    assert len(durations) == 3 and min(durations) > 0, "each epoch's duration, from its own head's start"

    with sqlite3.connect(os.path.join(env["AIRFLOW_HOME"], "airflow.db")) as db:
        [run_id] = [r for (r, c) in db.execute("select run_id, conf from dag_run where dag_id='iterate_kmeans'")
                    if f'"{cfg.job_id}"' in str(c)]
        states = dict(db.execute("select task_id, state from task_instance where dag_id='iterate_kmeans' "
                                 "and run_id=?", (run_id,)).fetchall())
    assert {t: s for t, s in states.items() if t.startswith(("epoch_0.", "epoch_1.", "epoch_2."))} == {
        f"epoch_{i}.{step}": "success" if step == "run" else "skipped" for i in range(3)
        for step in ("run", "align", "commit")}, states

    # OpenLineage: each head's COMPLETE event names the epoch it last committed and the
    # per-epoch outputs of every epoch it committed (the output centroid_history, one version each)
    heads = {e["job"]["name"].split(".", 1)[1]: e for e in lineage_events(lineage)
             if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".run")}
    versions = {task: sorted(o["facets"]["version"]["datasetVersion"] for o in e.get("outputs", []))
                for task, e in heads.items()}
    assert versions["epoch_0.run"] == [], versions
    assert len(versions["epoch_1.run"]) == 1 and len(versions["epoch_2.run"]) == 2, versions
    assert not set(versions["epoch_1.run"]) & set(versions["epoch_2.run"]), versions
    assert heads["epoch_1.run"]["run"]["facets"]["iterations"]["epoch"] == 0
    assert heads["epoch_2.run"]["run"]["facets"]["iterations"]["epoch"] == 2
