"""Preloading the runtime's heavy modules in a process that forks task processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from include.errors import ConfigError
from include.process.preloading import DEFAULT_MODULES, parse_modules, preload
from tests.conftest import ROOT


def test_parse_modules_defaults_empty_and_list():
    assert parse_modules(None) == DEFAULT_MODULES
    assert parse_modules("") == ()
    assert parse_modules(" json.decoder , csv ,") == ("json.decoder", "csv")


@pytest.mark.parametrize("text, bad", [("great-expectations", "'great-expectations'"),
                                       ("csv, pyspark.sql..connect", "'pyspark.sql..connect'"),
                                       ("1module", "'1module'")])
def test_parse_modules_names_a_bad_name(text, bad):
    with pytest.raises(ConfigError, match=rf"preload_modules: {bad} is not a module name"):
        parse_modules(text)


def test_preload_reports_seconds_and_names_a_missing_module():
    imported = []
    seconds = preload(["a.b", "c"], importer=imported.append)
    assert imported == ["a.b", "c"] and set(seconds) == {"a.b", "c"} and all(s >= 0 for s in seconds.values())
    with pytest.raises(ConfigError, match=r"cannot import 'no_such_module_xyz'"):
        preload(["csv", "no_such_module_xyz"])


def test_a_forked_process_finds_great_expectations_preloaded():
    """What the executor relies on: modules preloaded before a fork are there in the child, and
    the child's first data-check validation makes its context without importing them again
    (its log line says so), and its first S3 client without reading S3's service description;
    preloading is quiet (none of Great Expectations' INFO logging)."""
    script = textwrap.dedent("""
        import logging, os, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
        from include.process.preloading import DEFAULT_MODULES, preload
        seconds = preload(DEFAULT_MODULES)
        assert set(seconds) == set(DEFAULT_MODULES), seconds
        pid = os.fork()
        if pid == 0:
            from include.checks.gx import _gx
            _gx()
            import botocore.loaders
            from include.store.s3 import S3Store
            def no_read(*args, **kwargs):
                raise AssertionError(f"read from disk after the preload: {args}")
            botocore.loaders.JSONFileLoader.load_file = no_read  # S3's description parsed already
            store = S3Store("a-bucket", endpoint_url="http://127.0.0.1:9", access_key_id="k", secret_access_key="s")
            assert store.client.meta.region_name == "us-east-1"
            sys.stdout.flush()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for module in DEFAULT_MODULES:
        assert f"iterations preloaded {module} in" in out, out
    assert "Great Expectations ready in" in out and "its modules were preloaded" in out, out
    assert "imported by this process" not in out, out
    assert "great_expectations" not in out.replace("preloaded great_expectations", ""), \
        f"Great Expectations logged while preloading: {out}"


@pytest.mark.parametrize("hook", ["executor", "celery"])
def test_the_executor_and_the_celery_workers_preload_the_configured_modules(hook, tmp_path):
    """``PreloadingLocalExecutor.start`` imports ``[iterations] preload_modules`` and then starts
    as LocalExecutor does (its queues made); a Celery worker configured with
    ``iterations.celery_preload.CELERY_CONFIG`` imports them when Celery sends ``worker_init``,
    with Airflow's Celery configuration otherwise unchanged. A module that does not import stops
    either."""
    script = textwrap.dedent(f"""
        import sys
        hook = {hook!r}
        if hook == "executor":
            from iterations.executors import PreloadingLocalExecutor
            executor = PreloadingLocalExecutor(parallelism=1)
            executor.start()
            try:
                assert executor.activity_queue is not None  # LocalExecutor's start ran
            finally:
                executor.end()  # its workers: forked after the preload
        else:
            from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
            from celery.signals import worker_init
            from iterations.celery_preload import CELERY_CONFIG
            assert {{k: v for k, v in CELERY_CONFIG.items() if k != "task_publish_retry_policy"}} == DEFAULT_CELERY_CONFIG
            worker_init.send(sender=None)
        assert "csv" in sys.modules and "xml.dom.minidom" in sys.modules
    """)
    env = {**os.environ, "PYTHONPATH": ROOT, "AIRFLOW_HOME": str(tmp_path),
           "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__ITERATIONS__PRELOAD_MODULES": "csv,xml.dom.minidom"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Preloaded for the task processes in" in done.stdout + done.stderr
    env["AIRFLOW__ITERATIONS__PRELOAD_MODULES"] = "csv,no_such_module_xyz"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "cannot import 'no_such_module_xyz'" in done.stderr, done.stdout + done.stderr


def test_a_broker_outage_makes_a_publish_time_out_which_the_executor_retries():
    """Found by the chaos run (``redis``): with Celery's own publish retry policy a refused
    connection to the broker raised within a second, which Airflow's Celery executor takes as
    the task's try failed (three tries spent in the seconds Redis took to restart, the DAG run
    failed). With ``CELERY_CONFIG``'s policy the publish retries until Airflow's
    ``operation_timeout`` fires: an AirflowTaskTimeout, which the executor keeps queued and
    sends again (``task_publish_max_retries``, set with the timeout by the stack and the
    compose file)."""
    script = textwrap.dedent("""
        import time
        from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
        from airflow.sdk.exceptions import AirflowTaskTimeout
        from airflow.utils.timeout import timeout
        from celery import Celery
        from iterations.celery_preload import CELERY_CONFIG
        from stack.procs import free_port

        dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
        for name, config in (("default", DEFAULT_CELERY_CONFIG), ("ours", CELERY_CONFIG)):
            app = Celery(config_source={**config, "broker_url": dead})
            started = time.monotonic()
            try:
                with timeout(seconds=2):
                    app.send_task("execute_workload", args=["{}"], queue="default")
                outcome = "sent"
            except AirflowTaskTimeout:
                outcome = "timed out"
            except Exception as e:
                outcome = type(e).__name__
            print(name, outcome, round(time.monotonic() - started, 1))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "plugins")]),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("default ", "ours ")))
    assert lines["default"].startswith("OperationalError"), done.stdout
    assert lines["ours"].startswith("timed out"), done.stdout


def test_the_deployments_publish_with_a_timeout_the_retry_policy_outlasts():
    """The stack and the compose file set ``[celery] operation_timeout`` shorter than the
    publish retry policy's span and ``task_publish_max_retries`` for minutes of outage."""
    import yaml

    from iterations.celery_preload import PUBLISH_RETRY_POLICY
    from stack.services import Stack

    p = PUBLISH_RETRY_POLICY
    span = sum(min(p["interval_start"] + i * p["interval_step"], p["interval_max"]) for i in range(p["max_retries"]))
    stack = Stack("/nonexistent", state={"secrets": dict.fromkeys(
        ("postgres_password", "redis_password", "jwt_secret", "api_secret_key", "fernet_key", "s3_secret"), "x"),
        "ports": dict.fromkeys(("postgres", "redis", "airflow", "moto", "spark_connect", "spark_master",
                                "triggerer_logs"), 1)})
    compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yaml")))
    for env in (stack.airflow_env(), compose["x-airflow-env"]):
        timeout = float(env["AIRFLOW__CELERY__OPERATION_TIMEOUT"])
        assert 1 <= timeout < span, (timeout, span)
        assert timeout * int(env["AIRFLOW__CELERY__TASK_PUBLISH_MAX_RETRIES"]) >= 240
