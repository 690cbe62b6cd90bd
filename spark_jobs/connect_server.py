"""The embedded warm session: a Spark Connect server on loopback, started once and shared by
every epoch task (each task is a short-lived client, so no task pays a JVM start).

    python -m spark_jobs.connect_server start|stop|status

The server is this project's for this ``ITERATIONS_LOCAL_DIR`` only: one whose pid file is in
``STATE_DIR`` and whose command line carries this state directory's token (``ours``). A server of
anybody else's on the port (another user's, another checkout's) is never used: with the default
port, this project starts its own on a free port and records it (``server.json`` in
``STATE_DIR``, which every later task reads); with ``ITERATIONS_SPARK_CONNECT_PORT`` set, ensure
fails naming the port.
"""

from __future__ import annotations

import fcntl
import glob
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import time

from include.contract import connect_server_heap
from include.process import LOCAL_DIR, PYSPARK_PYTHON, SPARK_CONNECT_DIR, SPARK_CONNECT_PORT
from spark_jobs.session import driver_java_options

log = logging.getLogger(__name__)

PORT_ENV = SPARK_CONNECT_PORT.name
#: the port asked for (``PORT_ENV``, else 15002); ``PORT_GIVEN``: whether the deployer chose it
DEFAULT_PORT = SPARK_CONNECT_PORT.get()
PORT_GIVEN = SPARK_CONNECT_PORT.is_set()
STATE_DIR = SPARK_CONNECT_DIR.get() or os.path.join(LOCAL_DIR, "spark-connect")
#: the server's command line carries ``TOKEN_CONF=<this state directory's token>``
TOKEN_CONF = "spark.iterations.server.token"
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
        "PYSPARK_PYTHON": PYSPARK_PYTHON.get() or sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": os.path.join(STATE_DIR, "logs"),
        "SPARK_PID_DIR": STATE_DIR,
    }


def token() -> str:
    """This state directory's token (made once, readable by its owner only)."""
    path = os.path.join(STATE_DIR, "token")
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        os.makedirs(STATE_DIR, exist_ok=True)
        value = secrets.token_hex(16)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            with open(path) as f:
                return f.read().strip()
        with os.fdopen(fd, "w") as f:
            f.write(value)
        return value


def ours(port: int) -> bool:
    """Whether the server on ``port`` is the one this project started for this state directory:
    its pid file is in ``STATE_DIR`` and its command line has no token but this directory's (a
    server started before tokens has none)."""
    proc = server_process(port)
    if proc is None:
        return False
    try:
        tokens = [a for a in proc.cmdline() if a.startswith(f"{TOKEN_CONF}=")]
    except Exception:  # gone, or not readable: not one to use
        return False
    return not tokens or tokens == [f"{TOKEN_CONF}={token()}"]


def recorded_port() -> int | None:
    """The port ``ensure`` last started (or found) this project's server on (``server.json``)."""
    try:
        with open(os.path.join(STATE_DIR, "server.json")) as f:
            port = json.load(f)["port"]
        return port if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record(port: int) -> None:
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = os.path.join(STATE_DIR, f".server.json.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({"port": port}, f)
    os.replace(tmp, os.path.join(STATE_DIR, "server.json"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(port: int) -> str:
    """``port``'s server is ours and listening: its URL, after the housekeeping."""
    try:
        reap_idle_daemons(port)
    except Exception:  # housekeeping: never the reason an epoch fails
        log.warning("could not look for idle Python daemons of the Spark Connect server on port %d", port,
                    exc_info=True)
    if recorded_port() != port:
        _record(port)
    return f"sc://127.0.0.1:{port}"


def _running(port: int | None = None, given: bool = False) -> int | None:
    """The port of this project's server, if it is up, that ``ensure`` may use: ``port`` when it
    was given, else ``port`` (the default port when None) or the one recorded."""
    port = DEFAULT_PORT if port is None else port
    candidates = [port] if given else [port, recorded_port()]
    for p in dict.fromkeys(c for c in candidates if c is not None):
        if listening(p) and ours(p):
            return p
    return None


def ensure(port: int | None = None, master: str = "local[2]", timeout: float = 120.0) -> str:
    """This project's server for this ``ITERATIONS_LOCAL_DIR`` (module docstring): the running
    one, else one started now; its ``sc://`` URL. ``port`` (or ``ITERATIONS_SPARK_CONNECT_PORT``)
    names the port it must be on: held by a server that is not this project's, RuntimeError
    naming it. Without either, the default port is used if free or ours, else a free one."""
    given = port is not None or PORT_GIVEN
    want = port if port is not None else DEFAULT_PORT
    if (up := _running(want, given)) is not None:
        return _ready(up)
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(os.path.join(STATE_DIR, "start.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time; the others find it listening
        if (up := _running(want, given)) is not None:
            return _ready(up)
        if listening(want):
            if given:
                raise RuntimeError(
                    f"the Spark Connect port {want} ({PORT_ENV if port is None else 'asked for'}) is held by a "
                    f"server this project did not start for {STATE_DIR} (another user's or checkout's): its jobs "
                    f"and data must not go there; choose a free port or stop that server")
            taken, want = want, free_port()
            log.warning("the Spark Connect port %d is held by a server this project did not start for %s (another "
                        "user's or checkout's): starting this project's own on port %d", taken, STATE_DIR, want)
        script = os.path.join(spark_home(), "sbin", "start-connect-server.sh")
        heap, why = connect_server_heap()
        log.info("starting the Spark Connect server on 127.0.0.1:%d, heap %s (%s)", want, heap, why)
        subprocess.run(
            ["bash", script, "--master", master,
             # the server is the driver (and, in local mode, the executors) of every epoch of
             # every job: its heap is sized from the machine unless set
             # (include.contract.sizing.connect_server_heap; Spark's default 1g collects in full
             # during a run: bench/RESULTS.md)
             "--driver-memory", heap,
             "--conf", f"spark.connect.grpc.binding.port={want}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", f"{TOKEN_CONF}={token()}",
             "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.shuffle.partitions=8",
             "--conf", "spark.ui.showConsoleProgress=false",
             "--conf", f"spark.driver.extraJavaOptions={driver_java_options()}"],
            env=_env(), check=True, capture_output=True, text=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if listening(want):
                if not ours(want):  # another process took the port as ours started
                    raise RuntimeError(f"the Spark Connect port {want} was taken by a server this project did "
                                       f"not start; see the logs in {os.path.join(STATE_DIR, 'logs')}")
                _record(want)
                return f"sc://127.0.0.1:{want}"
            time.sleep(0.5)
    raise RuntimeError(f"Spark Connect server did not listen on 127.0.0.1:{want} within {timeout:.0f}s; "
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


def stop() -> str:
    """Stop this project's server (the one Spark's start script recorded in ``STATE_DIR``);
    what was done, in words."""
    port = _running()
    proc = server_process(port) if port is not None else None
    script = os.path.join(spark_home(), "sbin", "stop-connect-server.sh")
    subprocess.run(["bash", script], env=_env(), check=False, capture_output=True)
    if proc is None:
        return f"no Spark Connect server of this project's was running (state directory {STATE_DIR})"
    return f"stopped the Spark Connect server on 127.0.0.1:{port} (pid {proc.pid})"


def status() -> str:
    port = _running()
    if port is not None:
        return f"listening on 127.0.0.1:{port} (this project's, state directory {STATE_DIR})"
    held = " (the port is held by a server that is not this project's)" if listening(DEFAULT_PORT) else ""
    return f"not running: no server of this project's for {STATE_DIR}{held}"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    command = (argv or sys.argv[1:] or ["status"])[0]
    if command == "start":
        print(ensure())
    elif command == "stop":
        print(stop())
    elif command == "status":
        print(status())
    else:
        print("usage: python -m spark_jobs.connect_server start|stop|status", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
