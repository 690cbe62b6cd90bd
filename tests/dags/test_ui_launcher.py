"""``./run.sh ui`` (stack/ui.py): airflow standalone with a parallelism that fits the machine, on
loopback and the port asked for, and ``./run.sh ui stop`` stopping every process it started: the
commands of docs/airflow.md's "Open the UI", as written (the ports made free ones)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from stack.procs import session_members
from tests.conftest import ROOT, free_port
from tests.docs import block

pytestmark = pytest.mark.slow


def sh(env, command: str, timeout=400):
    return subprocess.run(["bash", "-c", command], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def ui(env, *args, timeout=400):
    return subprocess.run([sys.executable, "-m", "stack.ui", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")
    except OSError:  # gone between the listing and the read
        return ""


def test_the_ui_starts_fitted_to_the_machine_and_stops_every_process(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"ITERATIONS_LOCAL_DIR": str(tmp_path), "ITERATIONS_UI_PORT": str(port),
                "ITERATIONS_SPARK_CONNECT_DIR": str(tmp_path / "spark-connect"),
                "ITERATIONS_SPARK_CONNECT_PORT": str(free_port())})
    start, start_on_a_port, stop = block("docs/airflow.md", "./run.sh ui").commands()
    assert (start, stop) == ("./run.sh ui", "./run.sh ui stop") and "ITERATIONS_UI_PORT=8090" in start_on_a_port
    started = sh(env, start)
    assert started.returncode == 0, started.stdout + started.stderr
    assert f"the Airflow UI: http://localhost:{port}" in started.stdout
    sid = int((tmp_path / "airflow" / "standalone.pid").read_text())
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=10) as r:
            health = json.load(r)
        # it returned once every component heartbeats, not when the API server first answered
        assert {c: health[c]["status"] for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")} \
            == dict.fromkeys(("metadatabase", "scheduler", "triggerer", "dag_processor"), "healthy"), health
        # the scheduler forks its workers at once, but each names itself only once it runs
        deadline = time.monotonic() + 60
        while True:
            members = session_members(sid)
            args = {pid: cmdline(pid) for pid in members}
            workers = [a for a in args.values() if "LocalExecutor" in a]
            if len(workers) >= max(4, 2 * (os.cpu_count() or 1)) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(workers) == max(4, 2 * (os.cpu_count() or 1)), args
        # task logs read as sentences: no callsite after each line
        scheduler = next(pid for pid, a in args.items() if "scheduler" in a)
        environ = dict(v.split("=", 1) for v in open(f"/proc/{scheduler}/environ").read().split("\0") if "=" in v)
        assert environ.get("AIRFLOW__LOGGING__CALLSITE_PARAMETERS") == ""
        api = [a for a in args.values() if "api_server" in a]
        assert api and f"host:127.0.0.1 port:{port}" in api[0], api
        again = sh(env, start_on_a_port.replace("8090", str(free_port())))
        assert "already" in again.stdout, "a second start finds the first"
        # a Spark Connect server of this local directory started outside the UI (the demo's, a
        # DAG run's): the UI's stop stops it too, and says so
        connect = subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "start"], env=env, cwd=ROOT,
                                 capture_output=True, text=True, timeout=300)
        assert connect.returncode == 0, connect.stderr[-3000:]
    finally:
        stopped = sh(env, stop)
    assert stopped.returncode == 0 and f"stopped the Airflow UI: {len(members)} processes" in stopped.stdout, \
        stopped.stdout + stopped.stderr
    assert f"stopped the Spark Connect server on 127.0.0.1:{env['ITERATIONS_SPARK_CONNECT_PORT']}" in stopped.stdout, \
        stopped.stdout + stopped.stderr
    assert session_members(sid) == [], "every process of its session stopped"
    assert "not running" in ui(env, "status").stdout
