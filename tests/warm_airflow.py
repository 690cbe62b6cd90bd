"""A warm ``airflow`` command line for the tests: one process imports Airflow once, builds its
in-process Execution API, then forks a child for each ``airflow dags test`` / ``tasks test``.

Each command still runs in a process of its own, with its own environment, working directory,
output files and exit status, and it can be killed like any process: the tests that SIGKILL a
``dags test`` run or read its output as it goes see what they saw with ``subprocess``. What the
child skips is what every new ``airflow`` process pays before it runs a task: importing Airflow
and its providers (the CLI's start) and building the in-process Execution API app that
``dag.test()`` runs its tasks through (Cadwyn's versioned models): seconds per command.

Only third-party modules are imported before the fork, never the project's: the project reads
some settings from the environment when its modules are imported (failure points, the local
directory, the Spark mode), and each command brings its own environment.

A command may name a DAGs folder of its own (a test's DAG file in its temporary directory): the
child reads the folder again from its environment, as a new process does. A command whose
environment names another Airflow home, database or plugins folder than the server's runs as a
plain subprocess: the warm process holds that home's configuration and the plugins it loaded.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, Sequence

AIRFLOW = os.path.join(os.path.dirname(sys.executable), "airflow")
#: what the server imports before it forks a command (third-party only: see the module's docstring)
PRELOAD = ("great_expectations", "pyspark.sql.connect.session", "pandas", "pyarrow", "boto3", "networkx")
#: settings the warm process fixed when it imported Airflow: a command that changes one runs cold
_FIXED = ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__PLUGINS_FOLDER", "AIRFLOW_CONFIG")


class WarmProcess:
    """A command forked by the server: the parts of ``subprocess.Popen`` the tests use."""

    def __init__(self, conn: socket.socket, pid: int, args: Sequence[str]):
        self._conn = conn
        self._buffer = b""
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def _read_status(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError(f"the warm Airflow server went away while {self.args} ran (pid {self.pid})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.returncode = int(json.loads(line)["returncode"])
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self._read_status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class WarmAirflow:
    """The client side: start the server with ``env`` (its Airflow home), then ``run``/``popen``."""

    def __init__(self, env: Mapping[str, str], cwd: str):
        self.env = dict(env)
        self.cwd = cwd
        self._dir = tempfile.mkdtemp(prefix="warm-airflow-")
        self.socket_path = os.path.join(self._dir, "sock")
        self._log = open(os.path.join(self._dir, "server.log"), "w")
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.warm_airflow", self.socket_path], env=self.env,
                                      cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT)

    def ready(self, timeout: float = 300) -> "WarmAirflow":
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket_path):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the warm Airflow server did not start: {open(self._log.name).read()[-3000:]}")
            time.sleep(0.1)
        return self

    def warm_for(self, env: Mapping[str, str]) -> bool:
        """Whether a command with ``env`` can be forked from the server (same Airflow home)."""
        return self._proc.poll() is None and all(env.get(k) == self.env.get(k) for k in _FIXED)

    def popen(self, args: Sequence[str], env: Mapping[str, str], stdout: str, stderr: str | None = None,
              cwd: str | None = None) -> WarmProcess | subprocess.Popen:
        """Start ``airflow <args>`` writing its output to the file ``stdout`` (and ``stderr``, or
        the same file); a plain subprocess when the server cannot run it."""
        if not self.warm_for(env):
            out = open(stdout, "w")
            err = open(stderr, "w") if stderr else subprocess.STDOUT
            return subprocess.Popen([AIRFLOW, *args], env=dict(env), cwd=cwd or self.cwd, stdout=out, stderr=err,
                                    text=True)
        self.ready()
        for path in {stdout, stderr or stdout}:
            open(path, "w").close()  # as subprocess's output files start: empty
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.socket_path)
        request = {"args": list(args), "env": dict(env), "cwd": cwd or self.cwd, "stdout": stdout,
                   "stderr": stderr or stdout}
        conn.sendall(json.dumps(request).encode() + b"\n")
        buffer = b""
        while b"\n" not in buffer:
            chunk = conn.recv(4096)
            if not chunk:
                raise RuntimeError(f"the warm Airflow server refused {args}: {open(self._log.name).read()[-3000:]}")
            buffer += chunk
        line, rest = buffer.split(b"\n", 1)
        proc = WarmProcess(conn, int(json.loads(line)["pid"]), ["airflow", *args])
        proc._buffer = rest
        return proc

    def run(self, args: Sequence[str], env: Mapping[str, str], timeout: float = 900,
            cwd: str | None = None) -> subprocess.CompletedProcess:
        """``subprocess.run([airflow, *args], capture_output=True, text=True)``, warm."""
        with tempfile.TemporaryDirectory(prefix="airflow-cmd-") as where:
            out, err = os.path.join(where, "stdout"), os.path.join(where, "stderr")
            proc = self.popen(args, env, out, err, cwd)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            with open(out) as o, open(err) as e:
                return subprocess.CompletedProcess(["airflow", *args], code, o.read(), e.read())

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()


#: the servers the test session started (tests/dags/conftest.py): a command runs on the first
#: one whose Airflow home is the command's, else as a plain subprocess
SERVERS: list[WarmAirflow] = []


def _server_for(env: Mapping[str, str]) -> WarmAirflow | None:
    return next((s for s in SERVERS if s.warm_for(env)), None)


def run(env: Mapping[str, str], *args: str, cwd: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """``airflow <args>`` with ``env``: warm when a server holds its home, else a subprocess;
    ``subprocess.run(..., capture_output=True, text=True)``'s result either way."""
    server = _server_for(env)
    if server is not None:
        return server.run(args, env, timeout, cwd)
    return subprocess.run([AIRFLOW, *args], env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout)


def start(env: Mapping[str, str], *args: str, log_path: str, cwd: str) -> WarmProcess | subprocess.Popen:
    """``airflow <args>`` started with ``env``, its output (stdout and stderr) to ``log_path``;
    a handle with ``pid``, ``poll``, ``wait`` and ``kill``."""
    server = _server_for(env)
    if server is not None:
        return server.popen(args, env, log_path, cwd=cwd)
    return subprocess.Popen([AIRFLOW, *args], env=dict(env), cwd=cwd, stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT, text=True)


# --- the server --------------------------------------------------------------------------------


def _warm_up() -> None:
    import gc
    import importlib
    import logging

    from airflow import configuration  # noqa: F401  (first, as airflow.__main__ does)
    from airflow.cli import cli_parser

    cli_parser.get_parser()
    import airflow.cli.commands.dag_command  # noqa: F401
    import airflow.cli.commands.task_command  # noqa: F401
    import airflow.sdk.execution_time.supervisor as supervisor
    import airflow.sdk.execution_time.task_runner  # noqa: F401
    for name in ("airflow.models", "airflow.models.dagrun", "airflow.models.taskinstance",
                 "airflow.dag_processing.dagbag", "airflow.dag_processing.bundles.manager",
                 "airflow.serialization.serialized_objects", "airflow.jobs.triggerer_job_runner"):
        importlib.import_module(name)
    from sqlalchemy.orm import configure_mappers

    configure_mappers()  # the ORM's relationships, resolved once (~1.7 s a command otherwise)

    # Cadwyn builds the app's versioned routes at the first request: make one, then stop the
    # transport's event-loop thread (no thread may cross a fork) and keep the built app for a
    # fresh InProcessExecutionAPI that each child makes its own transport for.
    client = supervisor.InProcessTestSupervisor._api_client()
    client.get("health")
    client.close()
    app = supervisor.in_process_api_server().app
    del client
    supervisor.in_process_api_server.cache_clear()
    gc.collect()  # the transport's finalizer stops its loop and thread
    supervisor.in_process_api_server()._app = app
    for name in PRELOAD:
        if name == "great_expectations":  # quietly, as include.checks.import_gx does (not imported:
            os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # the project stays unimported)
            logging.getLogger("great_expectations").setLevel(logging.WARNING)
            importlib.import_module("great_expectations")
            logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
        else:
            importlib.import_module(name)
    from airflow import settings

    settings.dispose_orm(do_log=False)  # no database connection crosses a fork
    import threading

    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        raise RuntimeError(f"threads still running before the first fork: {others}")


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become the command, then exit (never returns)."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # the server's home was migrated before it started: alembic's check (~0.9 s) is skipped
        os.environ.setdefault("AIRFLOW__DATABASE__CHECK_MIGRATIONS", "False")
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        err = out if request["stderr"] == request["stdout"] else \
            os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from airflow import settings

        _dags_folder_from_this_environment()
        _python_path_from_this_environment()
        settings.configure_orm()
        _stats_from_this_environment()
        sys.argv = ["airflow", *request["args"]]
        from airflow.__main__ import main

        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int) and e.code is not None:
                print(e.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _exit(code)


def _python_path_from_this_environment() -> None:
    """This command's ``PYTHONPATH`` entries on ``sys.path`` ahead of the installed packages, as
    a new interpreter puts them (the server's own path was made from the server's environment)."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = entries


def _dags_folder_from_this_environment() -> None:
    """The DAGs folder of this command (``AIRFLOW__CORE__DAGS_FOLDER``), where Airflow keeps it
    once read: ``settings.DAGS_FOLDER`` (the bundle of the DAGs folder, the DagBag) and the copy
    the serializer imported (each serialized DAG records the folder it was parsed from)."""
    from airflow import settings
    from airflow.serialization import serialized_objects

    settings.DAGS_FOLDER = os.path.expanduser(settings.conf.get("core", "DAGS_FOLDER"))
    serialized_objects.DAGS_FOLDER = settings.DAGS_FOLDER


def _stats_from_this_environment() -> None:
    """Airflow's Stats backends (the core's and the Task SDK's) were chosen from the server's
    ``[metrics]`` settings when it imported them: choose again from this command's, as a new
    ``airflow`` process does when it starts."""
    import importlib

    for stats_module, utils_module, conf_module in (
            ("airflow._shared.observability.metrics.stats", "airflow.observability.metrics.stats_utils",
             "airflow.configuration"),
            ("airflow.sdk._shared.observability.metrics.stats", "airflow.sdk.observability.metrics.stats_utils",
             "airflow.sdk.configuration")):
        stats = sys.modules.get(stats_module)
        if stats is None or getattr(stats, "_factory", None) is None:
            continue  # not chosen yet: the command chooses itself
        conf = importlib.import_module(conf_module).conf
        stats.initialize(factory=importlib.import_module(utils_module).get_stats_factory(),
                         export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True))


def _exit(code: int) -> None:
    """Exit as ``airflow`` does up to its atexit handlers (non-daemon threads waited for, the
    handlers run, output flushed), then skip the interpreter's teardown: with Airflow, Spark's
    client and Great Expectations loaded, freeing every object took seconds per command."""
    import atexit
    import threading

    # as the interpreter does: threading's exit callbacks first (they shut down the executors
    # of concurrent.futures, whose manager threads would otherwise be waited for forever: the
    # OpenLineage provider's process pool), then every non-daemon thread joined. An exception
    # one of those callbacks raises is reported and ignored, as the interpreter does at exit: it
    # is not the command's exit status (CI once saw a `dags test` exit 1 here after its run had
    # succeeded; what raised was not kept, a race in 3.11's process-pool shutdown is one suspect)
    try:
        threading._shutdown()
    except BaseException:  # noqa: BLE001 - the interpreter's own rule at exit
        import traceback

        print(f"Exception ignored in: {threading!r}", file=sys.stderr)
        traceback.print_exc()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing left to flush
            pass
    os._exit(code)


def serve(socket_path: str) -> None:
    _warm_up()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = socket_path + ".tmp"
    server.bind(tmp)
    server.listen(16)
    os.rename(tmp, socket_path)  # the client waits for the name: it appears once we listen
    waiting: dict[int, socket.socket] = {}
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print(f"warm Airflow serving on {socket_path}", flush=True)
    while not stopping:
        ready, _, _ = select.select([server], [], [], 0.2)
        if ready:
            conn, _ = server.accept()
            data = b""
            while b"\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if b"\n" not in data:
                conn.close()
                continue
            request = json.loads(data.split(b"\n", 1)[0])
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                for other in waiting.values():
                    other.close()
                _child(request)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                code = os.waitstatus_to_exitcode(status)
                try:
                    conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
                except OSError:
                    pass
                conn.close()
    for pid in waiting:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    server.close()
    os.unlink(socket_path)


if __name__ == "__main__":
    serve(sys.argv[1])
