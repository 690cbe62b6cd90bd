"""A real multi-process Spark standalone cluster on loopback, started from the pyspark
installation: a master and two workers (``spark-class`` with the standalone Master and Worker
classes, each a JVM of its own) and a Spark Connect server running as an application on it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Sequence

from spark_jobs.connect_server import spark_home
from spark_jobs.session import driver_java_options
from stack.procs import ROOT, free_port, spawn, wait_until
from stack.procs import listening as _listening


def parent_and_group(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[2])


def group_of(pid: int, groups: dict[int, str]) -> str | None:
    """The name ``groups`` (process group id -> name) gives the group of ``pid`` or of its nearest
    ancestor in one of them; None when neither it nor any ancestor is in one."""
    seen = pid
    while seen > 1:
        parent, group = parent_and_group(seen)
        if group in groups:
            return groups[group]
        seen = parent
    return None


def master_recovery_options(workdir: str) -> str:
    """The master's JVM options that keep its applications and workers in ``workdir/recovery``:
    a master started again after a crash reads them back and waits for them to reconnect. A
    master without them forgets the running applications: the workers, registering again, kill
    those applications' executors, and the applications (the Spark Connect server's) wait for
    executors that never come, every Spark job of theirs hanging (found by tests.chaos)."""
    recovery = os.path.join(workdir, "recovery")
    os.makedirs(recovery, exist_ok=True)
    return f"-Dspark.deploy.recoveryMode=FILESYSTEM -Dspark.deploy.recoveryDirectory={recovery}"


@dataclass
class StandaloneCluster:
    workdir: str
    # 0: a free port, chosen at start (and chosen again if another process takes it first)
    master_port: int = 0
    master_ui: int = 0
    connect_port: int = 0
    worker_env: dict[str, str] = field(default_factory=dict)  # the workers' (so their executors')
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    # called with (service name, session id) as each process starts: the stack records them
    on_start: Callable[[str, int], None] | None = None
    connect_conf: dict[str, str] = field(default_factory=dict)  # more --conf of the Connect server (last wins)
    worker_memory: str = "2g"  # what each worker offers its executors

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def env(self) -> dict[str, str]:
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": ROOT,
               "SPARK_LOG_DIR": os.path.join(self.workdir, "logs"), "SPARK_PID_DIR": self.workdir}
        env.pop("ITERATIONS_DRIVER_PID", None)
        return env

    def _start(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        proc = spawn(argv, {**self.env(), **(extra_env or {})}, os.path.join(self.workdir, f"{name}.log"),
                     cwd=self.workdir)
        self.procs[name] = proc
        if self.on_start is not None:
            self.on_start(f"spark-{name}", proc.pid)
        return proc

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui}/json/", timeout=5) as r:
            return json.load(r)

    def _master_answers(self) -> bool:
        """The master's UI answers with its own status: not merely something listening on the
        port (another process may have taken a port picked free a moment before)."""
        try:
            return self.status().get("url") == self.master_url
        except (OSError, ValueError):
            return False

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.status()["workers"] if w["state"] == "ALIVE")
        except (OSError, ValueError):
            return 0

    def start(self) -> "StandaloneCluster":
        os.makedirs(os.path.join(self.workdir, "logs"), exist_ok=True)
        self.start_master()
        for i in (1, 2):
            self.start_worker(i)
        self.wait_workers(2)
        self.start_connect()
        return self

    def _on_exact_ports(self, name: str, ports: Sequence[str], start: Callable[[], None], attempts: int = 3) -> None:
        """Start service ``name`` (``start``: RuntimeError when its process exits) on exactly its
        ports (Spark with ``spark.port.maxRetries=0``: it would otherwise move to the next port
        when one is taken, and a client of the port asked for would talk to whoever holds it).
        The attributes ``ports`` left to choose (0) are chosen before each try, again when the
        service could not bind them; ports given are tried once, the failure naming them."""
        choosing = [p for p in ports if not getattr(self, p)]
        for attempt in range(1, attempts + 1):
            for p in choosing:
                setattr(self, p, free_port())
            try:
                start()
                return
            except RuntimeError:
                self.stop_process(name, signal.SIGKILL)
                if not choosing or attempt == attempts:
                    raise

    def start_master(self) -> None:
        """The master on exactly its ports (``_on_exact_ports``; chosen when not given)."""
        self._on_exact_ports("master", ("master_port", "master_ui"), self._run_master)

    def _run_master(self) -> None:
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        proc = self._start("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                      "--port", str(self.master_port), "--webui-port", str(self.master_ui)],
                           {"SPARK_MASTER_OPTS": f"-Dspark.port.maxRetries=0 {master_recovery_options(self.workdir)}"})
        wait_until(f"the standalone master on ports {self.master_port} and {self.master_ui} (UI)",
                   self._master_answers, 120, os.path.join(self.workdir, "master.log"), proc)

    def start_worker(self, i: int) -> None:
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        work = os.path.join(self.workdir, f"worker-{i}")
        os.makedirs(work, exist_ok=True)
        # 2 cores each: the Connect server's application holds 2 (spark.cores.max), a
        # spark-submit application gets the other 2
        self._start(f"worker-{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                    "--cores", "2", "--memory", self.worker_memory, "--webui-port", str(free_port()),
                                    "--work-dir", work, self.master_url], self.worker_env)

    def worker_running(self, pid: int) -> str:
        """The worker whose executor runs process ``pid`` (a Python worker of a task, say): the
        worker's process group holds its executors' JVMs; PySpark's Python daemon leads a group
        of its own under the executor."""
        workers = {proc.pid: name for name, proc in self.procs.items() if name.startswith("worker")}
        found = group_of(pid, workers)
        if found is None:
            raise LookupError(f"process {pid} does not run under a worker of this cluster ({workers})")
        return found

    def lose_worker(self, name: str, also: int | None = None) -> None:
        """A worker's machine dies: SIGKILL the worker, its executors and their Python processes
        (the process group of ``also``: a Python worker's daemon leads its own), no goodbye to
        the master."""
        if also is not None:
            try:
                os.killpg(os.getpgid(also), signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.stop_process(name, signal.SIGKILL)

    def wait_workers(self, count: int, timeout: float = 120) -> None:
        wait_until(f"{count} alive workers", lambda: self.alive_workers() == count, timeout,
              os.path.join(self.workdir, "master.log"))

    def start_connect(self) -> None:
        """The Spark Connect server on exactly its port (``_on_exact_ports``)."""
        self._on_exact_ports("connect", ("connect_port",), self._start_connect)

    def _start_connect(self) -> None:
        log = os.path.join(self.workdir, "connect.log")
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        script = os.path.join(spark_home(), "sbin", "start-connect-server.sh")
        proc = self._start("connect", ["bash", script, "--master", self.master_url,
                                "--conf", f"spark.connect.grpc.binding.port={self.connect_port}",
                                "--conf", "spark.port.maxRetries=0",
                                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                                "--conf", f"spark.executorEnv.PYTHONPATH={ROOT}",
                                "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
                                "--conf", "spark.cores.max=2", "--conf", "spark.executor.memory=768m",
                                "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
                                "--conf", "spark.driver.extraJavaOptions="
                                + driver_java_options(self.connect_conf.get("spark.driver.extraJavaOptions")),
                                *[a for k, v in self.connect_conf.items() if k != "spark.driver.extraJavaOptions"
                                  for a in ("--conf", f"{k}={v}")]],
                    {"SPARK_NO_DAEMONIZE": "1"})
        wait_until(f"the Spark Connect server on port {self.connect_port}",
                   lambda: self._connect_started(log, offset), 180, log, proc)

    def _connect_started(self, log: str, offset: int) -> bool:
        """Its log (from ``offset``, where this start began) says it bound the port: something
        else listening there is not it."""
        with open(log, "rb") as f:
            f.seek(offset)
            return f"Spark Connect server started at: 127.0.0.1:{self.connect_port}".encode() in f.read()

    def stop_process(self, name: str, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

    def restart_connect(self) -> None:
        self.stop_process("connect")
        wait_until("the old Spark Connect server to go", lambda: not _listening(self.connect_port), 60)
        self.start_connect()

    def stop(self) -> None:
        for name in ["connect", *[n for n in self.procs if n.startswith("worker")], "master"]:
            self.stop_process(name)
