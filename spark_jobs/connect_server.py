"""The embedded warm session: a Spark Connect server on loopback, started once and shared by
every epoch task (each task is a short-lived client, so no task pays a JVM start).

    python -m spark_jobs.connect_server start|stop|status
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import socket
import subprocess
import sys
import time

from include.paths import LOCAL_DIR
from include.sizing import connect_server_heap
from spark_jobs.session import driver_java_options

log = logging.getLogger(__name__)

DEFAULT_PORT = int(os.environ.get("ITERATIONS_SPARK_CONNECT_PORT", "15002"))
STATE_DIR = os.environ.get("ITERATIONS_SPARK_CONNECT_DIR", os.path.join(LOCAL_DIR, "spark-connect"))
# The server's Python daemons with no worker that are older than this are stopped (reap_idle_daemons)
DAEMON_IDLE_SECONDS = 120.0


def is_python_daemon(cmdline: list[str]) -> bool:
    """Whether a command line is pyspark's daemon (``python -m pyspark.daemon [worker module]``)."""
    return any(a == "-m" and b == "pyspark.daemon" for a, b in zip(cmdline, cmdline[1:]))


def spark_home() -> str:
    """The Spark installation pyspark ships (bin/, sbin/, jars/)."""
    import pyspark

    return os.path.dirname(pyspark.__file__)


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": spark_home(),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": os.path.join(STATE_DIR, "logs"),
        "SPARK_PID_DIR": STATE_DIR,
    }


def ensure(port: int = DEFAULT_PORT, master: str = "local[2]", timeout: float = 120.0) -> str:
    """Start the server unless it is already listening; return its ``sc://`` URL."""
    url = f"sc://127.0.0.1:{port}"
    if listening(port):
        try:
            reap_idle_daemons(port)
        except Exception:  # housekeeping: never the reason an epoch fails
            log.warning("could not look for idle Python daemons of the Spark Connect server on port %d", port,
                        exc_info=True)
        return url
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(os.path.join(STATE_DIR, "start.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time; the others find it listening
        if listening(port):
            return url
        script = os.path.join(spark_home(), "sbin", "start-connect-server.sh")
        heap, why = connect_server_heap()
        log.info("starting the Spark Connect server on 127.0.0.1:%d, heap %s (%s)", port, heap, why)
        subprocess.run(
            ["bash", script, "--master", master,
             # the server is the driver (and, in local mode, the executors) of every epoch of
             # every job: its heap is sized from the machine unless set
             # (include.sizing.connect_server_heap; Spark's default 1g collects in full
             # during a run: bench/RESULTS.md)
             "--driver-memory", heap,
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.shuffle.partitions=8",
             "--conf", "spark.ui.showConsoleProgress=false",
             "--conf", f"spark.driver.extraJavaOptions={driver_java_options()}"],
            env=_env(), check=True, capture_output=True, text=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if listening(port):
                return url
            time.sleep(0.5)
    raise RuntimeError(f"Spark Connect server did not listen on 127.0.0.1:{port} within {timeout:.0f}s; "
                       f"see the logs in {os.path.join(STATE_DIR, 'logs')}")


def server_process(port: int = DEFAULT_PORT):
    """The server's JVM (a ``psutil.Process``) bound to ``port``, by the pid file Spark's start
    script wrote in ``STATE_DIR``; None if there is none or the pid is not that server."""
    import psutil

    for pid_file in glob.glob(os.path.join(STATE_DIR, "spark-*SparkConnectServer-*.pid")):
        try:
            with open(pid_file) as f:
                proc = psutil.Process(int(f.read().strip()))
            if f"spark.connect.grpc.binding.port={port}" in proc.cmdline():
                return proc
        except (OSError, ValueError, psutil.Error):
            continue
    return None


def python_daemons(server) -> list:
    """The Python daemons the server (a ``psutil.Process``) started: its children whose command
    line is ``python -m pyspark.daemon [worker module]``; none if the server is gone."""
    import psutil

    try:
        children = server.children()
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if is_python_daemon(child.cmdline()):
                found.append(child)
        except psutil.Error:  # gone meanwhile
            continue
    return found


def reap_idle_daemons(port: int = DEFAULT_PORT, idle: float = DAEMON_IDLE_SECONDS) -> list[int]:
    """Stop the server's Python daemons that have no worker and are older than ``idle`` seconds;
    return their pids.

    pyspark 4.3 gives every client session a Python worker factory of its own (keyed by the
    session's artifact UUID) and never removes it (SPARK-54055): each session leaves its
    ``pyspark.daemon`` processes running until the server stops, so on the embedded default
    every batch of epochs would grow the server by three processes for ever
    (bench/RESULTS.md, "The Spark Connect server's Python processes"). Spark already stops a
    daemon's idle workers after a minute; a daemon left with none, older than ``idle``, serves
    a session that ended or has been idle a minute (``SIGTERM``: the daemon stops its process
    group and exits). If its session needs Python again, Spark finds the daemon gone and
    starts another ("Assuming that daemon unexpectedly quit, attempting to restart").
    Called by ``ensure``, that is by every epoch task on the embedded server."""
    import psutil

    server = server_process(port)
    if server is None:
        return []
    now = time.time()
    reaped = []
    for child in python_daemons(server):
        try:
            if now - child.create_time() < idle or child.children():
                continue
            child.terminate()
            reaped.append(child.pid)
        except psutil.Error:  # gone meanwhile, or not ours to signal
            continue
    if reaped:
        log.info("stopped %d idle Python daemon(s) of the Spark Connect server on port %d (pids %s): "
                 "no worker and older than %.0fs; Spark starts one again when a session needs it",
                 len(reaped), port, ", ".join(map(str, reaped)), idle)
    return reaped


def stop() -> None:
    script = os.path.join(spark_home(), "sbin", "stop-connect-server.sh")
    subprocess.run(["bash", script], env=_env(), check=False, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    command = (argv or sys.argv[1:] or ["status"])[0]
    if command == "start":
        print(ensure())
    elif command == "stop":
        stop()
    elif command == "status":
        print("listening" if listening(DEFAULT_PORT) else "not running", f"on 127.0.0.1:{DEFAULT_PORT}")
    else:
        print("usage: python -m spark_jobs.connect_server start|stop|status", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
