"""bench.orchestration reads the epochs' Spark work and a DAG run's phases from logs: a change of
the runtime's log line or of Airflow's would silently zero its "outside the Spark work" table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.orchestration import dag_phases, spark_work

ROOT = Path(__file__).resolve().parents[2]


def epoch_line(epoch: int, static: float, restore: float, step: float) -> str:
    """The executor's per-epoch line, formatted with the format string in its source."""
    source = (ROOT / "spark_jobs" / "epoch.py").read_text()
    fmt = re.search(r'log\.info\("(job %s epoch %d attempt %s: static input[^"]*)"', source)
    assert fmt, "the executor's per-epoch timing line is gone from spark_jobs/epoch.py"
    return fmt.group(1) % ("j", epoch, f"a{epoch}-x", static, "loaded", restore, "none", step)


def test_spark_work_sums_every_epochs_input_restore_and_step():
    log = "\n".join([
        "something else 9.99s",
        epoch_line(0, 3.58, 0.0, 7.47),
        epoch_line(1, 0.0, 0.25, 2.5),
    ])
    assert spark_work(log) == pytest.approx(3.58 + 7.47 + 0.25 + 2.5)
    assert spark_work("no epochs here") == 0


def test_dag_phases_from_a_dags_test_log():
    stamp = "2026-11-25T05:19:{:09.6f}Z [info     ] "
    log = "\n".join([
        stamp.format(3.0) + "creating dag run               [airflow.serialization.definitions.dag]",
        stamp.format(3.5) + "[DAG TEST] starting task_id=epoch_0.run map_index=-1 [airflow.sdk.definitions.dag]",
        stamp.format(8.0) + "Task started                   [airflow.api_fastapi.execution_api.routes]",
        stamp.format(20.0) + epoch_line(0, 2.0, 0.0, 6.0) + " [iterations] loc=epoch.py:169",
        stamp.format(21.0) + "[DAG TEST] starting task_id=epoch_0.align map_index=-1 [airflow.sdk.definitions.dag]",
        stamp.format(22.0) + "Task started                   [airflow.api_fastapi.execution_api.routes]",
        stamp.format(40.0) + "DagRun Finished: dag_id=iterate_pagerank, state=success [airflow.models.dagrun.DagRun]",
    ])
    started_at = 1795583941.0  # 2026-11-25T05:19:01Z
    phases = dag_phases(log, started_at, started_at + 40.0)
    assert phases == pytest.approx({
        "start-up": 2.5,  # until the first task starts
        "first task's API": 4.5,  # 3.5 -> 8.0
        "Spark work": 8.0,
        "tasks, rest": 40.0 - 3.5 - 4.5 - 8.0,
        "exit": 1.0,
    })


def test_dag_phases_of_a_log_without_a_finished_run_is_empty():
    assert dag_phases("2026-11-25T05:19:03.000000Z [info] creating dag run", 0.0, 1.0) == {}
