"""The Airflow UI on this machine, for trying the DAGs by hand (docs/airflow.md, "Open the UI"):
``airflow standalone`` (api-server, scheduler, dag-processor, triggerer; SQLite under the local
directory) with settings that fit the machine, started in a session of its own so that a stop
reaches every process it made: its components, the executor's workers and their task processes,
and the embedded Spark Connect server the tasks started.

    ./run.sh ui                   # start (port ITERATIONS_UI_PORT, 8080 by default)
    ./run.sh ui stop              # stop everything it started
    ./run.sh ui status

``AIRFLOW__CORE__PARALLELISM`` (the LocalExecutor's worker processes, 32 by Airflow's default)
is set to twice the machine's cores, at least 4, and ``AIRFLOW__API__HOST`` to loopback (every
user is an admin), unless they are set already.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import urllib.request

from include.process.paths import LOCAL_DIR
from stack.procs import ROOT, session_members, spawn, stop_session, wait_until

#: the caller's Airflow home (AIRFLOW_HOME), else the embedded default's
HOME = os.environ.get("AIRFLOW_HOME") or os.path.join(LOCAL_DIR, "airflow")
PID_FILE = os.path.join(HOME, "standalone.pid")
LOG_FILE = os.path.join(HOME, "standalone.log")
AIRFLOW = os.path.join(os.path.dirname(sys.executable), "airflow")


def parallelism() -> int:
    """Worker processes for the LocalExecutor: two per core, at least 4 (an epoch's run task,
    its deferred sensor's next try and another DAG's task at once), not Airflow's 32."""
    return max(4, 2 * (os.cpu_count() or 1))


def environment(port: int) -> dict[str, str]:
    """The settings of docs/airflow.md's "Open the UI", over the caller's own; the caller's
    Airflow home and DAGs folder are kept (a body's own DAGs, docs/writing-a-body.md)."""
    env = dict(os.environ)
    env.setdefault("AIRFLOW__CORE__DAGS_FOLDER", os.path.join(ROOT, "dags"))
    env.update({
        "AIRFLOW_HOME": HOME,
        "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTOR": "iterations.executors.PreloadingLocalExecutor",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",
        # task logs read as sentences: no ``loc=file.py:123`` after each line
        "AIRFLOW__LOGGING__CALLSITE_PARAMETERS": "",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://localhost:{port}",
        "PYTHONPATH": ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
        # standalone starts its components as `airflow ...` from the PATH: this environment's
        "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
    })
    env.setdefault("AIRFLOW__CORE__PARALLELISM", str(parallelism()))
    # every user is an admin (the simple auth manager's setting above): on loopback only, unless
    # the caller says otherwise
    env.setdefault("AIRFLOW__API__HOST", "127.0.0.1")
    return env


def running() -> int | None:
    """The session id of the UI this command started, if it still runs."""
    try:
        sid = int(open(PID_FILE).read().strip())
    except (OSError, ValueError):
        return None
    return sid if session_members(sid) else None


#: what standalone runs besides the API server, each healthy (heartbeating) before the UI is ready
COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")


def health(port: int) -> dict | None:
    """The API server's health report on ``port``; None when nothing answers there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=2) as r:
            return json.load(r) if r.status == 200 else None
    except (OSError, ValueError):
        return None


def ready(port: int) -> bool:
    """The UI answers and every component standalone starts is healthy: a run triggered now is
    scheduled (the API server answers before the scheduler's first heartbeat, and a home used
    before still holds the last start's dead scheduler)."""
    report = health(port)
    return report is not None and all((report.get(c) or {}).get("status") == "healthy" for c in COMPONENTS)


def start(port: int, timeout: float) -> int:
    sid = running()
    if sid is not None:
        print(f"the Airflow UI runs already (session {sid}): http://localhost:{port}; stop it with ./run.sh ui stop")
        return 0
    if health(port) is not None:
        print(f"port {port} answers already (another Airflow?): choose another with ITERATIONS_UI_PORT", file=sys.stderr)
        return 1
    os.makedirs(HOME, exist_ok=True)
    env = environment(port)
    proc = spawn([AIRFLOW, "standalone"], env, LOG_FILE)
    with open(PID_FILE, "w") as f:
        f.write(str(proc.pid))
    print(f"starting airflow standalone (parallelism {env['AIRFLOW__CORE__PARALLELISM']}, log {LOG_FILE})", flush=True)
    try:
        wait_until(f"the Airflow UI on port {port} and its {', '.join(COMPONENTS[1:])} healthy",
                   lambda: ready(port), timeout, LOG_FILE, proc)
    except (RuntimeError, TimeoutError) as e:
        print(e, file=sys.stderr)
        stop()
        return 1
    print(f"the Airflow UI: http://localhost:{port} (stop everything it starts with ./run.sh ui stop)")
    return 0


def stop() -> int:
    """Stop the UI's session (every process in it), then the embedded Spark Connect server."""
    import subprocess

    sid = running()
    members = session_members(sid) if sid is not None else []
    killed = stop_session(sid, grace=30) if sid is not None else []
    if os.path.exists(PID_FILE):
        os.remove(PID_FILE)
    connect = subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    if sid is None:
        print("the Airflow UI was not running")
    else:
        print(f"stopped the Airflow UI: {len(members)} processes"
              + (f" ({len(killed)} did not stop within 30 s and were killed)" if killed else ""))
    if connect.stdout.strip():
        print(connect.stdout.strip())
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="./run.sh ui", description=__doc__.split("\n\n")[0])
    p.add_argument("action", nargs="?", default="start", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=int(os.environ.get("ITERATIONS_UI_PORT") or 8080))
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the UI to answer")
    args = p.parse_args(argv)
    if args.action == "stop":
        return stop()
    if args.action == "status":
        sid = running()
        print(f"running (session {sid}) on http://localhost:{args.port}" if sid else "not running")
        return 0
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return start(args.port, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
