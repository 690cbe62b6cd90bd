"""An isolated Airflow home (SQLite) and an embedded Spark Connect server for the DAG tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from include.process import failpoints
from stack.services import Stack
from tests import warm_airflow
from tests.conftest import ROOT, free_port
from tests.jvm import long_lived_env

AIRFLOW = os.path.join(os.path.dirname(sys.executable), "airflow")


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow_home")
    connect_dir = tmp_path_factory.mktemp("spark_connect")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(ROOT, "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "PYTHONPATH": ROOT,
        "PYSPARK_PYTHON": sys.executable,
        "ITERATIONS_SPARK_CONNECT_PORT": str(free_port()),
        "ITERATIONS_SPARK_CONNECT_DIR": str(connect_dir),
        # failure points a test arms for one run (tests/faults/airflow_sweep.py): read by every
        # process, the shared Spark Connect server's Python workers included; empty otherwise
        "ITERATIONS_FAILPOINTS_FILE": str(connect_dir / "failpoints"),
        "ITERATIONS_FAILPOINT_DIR": str(tmp_path_factory.mktemp("failpoints_fired")),
        # a failed task's retry after 1 s, not the DAGs' 10: `dags test` waits out the delay
        "ITERATIONS_RETRY_DELAY_SECONDS": "1",
    }
    (connect_dir / "failpoints").write_text("")
    env.pop("ITERATIONS_DRIVER_PID", None)
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    # the embedded Spark Connect server, started here (else the first DAG run would): it serves
    # every DAG test of this worker, with the long-lived JVM's settings (tests/jvm.py)
    subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "start"], env=long_lived_env(env), cwd=ROOT,
                   check=True, capture_output=True, timeout=300)
    # every `airflow dags test` / `tasks test` with this home is forked from one warm process
    server = warm_airflow.WarmAirflow(env, ROOT)
    warm_airflow.SERVERS.append(server)
    try:
        yield env
    finally:
        warm_airflow.SERVERS.remove(server)
        server.close()
    subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], env=env, cwd=ROOT,
                   capture_output=True, timeout=120)


@pytest.fixture
def connect_url(airflow_env):
    """The embedded Spark Connect server's URL (started unless it runs for the DAG tests)."""
    started = subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "start"], env=airflow_env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    url = started.stdout.strip().splitlines()[-1]
    assert url.startswith("sc://127.0.0.1:")
    return url


def airflow(env, *args, timeout=900) -> subprocess.CompletedProcess:
    """``airflow <args>`` run as ``subprocess.run`` would, forked from the warm server
    (tests/warm_airflow.py) when ``env`` is the DAG tests' Airflow home."""
    return warm_airflow.run(env, *args, cwd=ROOT, timeout=timeout)


def start_airflow(env, *args, log_path) -> "warm_airflow.WarmProcess | subprocess.Popen":
    """``airflow <args>`` started in the background, its output to ``log_path``."""
    return warm_airflow.start(env, *args, log_path=str(log_path), cwd=ROOT)


@pytest.fixture(scope="package")  # stopped once the DAG tests are done, not at the end of the session
def api_server(tmp_path_factory, moto_endpoint):
    """``airflow api-server`` alone (tests.dags.airflow_server.ApiServer), with password users and
    an ``aws_default`` connection to moto_server (no AWS credentials in its environment)."""
    import json

    from tests.dags.airflow_server import ApiServer

    server = ApiServer(str(tmp_path_factory.mktemp("airflow_api")), str(tmp_path_factory.mktemp("spark_connect_api")))
    server.env = {k: v for k, v in server.env.items() if not k.startswith("AWS_")}
    server.env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(
        {"conn_type": "aws", "login": "view-key-id", "password": "view-secret-key",
         "extra": {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}})
    warm = None
    try:
        server.start()
        # the view tests' `airflow dags test` and `dags reserialize` with this home: forked warm
        warm = warm_airflow.WarmAirflow(server.env, ROOT)
        warm_airflow.SERVERS.append(warm)
        yield server
    finally:
        if warm is not None:
            warm_airflow.SERVERS.remove(warm)
            warm.close()
        server.stop()


@pytest.fixture(scope="package")
def view_dag_runs(api_server, view_stores):
    """The finished job's batches ``b1`` and ``b2`` (run by the library runner) recorded as runs of
    ``iterate_pagerank`` in the API server's database, with the job's params, and marked
    successful (the DAG serialized with ``airflow dags reserialize``; no scheduler runs them)."""
    from tests.helpers import FINISHED_JOB

    done = api_server.cli("dags", "reserialize")
    assert done.returncode == 0, done.stderr[-3000:]
    conf = {"job_id": FINISHED_JOB, "checkpoint_root": view_stores.root, "output_path": view_stores.output_path,
            "continuation": False}
    for batch in view_stores.batches:
        api_server.post("/api/v2/dags/iterate_pagerank/dagRuns", {"dag_run_id": batch, "logical_date": None,
                                                                   "conf": conf})
        api_server._request("PATCH", f"/api/v2/dags/iterate_pagerank/dagRuns/{batch}", {"state": "success"})
    return list(view_stores.batches)


def asset_events(env, uri: str) -> list[dict]:
    """The asset events Airflow (the SQLite database of ``env``'s AIRFLOW_HOME) holds of the
    Asset ``uri``, oldest first: each with its extra and the DAG, task and run that emitted it."""
    import sqlite3

    with sqlite3.connect(os.path.join(env["AIRFLOW_HOME"], "airflow.db")) as db:
        rows = db.execute(
            "SELECT e.extra, e.source_dag_id, e.source_task_id, e.source_run_id FROM asset_event e "
            "JOIN asset a ON a.id = e.asset_id WHERE a.uri = ? ORDER BY e.id", (uri,)).fetchall()
    return [{"extra": json.loads(extra) if extra else {}, "dag_id": dag, "task_id": task, "run_id": run}
            for extra, dag, task, run in rows]


# --- the native production stack (tests/dags/test_stack.py, tests/dags/test_cluster.py) -------

EPOCHS_PER_BATCH = 2  # a job of 3 epochs is two DAG runs: the first batch and a continuation
CHECKPOINTS, OUTPUTS = "s3://iterations-checkpoints/ckpt", "s3://iterations-outputs"
SETTINGS = {
    "ITERATIONS_EPOCHS_PER_BATCH": str(EPOCHS_PER_BATCH),
    "ITERATIONS_RETRY_DELAY_SECONDS": "2",
    # a killed worker is noticed in seconds, not the default 5 minutes
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "3",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # the tests unpause what they run
    # a task marked failed or success in the UI is stopped at its next heartbeat
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
    # idle CPU between the tests' runs, a third of the compose file's: the DAG files are parsed at
    # the start and never change (a deployment parses them again every 30 s), and an idle
    # scheduler loops twice a second, not four times (bench/RESULTS.md, "Test suite")
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
}


@pytest.fixture(scope="session")
def stack_holds(tmp_path_factory):
    """Where the failure points of the stack's task processes (every Celery worker) and of its
    Spark workers' executors wait: ``armed`` lists them (tests.helpers.armed)."""
    where = tmp_path_factory.mktemp("failpoints")
    (where / "armed").write_text("")
    return str(where)


@pytest.fixture(scope="session")
def stack(tmp_path_factory, stack_holds):
    """The native production stack (stack/, ``./run.sh stack``), started once for the stack's
    tests and the cluster's (tests/dags/test_cluster.py runs its DAGs on the stack's Spark
    cluster): xdist runs both modules on one worker (tests/conftest.py, SHARED_SCOPES);
    test_stack.py's last test stops it."""
    holds = stack_holds
    home = str(tmp_path_factory.mktemp("stack"))
    # the task processes (every worker) and the Spark Connect server's Python workers (on the
    # Spark workers' executors) read the same failure points; every task process appends its
    # commits and publications to one trace (tests/faults/sweep.audit)
    points = {failpoints.FILE_ENV: os.path.join(holds, "armed"), failpoints.DIR_ENV: holds}
    # OpenLineage on, to a file (the provider's file transport): every task process appends to it
    lineage = {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
        {"type": "file", "log_file_path": os.path.join(holds, "openlineage.jsonl"), "append": True})}
    settings = {**SETTINGS, **points, **lineage, failpoints.TRACE_ENV: os.path.join(holds, "trace.jsonl")}
    argv = [sys.executable, "-m", "stack", "start", "--home", home,
            *[a for k, v in settings.items() for a in ("--setting", f"{k}={v}")],
            *[a for k, v in points.items() for a in ("--spark-worker-setting", f"{k}={v}")]]
    started = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    st = Stack(home)
    try:
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-5000:]
        assert f"Airflow UI and API   {st.url}" in started.stdout, started.stdout
        yield st
    finally:
        st.stop()  # nothing left when the last test stopped it
