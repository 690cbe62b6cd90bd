"""The benchmark scripts measure what users run, and clean up after themselves.

- They import the tests' helpers (moto_server, free ports): doing so must not switch their JVMs
  to the tests' options (client compiler, serial collector), which ``tests/conftest.py`` set on
  import until 2026-11-29 and so slowed every benchmark's Spark since 2026-11-28.
- bench.sweep, stopped by SIGTERM (a ``kill``, a CI timeout), stops the run it watches: a sweep
  killed mid-run used to leave its ``run_job`` (and its Spark driver) or ``airflow dags test``
  running, and the embedded Connect server with them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from tests.conftest import ROOT

_SWEEP = """
import os, sys
from bench.sweep import _watch, exit_on_sigterm
exit_on_sigterm()
try:
    _watch([sys.executable, "-c", "import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(600)"],
           dict(os.environ))
finally:
    print("stopped", flush=True)
"""


def test_importing_the_tests_helpers_leaves_the_jvm_options_alone():
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    env["PYTHONPATH"] = ROOT
    got = subprocess.run([sys.executable, "-c", "import os, bench.common, tests.conftest, bench.sweep; "
                          "print(repr(os.environ.get('JAVA_TOOL_OPTIONS')))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.strip().splitlines()[-1] == "None", got.stdout


def test_the_tests_jvms_still_get_the_tests_options():
    """tests/conftest.py's pytest_configure sets them (a user's own are kept), and a JVM started
    from a test runs with them: the client compiler and the serial collector."""
    from tests.conftest import USER_JAVA_TOOL_OPTIONS
    from tests.jvm import tool_options

    expected = USER_JAVA_TOOL_OPTIONS if USER_JAVA_TOOL_OPTIONS is not None else tool_options()
    assert os.environ.get("JAVA_TOOL_OPTIONS") == expected
    if expected != tool_options():
        return  # a user's own options: nothing of the suite's to look for
    flags = subprocess.run(["java", "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, timeout=60)
    assert flags.returncode == 0, flags.stderr[-2000:]
    final = {line.split()[1]: line.split()[3] for line in flags.stdout.splitlines() if line.count("=") == 1
             and len(line.split()) >= 4}
    assert (final["TieredStopAtLevel"], final["UseSerialGC"]) == ("1", "true"), flags.stderr[-2000:]


def test_a_terminated_sweep_stops_the_run_it_watches(tmp_path):
    pid_file = tmp_path / "run.pid"
    sweep = subprocess.Popen([sys.executable, "-c", _SWEEP % str(pid_file)], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert sweep.poll() is None and time.monotonic() < deadline, "the watched run never started"
            time.sleep(0.1)
        run = int(pid_file.read_text())
        assert psutil.pid_exists(run)
        sweep.send_signal(signal.SIGTERM)
        out, _ = sweep.communicate(timeout=90)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 128 + signal.SIGTERM and "stopped" in out
    assert not psutil.pid_exists(run), f"the watched run {run} outlived the sweep"


_ADMITS = """
import json, sys
from include.store import roots_for_dag
roots = roots_for_dag({"input_path": "/tmp/iterations-demo/input", "checkpoint_root": "/tmp/x/store",
                       "output_path": "/tmp/x/output"})
for what, path in json.loads(sys.argv[1]).items():
    roots.admit(what, path)
print("admitted")
"""


def test_the_dag_benchmarks_deployment_allows_where_their_runs_read_and_write(tmp_path):
    """bench.orchestration's ``airflow dags test`` runs read, checkpoint and publish under the
    benchmarks' data directory, outside the DAG's own roots: the environment it gives Airflow
    must say, as a deployer would, that DAG runs may use it (without it every DAG run of the
    benchmark was refused: ``output_path ... is outside the allowed roots``)."""
    import json

    from bench.common import DATA
    from bench.orchestration import airflow_env

    env = airflow_env(str(tmp_path / "home"), 1)
    paths = {"input_path": f"{DATA}/graph.parquet", "checkpoint_root": f"{DATA}/bench-orch-x/dag0/store",
             "output_path": f"{DATA}/bench-orch-x/dag0/out"}
    done = subprocess.run([sys.executable, "-c", _ADMITS, json.dumps(paths)], env=env, capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "admitted" in done.stdout, done.stderr[-2000:]


def test_the_orchestration_benchmark_and_its_dag_runs_share_one_connect_server_state(tmp_path):
    """bench.orchestration's library runs use the Spark Connect server its DAG runs started:
    both must look for it in one state directory (the benchmark took the tests' helpers' local
    directory for its own, and refused the DAG runs' server as another checkout's)."""
    code = ("import sys; from bench.orchestration import bench_env; env = bench_env(sys.argv[1]); "
            "from spark_jobs import connect_server as c; "
            "print(c.STATE_DIR == env['ITERATIONS_SPARK_CONNECT_DIR'] == sys.argv[1] + '/spark-connect')")
    env = {k: v for k, v in os.environ.items() if k != "ITERATIONS_SPARK_CONNECT_DIR"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stdout + done.stderr[-2000:]
