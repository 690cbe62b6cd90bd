"""Orchestration overhead (issue 8, benchmark 2): the same PageRank job through ``airflow dags
test iterate_pagerank`` in both Spark modes, against the library runner, in one run.

Every variant runs its Spark work on the same warm Spark Connect server (the embedded one, on
loopback), so the differences are orchestration, not Spark:

* ``library, command``: ``python -m spark_jobs.run_job --remote sc://...``: the library runner
  as a user starts it from a shell, a process of its own, as ``airflow dags test`` is: both pay
  their interpreter's start, their imports, a new Spark Connect session and their exit. The
  baseline of the overhead;
* ``library, warm process``: ``IterationRunner`` called in this (benchmark) process, on a
  session opened once, with its modules imported by an earlier run: the notebook case, and the
  lower bound (no process start, no imports, no new session);
* ``dags test, connect``: every task of the DAG (run -> align -> commit per epoch, finish,
  continue) in ``airflow dags test``, each epoch's Spark job on the warm server;
* ``dags test, submit`` (unless ``--no-submit``): the same DAG with every epoch (and the finish)
  ``spark-submit``-ted through the apache-spark provider: a new driver JVM per epoch.

``--repeat N`` runs the variants N times in alternating order and reports medians (a run of one
variant varies by +-15% on this kind of machine). Each variant also runs a 1-epoch job, which
splits the overhead into a fixed part (start-up and exit) and a part per epoch. For each DAG run
the script also reads the run's log and prints where its time went: start-up until the DAG run
exists, the first task's wait for Airflow's in-process execution API, the epochs' Spark work
against the tasks around it, and the exit. A warm-up of every variant on a small graph, then
one at the measured size, comes first (neither is counted). Run::

    .venv/bin/python -m bench.orchestration --edges 1000000 --epochs 10 --repeat 3 --no-submit
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, ROOT, graph, machine  # noqa: E402

AIRFLOW = os.path.join(os.path.dirname(sys.executable), "airflow")


def airflow_env(home: str, port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(ROOT, "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": ROOT,
        "PYSPARK_PYTHON": sys.executable,
        "ITERATIONS_SPARK_CONNECT_PORT": str(port),
        "ITERATIONS_SPARK_CONNECT_DIR": os.path.join(home, "spark-connect"),
        # the runs' inputs, stores and outputs are under the benchmarks' data directory: the
        # deployer's roots say a DAG may use it (a DAG's own roots are its embedded directories)
        "ITERATIONS_ALLOWED_ROOTS": ",".join(filter(None, [os.environ.get("ITERATIONS_ALLOWED_ROOTS"), DATA])),
    }
    env.pop("ITERATIONS_DRIVER_PID", None)
    return env


def bench_env(home: str) -> dict[str, str]:
    """The environment of the benchmark's Airflow commands, and the same Spark Connect server
    settings in this process (its library runs use the DAG runs' server). Set before
    ``spark_jobs.connect_server`` is imported: the module reads where its server's state lives
    when it is imported, and a server whose state is elsewhere is not taken for this project's."""
    os.environ["ITERATIONS_SPARK_CONNECT_DIR"] = os.path.join(home, "spark-connect")
    from spark_jobs import connect_server

    env = airflow_env(home, connect_server.free_port())
    os.environ.update({k: env[k] for k in ("ITERATIONS_SPARK_CONNECT_PORT", "ITERATIONS_SPARK_CONNECT_DIR")})
    if connect_server.STATE_DIR != env["ITERATIONS_SPARK_CONNECT_DIR"]:
        raise SystemExit(f"spark_jobs.connect_server was imported before bench_env(): its server state is in "
                         f"{connect_server.STATE_DIR}, the DAG runs' in {env['ITERATIONS_SPARK_CONNECT_DIR']}")
    return env


@dataclass
class Run:
    seconds: float
    log: str = ""
    started_at: float = 0.0  # epoch seconds, for a command
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def spark_work(self) -> float:
        """The epochs' Spark work as the runtime logs it, in any variant (static input, restore,
        step and tail of every epoch): the same work everywhere, and what varies most between
        runs on this machine."""
        return spark_work(self.log)

    @property
    def outside_spark(self) -> float:
        return self.seconds - self.spark_work


def _command(args: list[str], env: dict[str, str], what: str, ok: str) -> Run:
    started = time.perf_counter()
    started_at = time.time()
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0 or ok not in log:
        print(log[-4000:], file=sys.stderr)
        raise SystemExit(f"{what} failed (exit {done.returncode})")
    return Run(elapsed, log, started_at)


class _Lines(logging.Handler):
    """The runtime's log lines of a run in this process."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def dags_test(env: dict[str, str], conf: dict) -> Run:
    run = _command([AIRFLOW, "dags", "test", "iterate_pagerank", "--conf", json.dumps(conf)], env,
                   "dags test", "state=success")
    run.phases = dag_phases(run.log, run.started_at, run.started_at + run.seconds)
    return run


def run_job(env: dict[str, str], url: str, path: str, epochs: int, partitions: int, root: str, job_id: str) -> Run:
    return _command([sys.executable, "-m", "spark_jobs.run_job", "--remote", url, "--job-id", job_id,
                     "--body", "pagerank", "--input", path, "--checkpoint-root", os.path.join(root, "store"),
                     "--output-path", os.path.join(root, "out"), "--max-epochs", str(epochs), "--tolerance", "0",
                     "--num-partitions", str(partitions)], env, "run_job", '"status": "TERMINATED"')


def library(spark, path: str, epochs: int, partitions: int, root: str, job_id: str) -> Run:
    from include.contract import JobConfig
    from spark_jobs.runner import IterationRunner

    cfg = JobConfig(job_id=job_id, body="pagerank", input=path, checkpoint_root=os.path.join(root, "store"),
                    output_path=os.path.join(root, "out"), max_epochs=epochs, tolerance=0.0,
                    num_partitions=partitions)
    lines = _Lines()
    logger = logging.getLogger("iterations")
    logger.addHandler(lines)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False  # kept, not printed
    try:
        started = time.perf_counter()
        result = IterationRunner(cfg, spark).run()
        elapsed = time.perf_counter() - started
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
        logger.propagate = propagate
    if result.status.value != "TERMINATED":
        raise SystemExit(f"library run ended {result.status}")
    return Run(elapsed, "\n".join(lines.lines))


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")
_TASK = re.compile(r"\[DAG TEST\] (starting|end task) task_id=(\S+)")
_STEP = re.compile(r"epoch \d+ attempt \S+: static input ([0-9.]+)s .*, restore ([0-9.]+)s .* step and tail ([0-9.]+)s")


def spark_work(log: str) -> float:
    return sum(float(a) + float(b) + float(c) for a, b, c in _STEP.findall(log))


def dag_phases(log: str, started_at: float, ended_at: float) -> dict[str, float]:
    """Where a ``dags test`` run's time went, from its log: ``start-up`` (process start until
    its DAG run exists: imports, DAG parsing and serialization, the run's creation), ``first
    task's API`` (the first task's start until Airflow's in-process execution API has taken
    it: that API's app is built then), ``Spark work`` (what the head tasks log as the epochs'
    input load, restore, step and tail), ``tasks, rest`` (everything else from the first task's start to
    the run's end: each task's own work beside Spark, Airflow's bookkeeping per task, the
    commits, finish and continue), ``exit`` (the run's end until the process ended)."""
    stamps: dict[str, float] = {}
    for line in log.splitlines():
        m = _STAMP.match(line)
        if not m:
            continue
        t = dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.timezone.utc).timestamp()
        if "creating dag run" in line:
            stamps.setdefault("run created", t)
        elif (task := _TASK.search(line)) and task.group(1) == "starting":
            stamps.setdefault("first task", t)
        elif "Task started" in line:
            stamps.setdefault("first task started", t)
        elif "DagRun Finished" in line:
            stamps["run finished"] = t
    spark = spark_work(log)
    needed = ("run created", "first task", "first task started", "run finished")
    if any(k not in stamps for k in needed):
        return {}
    first_api = stamps["first task started"] - stamps["first task"]
    return {
        "start-up": stamps["first task"] - started_at,
        "first task's API": first_api,
        "Spark work": spark,
        "tasks, rest": stamps["run finished"] - stamps["first task"] - first_api - spark,
        "exit": ended_at - stamps["run finished"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3, help="runs of each variant (medians are reported)")
    p.add_argument("--no-submit", action="store_true", help="skip spark-submit mode")
    args = p.parse_args(argv)
    if args.epochs < 2 or args.repeat < 1:
        p.error(f"--epochs must be >= 2 and --repeat >= 1, got {args.epochs} and {args.repeat}")
    logging.basicConfig(level=logging.WARNING)

    os.makedirs(DATA, exist_ok=True)
    home = tempfile.mkdtemp(prefix="airflow-", dir=DATA)
    work = tempfile.mkdtemp(prefix="bench-orch-", dir=DATA)
    env = bench_env(home)
    path, exact = graph(args.edges)
    warm, _ = graph(20_000)
    print(f"machine: {machine()}; PageRank {exact:,} edges, {args.partitions} partitions, {args.epochs} epochs, "
          f"{args.repeat} run(s) of each variant", flush=True)
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
    count = iter(range(1_000_000))

    def conf(input_path, epochs):
        job_id = f"dag{next(count)}"
        return {"job_id": job_id, "input_path": input_path, "checkpoint_root": os.path.join(work, job_id, "store"),
                "output_path": os.path.join(work, job_id, "out"), "max_epochs": epochs, "tolerance": 0,
                "num_partitions": args.partitions, "continuation": False}

    def lib_root():
        job_id = f"lib{next(count)}"
        return os.path.join(work, job_id), job_id

    from pyspark.sql import SparkSession

    from spark_jobs import connect_server

    submit_env = {**env, "ITERATIONS_SPARK_MODE": "submit",
                  "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"})}
    runs: dict[str, list[Run]] = {}
    try:
        t = dags_test(env, conf(warm, 2)).seconds  # starts the warm Spark Connect server too
        print(f"  warm-up DAG run (20k edges, 2 epochs, starts the Spark Connect server): {t:.1f} s", flush=True)
        url = connect_server.ensure(int(env["ITERATIONS_SPARK_CONNECT_PORT"]))  # the DAG runs' server
        spark = SparkSession.builder.remote(url).create()
        # then every variant once at the measured size, not counted: the first runs at a size pay
        # the server's warm-up for it (its JIT, its caches), and would otherwise fall on whichever
        # variant the first round starts with
        started = time.perf_counter()
        library(spark, path, 2, args.partitions, *lib_root())
        run_job(env, url, path, 2, args.partitions, *lib_root())
        dags_test(env, conf(path, 2))
        print(f"  warm-up of every variant at {exact:,} edges, 2 epochs: {time.perf_counter() - started:.1f} s",
              flush=True)
        variants = {
            "library, warm process": lambda e: library(spark, path, e, args.partitions, *lib_root()),
            "library, command": lambda e: run_job(env, url, path, e, args.partitions, *lib_root()),
            "dags test, connect": lambda e: dags_test(env, conf(path, e)),
        }
        if not args.no_submit:
            variants["dags test, submit"] = lambda e: dags_test(submit_env, conf(path, e))
        order = list(variants)
        for round_ in range(args.repeat):
            for name in (order if round_ % 2 == 0 else order[::-1]):
                for epochs in (1, args.epochs):
                    if epochs == 1 and name == "dags test, submit":
                        continue  # its fixed part is not asked for; each of its epochs is a new JVM
                    run = variants[name](epochs)
                    runs.setdefault(f"{name}, {epochs}", []).append(run)
                    print(f"  {name}, {epochs} epoch(s): {run.seconds:.1f} s", flush=True)
    finally:
        subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], env=env, cwd=ROOT,
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    report(runs, args.epochs, exact)
    return 0


def report(runs: dict[str, list[Run]], epochs: int, edges: int) -> None:
    def med(name: str, n: int) -> float:
        return statistics.median(r.seconds for r in runs[f"{name}, {n}"])

    n = len(runs[f"library, command, {epochs}"])
    print(f"\nPageRank {edges:,} edges, {epochs} epochs, median of {n} run(s) each, {machine()}")
    print("| run | seconds | above the library command | per epoch | above the library in a warm process | per epoch |")
    print("|---|---|---|---|---|---|")
    cmd, warm = med("library, command", epochs), med("library, warm process", epochs)

    def above(s: float, base: float) -> list[str]:
        return [f"{s - base:+.1f} s", f"{(s - base) / epochs:+.2f} s"]

    def cells(name: str, s: float, cmd: float, warm: float) -> str:
        """A row's differences: above the library command (not for the baselines) and above
        the library in a warm process (not for that one)."""
        if name == "library, warm process":
            return " | ".join([""] * 4)
        return " | ".join((["", ""] if name == "library, command" else above(s, cmd)) + above(s, warm))

    names = ["library, warm process", "library, command"] + \
        [name for name in ("dags test, connect", "dags test, submit") if f"{name}, {epochs}" in runs]
    for name in names:
        print(f"| {name} | {med(name, epochs):.1f} | {cells(name, med(name, epochs), cmd, warm)} |")

    # The same without the epochs' Spark work, which is the same work in every variant and what
    # varies most from run to run: what is left is each variant's own cost around it.
    def outside(name: str, n: int = epochs) -> float:
        return statistics.median(r.outside_spark for r in runs[f"{name}, {n}"])

    print("\nOutside the epochs' Spark work (each run's seconds minus the static input, restore, step and "
          "tail its epochs logged; medians):")
    print("| run | Spark work | the rest | above the library command | per epoch | above the library in a warm "
          "process | per epoch |")
    print("|---|---|---|---|---|---|---|")
    cmd_out, warm_out = outside("library, command"), outside("library, warm process")
    for name in names:
        mine = outside(name)
        work = statistics.median(r.spark_work for r in runs[f"{name}, {epochs}"])
        print(f"| {name} | {work:.1f} | {mine:.1f} | {cells(name, mine, cmd_out, warm_out)} |")
    print("\nEach run's seconds:")
    for key, rs in runs.items():
        print(f"  {key}: " + " ".join(f"{r.seconds:.1f}" for r in rs))
    print("\nFixed part and per epoch, outside the Spark work (the 1-epoch runs against the "
          f"{epochs}-epoch ones, medians):")
    for name in ("library, command", "dags test, connect"):
        one, many = outside(name, 1), outside(name)
        print(f"  {name}: 1 epoch {one:.1f} s, {epochs} epochs {many:.1f} s: {(many - one) / (epochs - 1):.2f} s "
              f"per further epoch")
    (d1, dn), (l1, ln) = [(outside(name, 1), outside(name)) for name in ("dags test, connect", "library, command")]
    per = ((dn - d1) - (ln - l1)) / (epochs - 1)
    print(f"  dags test above the library command: fixed {(d1 - l1) - per:+.1f} s, per epoch {per:+.2f} s")
    connect = runs.get(f"dags test, connect, {epochs}", [])
    phased = [r.phases for r in connect if r.phases]
    if phased:
        print(f"\nWhere a {epochs}-epoch dags test's time went (medians over its runs, from its log):")
        for key in phased[0]:
            print(f"  {key}: {statistics.median(ph[key] for ph in phased):.2f} s")


if __name__ == "__main__":
    sys.exit(main())
