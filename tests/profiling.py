"""A pytest plugin that records where a run of the suite spends its time and its CPU, for
``python -m bench.suite_profile`` (which prints the tables docs/testing.md keeps).

- In every test process (each xdist worker, or the one process of ``-n 0``): one line per test
  phase (setup, call, teardown) with its wall time, outcome and the test's fixtures, appended to
  ``tests-<worker>.jsonl``; the test being run in ``current-<worker>`` and the process's pid in
  ``pid-<worker>``.
- In the controlling process: the machine's busy CPU (``/proc/stat``) from the start to the end
  of the run, and a sampler that reads every process's CPU time from ``/proc`` once a second and
  charges each second's CPU to the test its worker was running (a process belongs to a worker
  when it descends from it, or when its environment names the worker: the stack's services,
  which their start command leaves to init) and to a kind of process (``process_kind``). It
  writes ``cpu.json`` at the end.

The report is a measurement, never a check: nothing fails because the machine is slow. The
directory is ``--suite-profile=DIR`` (default ``.local/suite-profile`` in the checkout), emptied
when a run starts; ``--suite-profile=''`` switches the plugin off (with ``=``: pytest reads a
value after a space as a test path before it knows the option). pytest.ini loads the plugin
(``-p tests.profiling``) before it reads the command line, so the option is known to it.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, ".local", "suite-profile")
SAMPLE_SECONDS = 1.0
_HZ = os.sysconf("SC_CLK_TCK")


def pytest_addoption(parser) -> None:
    parser.addoption("--suite-profile", default=DEFAULT_DIR, metavar="DIR",
                     help="where to write the suite's time and CPU profile (python -m bench.suite_profile "
                          "reads it); an empty value switches it off")


def _worker_id(config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else "main"


def pytest_configure(config) -> None:
    where = config.getoption("--suite-profile")
    if not where:
        return
    if getattr(config, "workerinput", None):
        config.pluginmanager.register(_TestRecorder(where, _worker_id(config)), "suite-profile-recorder")
        return
    # the controlling process (or the only one): a fresh directory, the machine's CPU, the sampler
    os.makedirs(where, exist_ok=True)
    for name in os.listdir(where):
        if name.endswith((".jsonl", ".json")) or name.startswith(("current-", "pid-")):
            os.remove(os.path.join(where, name))
    sampler = _Sampler(where)
    config.pluginmanager.register(sampler, "suite-profile-sampler")
    if not config.pluginmanager.hasplugin("xdist") or not config.getoption("numprocesses", None):
        config.pluginmanager.register(_TestRecorder(where, "main"), "suite-profile-recorder")


class _TestRecorder:
    """In a test process: each phase's wall time, and the test now running."""

    def __init__(self, where: str, worker: str):
        self.where, self.worker = where, worker
        self._out = open(os.path.join(where, f"tests-{worker}.jsonl"), "a")
        with open(os.path.join(where, f"pid-{worker}"), "w") as f:
            f.write(str(os.getpid()))
        self._fixtures: dict[str, list[str]] = {}

    def _current(self, nodeid: str) -> None:
        tmp = os.path.join(self.where, f".current-{self.worker}")
        with open(tmp, "w") as f:
            f.write(nodeid)
        os.replace(tmp, os.path.join(self.where, f"current-{self.worker}"))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._fixtures[item.nodeid] = sorted(getattr(item, "fixturenames", ()))
        self._current(item.nodeid)

    def pytest_runtest_logreport(self, report):
        line = {"nodeid": report.nodeid, "when": report.when, "duration": round(report.duration, 3),
                "outcome": report.outcome, "worker": self.worker, "end": round(time.time(), 3)}
        if report.when == "setup":
            line["fixtures"] = self._fixtures.get(report.nodeid, [])
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()

    def pytest_runtest_logfinish(self, nodeid, location):
        self._current("")

    def pytest_unconfigure(self, config):
        self._out.close()


def process_kind(cmdline: str) -> str:
    """The kind of a process, from its command line: which JVM, which Python program."""
    argv0 = cmdline.split(" ", 1)[0]
    if argv0.endswith("/java") or argv0 == "java":
        for marker, kind in (("deploy.master.Master", "jvm: standalone master"),
                             ("deploy.worker.Worker", "jvm: standalone worker"),
                             ("CoarseGrainedExecutorBackend", "jvm: standalone executor"),
                             ("SparkConnectServer", "jvm: Spark Connect server"),
                             ("spark_jobs/epoch.py", "jvm: spark-submit epoch driver"),
                             ("launcher.Main", "jvm: spark-class launcher"),
                             ("pyspark-shell", "jvm: local session driver")):
            if marker in cmdline:
                return kind
        return "jvm: other"
    for marker, kind in (("pyspark.daemon", "python: Spark's Python workers"),
                         ("pyspark.worker", "python: Spark's Python workers"),
                         ("tests.warm_airflow", "python: warm Airflow (dags test, tasks test)"),
                         ("stack.supervise", "python: Airflow services"),
                         ("celery", "python: Airflow services"),
                         ("airflow standalone", "python: Airflow services"),
                         ("airflow api-server", "python: Airflow services"),
                         ("airflow api_server", "python: Airflow services"),
                         ("airflow scheduler", "python: Airflow services"),
                         ("airflow triggerer", "python: Airflow services"),
                         ("airflow dag-processor", "python: Airflow services"),
                         ("airflow dag_processor", "python: Airflow services"),
                         ("airflow task", "python: Airflow services"),
                         ("airflow worker", "python: Airflow services"),
                         ("bin/airflow", "python: cold airflow command"),
                         ("airflow ", "python: Airflow services"),
                         ("spark_jobs.run_job", "python: run_job drivers"),
                         ("spark_jobs/epoch.py", "python: spark-submit epoch drivers"),
                         ("spark_jobs.connect_server", "python: connect_server command"),
                         ("moto_server", "moto_server"),
                         ("chrom", "chromium")):
            if marker in cmdline:
                return kind
    if "postgres" in argv0 or "postgres:" in cmdline:
        return "postgresql"
    if "redis" in argv0:
        return "redis"
    if "python" in argv0:
        return "python: other"
    return "other"


class _Sampler:
    """In the controlling process: the machine's CPU, charged to tests and kinds of process."""

    def __init__(self, where: str):
        self.where = where
        # (pid, start) -> [cpu seen, kind, worker or None, the program's name when it was identified]
        self._procs: dict[tuple[int, int], list] = {}
        self._workers: dict[int, str] = {}  # pid -> worker id
        self.by_test: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="suite-profile-sampler", daemon=True)
        self._start = (time.time(), _busy_cpu())
        self.sample(charge=False)  # what ran before the suite started is not the suite's
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a measurement: never the reason a run fails
                pass

    def _read_workers(self) -> dict[str, str]:
        current = {}
        for name in os.listdir(self.where):
            try:
                if name.startswith("pid-"):
                    self._workers[int(open(os.path.join(self.where, name)).read())] = name[4:]
                elif name.startswith("current-"):
                    current[name[8:]] = open(os.path.join(self.where, name)).read()
            except (OSError, ValueError):
                continue
        return current

    def sample(self, charge: bool = True) -> None:
        current = self._read_workers()
        me = os.getpid()
        table = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            table[int(entry)] = (int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / _HZ, comm)
        for pid, (ppid, start, cpu, comm) in table.items():
            if pid == me:
                continue
            key = (pid, start)
            known = self._procs.get(key)
            if known is None or known[3] != comm:  # new, or it exec'd another program (bash -> java)
                known = self._procs[key] = [known[0] if known else 0.0, *self._identify(pid, table), comm]
            delta, known[0] = cpu - known[0], cpu
            if not charge:
                continue
            worker = known[2]
            test = current.get(worker) or (f"({worker}: between tests)" if worker else "(no worker)")
            kinds = self.by_test.setdefault(test, {})
            kinds[known[1]] = kinds.get(known[1], 0.0) + delta

    def _identify(self, pid: int, table) -> tuple[str, str | None]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = ""
        if not cmdline:
            return "kernel", None
        if pid in self._workers:
            return "python: pytest worker", self._workers[pid]
        kind = process_kind(cmdline)
        if kind == "jvm: local session driver" and table[pid][0] in self._workers:
            kind = "jvm: the worker's own Spark session"
        seen, hops = pid, 0
        while seen in table and hops < 64:
            if seen in self._workers:
                return kind, self._workers[seen]
            seen, hops = table[seen][0], hops + 1
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for var in f.read().split(b"\0"):
                    if var.startswith(b"PYTEST_XDIST_WORKER="):
                        return kind, var.split(b"=", 1)[1].decode()
        except OSError:
            pass
        return kind, None

    def pytest_unconfigure(self, config):
        self._stop.set()
        self._thread.join(10)
        self.sample()
        started, busy = self._start
        by_kind: dict[str, float] = {}
        for kinds in self.by_test.values():
            for kind, cpu in kinds.items():
                by_kind[kind] = by_kind.get(kind, 0.0) + cpu
        report = {"wall": round(time.time() - started, 1), "machine_busy_cpu": round(_busy_cpu() - busy, 1),
                  "cores": os.cpu_count(), "sampled_cpu": round(sum(by_kind.values()), 1),
                  "by_kind": {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
                  "by_test": {t: {k: round(v, 2) for k, v in kinds.items() if v >= 0.01}
                              for t, kinds in self.by_test.items()}}
        with open(os.path.join(self.where, "cpu.json"), "w") as f:
            json.dump(report, f, indent=1)


def _busy_cpu() -> float:
    """Seconds of CPU the machine has spent busy (all but idle and iowait) since it booted."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # guest time is already in user
    return (sum(ticks) - ticks[3] - ticks[4]) / _HZ
