"""Epochs under the real scheduler: LocalExecutor, ``PreloadingLocalExecutor`` and Celery, in one run.

Under a scheduler every task is a process of its own, forked from a LocalExecutor worker. With
plain LocalExecutor each such process imports what its epoch needs for itself: Great
Expectations in every commit task, the Spark Connect client in every run task. The preloading
executor imports them once in the scheduler, before it forks its workers. This runs the same
PageRank DAG run under ``airflow standalone`` (LocalExecutor, SQLite, the warm Spark Connect
server) with each executor, after an uncounted warm-up DAG run each, in ``--rounds`` rounds
(default 2) of a DAG run then the library runner on the same Spark, the last round's figures
kept (the first round warms the server's JVM for both: measured on a cold JVM, the DAG run
paid for the JIT compilation the library runner after it was spared), and prints per epoch: the
wall time from the first epoch's start to the last commit's end, the mean duration of each
kind of task (from the task instances' start and end), and how many commit tasks imported
Great Expectations themselves (their "Great Expectations ready" log line), the same from epoch 2
on (epoch 0 starts the batch's session and loads the input, epoch 1 is the first to restore),
and the CPU seconds each component used per epoch (Spark, the task processes, the scheduler,
the api-server...). The library runner on a session of the same server gives the Spark time
the epochs cannot go below; with several rounds the bench also prints each round's ratio and
the medians of the warm rounds (2..N), since one round's ratio moves with the machine.
``Celery`` runs the same on the native production stack (``stack.services.Stack``, ``./run.sh stack``: PostgreSQL,
Redis, two Celery workers, a Spark
standalone cluster with its Spark Connect server), against the library runner on that cluster's
Spark Connect server. The Airflow is the tests' (``tests.dags.airflow_server``, with its
settings: ``[scheduler] scheduler_idle_sleep_time`` 0.25 s as in docker-compose.yaml);
``--setting`` changes any of them. Run::

    .venv/bin/python -m bench.scheduler --edges 250000 --epochs 10
    .venv/bin/python -m bench.scheduler --executors PreloadingLocalExecutor Celery --edges 1000000
    .venv/bin/python -m bench.scheduler --executors PreloadingLocalExecutor \
        --setting AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=1   # Airflow's default
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, graph, machine  # noqa: E402

EXECUTORS = {"LocalExecutor": "LocalExecutor",
             "PreloadingLocalExecutor": "iterations.executors.PreloadingLocalExecutor",
             # the native production stack (./run.sh stack): PostgreSQL, Redis, two Celery
             # workers, a Spark standalone cluster with its Spark Connect server, moto_server
             "Celery": "CeleryExecutor"}


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def dag_run(server, work: str, job_id: str, path: str, epochs: int, partitions: int) -> dict:
    conf = {"job_id": job_id, "input_path": path, "checkpoint_root": os.path.join(work, job_id, "store"),
            "output_path": os.path.join(work, job_id, "out"), "max_epochs": epochs, "tolerance": 0,
            "num_partitions": partitions, "continuation": False}
    started = time.perf_counter()
    run_id = server.trigger("iterate_pagerank", conf)
    state = server.wait_run("iterate_pagerank", run_id, timeout=1800)
    wall = time.perf_counter() - started
    tis = server.task_instances("iterate_pagerank", run_id)
    if state != "success":
        failed = [t for t, ti in tis.items() if ti.get("state") in ("failed", "upstream_failed")]
        logs = "".join(open(f, errors="replace").read()[-3000:] for t in failed for f in glob.glob(os.path.join(
            server.home, "logs", "dag_id=iterate_pagerank", f"run_id={run_id}", f"task_id={t}", "*.log")))
        raise SystemExit(f"DAG run {run_id} ended {state}; failed tasks {failed}:\n{logs}")
    # the job's epochs only: the batch's later epoch groups are skipped once it terminates, and
    # a skipped task instance carries start and end dates too (the same instant). With
    # commit_in_head an epoch's align and commit are skipped when its run task committed it
    def ran(e: int) -> list[str]:
        return [f"epoch_{e}.{k}" for k in ("run", "align", "commit") if tis[f"epoch_{e}.{k}"].get("state") != "skipped"]

    durations: dict[str, list[float]] = {}
    for e in range(epochs):
        for task in ran(e):
            ti = tis[task]
            durations.setdefault(task.rsplit(".", 1)[1], []).append(_t(ti["end_date"]) - _t(ti["start_date"]))
    first = _t(tis["epoch_0.run"]["start_date"])
    last = max(_t(tis[t]["end_date"]) for t in ran(epochs - 1))
    # from epoch 2 on: epoch 0 starts the batch's Spark Connect session (its Python workers) and
    # loads the input, epoch 1 is the first to restore variables
    steady = (last - _t(tis["epoch_2.run"]["start_date"])) / (epochs - 2) if epochs > 2 else float("nan")
    # the logs of the task that committed each epoch (its commit task, or its run task when that
    # committed it): a run task that left the commit to its commit task may have imported Great
    # Expectations too, in the background, and is not counted
    logs = [f for e in range(epochs) for f in glob.glob(os.path.join(
        server.home, "logs", "dag_id=iterate_pagerank", f"run_id={run_id}", f"task_id={ran(e)[-1]}", "*.log"))]
    own = sum(1 for f in logs if "imported by this process" in open(f, errors="replace").read())
    # where each run task's time went: its "epoch N in this task: ..." line (EpochHeadOperator),
    # and the rest of the task's duration (process start, DAG parse, XCom, skips, exit)
    phases: dict[str, list[float]] = {}
    for e in range(2 if epochs > 2 else 0, epochs):  # from epoch 2, as "steady"
        text = "".join(open(f, errors="replace").read() for f in glob.glob(os.path.join(
            server.home, "logs", "dag_id=iterate_pagerank", f"run_id={run_id}", f"task_id=epoch_{e}.run", "*.log")))
        line = re.search(r"epoch \d+ in this task: ([\d.]+) s \(([^)]*)\)", text)
        if not line:
            continue
        ti = tis[f"epoch_{e}.run"]
        phases.setdefault("outside execute", []).append(_t(ti["end_date"]) - _t(ti["start_date"]) - float(line[1]))
        for part in line[2].split(", "):
            m = re.fullmatch(r"(.+) ([\d.]+) s", part)
            if m:
                phases.setdefault(m[1], []).append(float(m[2]))
        # and inside its Spark job (spark_jobs.epoch): the body's load, the variables, the step
        spark = re.search(r"static input ([\d.]+)s \((\w+)[^)]*\), restore ([\d.]+)s \([^)]*\), step and tail "
                          r"([\d.]+)s", text)
        if spark:
            for k, v in ((f"  of which static input ({spark[2]})", spark[1]), ("  restore", spark[3]),
                         ("  step and tail", spark[4])):
                phases.setdefault(k, []).append(float(v))
    # latency between a task's end and its successor's start: until the scheduler queues the
    # successor, then until its process reports it running
    queued: list[float] = []
    started: list[float] = []
    for e in range(epochs):
        chain = ran(e - 1)[-1:] if e else []
        chain += ran(e)
        for up, down in zip(chain, chain[1:]):
            ended, ti = _t(tis[up]["end_date"]), tis[down]
            if ti.get("queued_when"):
                queued.append(_t(ti["queued_when"]) - ended)
                started.append(_t(ti["start_date"]) - _t(ti["queued_when"]))
    hand_offs = len(queued) / epochs
    return {"wall": wall, "epochs": (last - first) / epochs, "steady": steady, "tasks": durations, "own_gx": own,
            "commits": len(logs), "to_queued": statistics.mean(queued), "to_started": statistics.mean(started),
            "hand_offs": hand_offs, "phases": {k: statistics.mean(v) for k, v in phases.items()}}


def library(spark, path: str, epochs: int, partitions: int, root: str) -> tuple[float, float]:
    from include.contract import JobConfig
    from spark_jobs.runner import IterationRunner

    cfg = JobConfig(job_id="lib", body="pagerank", input=path, checkpoint_root=os.path.join(root, "store"),
                    output_path=os.path.join(root, "out"), max_epochs=epochs, tolerance=0.0,
                    num_partitions=partitions)
    import logging

    seconds: dict[int, float] = {}

    class Epochs(logging.Handler):  # the runner's line per epoch: "job lib epoch 3: ... 2.31s committed"
        def emit(self, record):
            m = re.match(r"job lib epoch (\d+): .* (\d+\.\d+)s committed", record.getMessage())
            if m:
                seconds[int(m.group(1))] = float(m.group(2))

    handler = Epochs()
    logger = logging.getLogger("iterations")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        started = time.perf_counter()
        IterationRunner(cfg, spark).run()
        total = time.perf_counter() - started
    finally:
        logger.removeHandler(handler)
    later = [v for e, v in seconds.items() if e >= 2]
    return total, (sum(later) / len(later) if later else float("nan"))


def library_on(url: str, warm: str, path: str, args, work: str) -> tuple[tuple[float, float], dict[str, float]]:
    """The library runner on the Spark Connect server at ``url``, after an uncounted warm-up
    job: (its seconds, its mean from epoch 2), and the CPU seconds by component meanwhile."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).create()
    try:
        library(spark, warm, 2, args.partitions, os.path.join(work, "lib-warm"))
        snapshot = cpu_snapshot()
        measured = library(spark, path, args.epochs, args.partitions, os.path.join(work, "lib"))
        return measured, cpu_by_group(snapshot, cpu_snapshot())
    finally:
        spark.stop()


def _scheduler_dir(server) -> str | None:
    """/proc/<pid> of the ``airflow scheduler`` process (not its workers)."""
    for pid_dir in glob.glob("/proc/[0-9]*"):
        try:
            cmd = open(os.path.join(pid_dir, "cmdline"), "rb").read().replace(b"\0", b" ").decode(errors="replace")
            pid = int(os.path.basename(pid_dir))
            ours = (os.getsid(pid) == server.scheduler_session if hasattr(server, "scheduler_session")
                    else os.getpgid(pid) == server.proc.pid)
            # on the stack the session's leader is stack.supervise, whose command names the scheduler's
            if re.search(r"airflow scheduler\b", cmd) and "stack.supervise" not in cmd and ours:
                return pid_dir
        except (OSError, ValueError):
            continue
    return None


# first match wins: the Spark JVMs' command lines name executors too (spark.executor.memory)
_GROUPS = (("Spark JVM", ("SparkConnectServer", "org.apache.spark")),
           ("task processes", ("task supervisor", "task runner", "airflow worker", "executor", "LocalExecutor",
                               "celery", "execute_workload")),
           ("PostgreSQL and Redis", ("postgres", "redis-server")),
           ("scheduler", ("airflow scheduler",)),
           ("api-server", ("api-server", "api_server", "uvicorn", "gunicorn")),
           ("dag-processor", ("dag-processor", "dag_processor", "DagFileProcessor")),
           ("triggerer", ("triggerer",)),
           ("Spark Python workers", ("pyspark.daemon",)))


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    """Per live process: its group (``_GROUPS`` by command line, else "other") and the CPU
    seconds it and its reaped children used. A task process's seconds reach its worker when
    the worker reaps it: summed over groups, the deltas between two snapshots are what ran."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for pid_dir in glob.glob("/proc/[0-9]*"):
        try:
            cmd = open(os.path.join(pid_dir, "cmdline"), "rb").read().replace(b"\0", b" ").decode(errors="replace")
            fields = open(os.path.join(pid_dir, "stat")).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if not cmd:
            continue
        group = next((g for g, marks in _GROUPS if any(m in cmd for m in marks)), "other")
        out[int(os.path.basename(pid_dir))] = (group, sum(int(f) for f in fields[11:15]) / tick)
    return out


def cpu_by_group(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    used: dict[str, float] = {}
    for pid, (group, seconds) in after.items():
        used[group] = used.get(group, 0.0) + seconds - (before[pid][1] if pid in before else 0.0)
    return used


def scheduler_rss(server) -> int:
    """Resident bytes of the ``airflow scheduler`` process (not its workers)."""
    pid_dir = _scheduler_dir(server)
    try:
        for line in open(os.path.join(pid_dir, "status")) if pid_dir else ():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def scheduler_cpu(server) -> float:
    """CPU seconds (user and system) the scheduler process has used so far (not its workers')."""
    pid_dir = _scheduler_dir(server)
    try:
        fields = open(os.path.join(pid_dir, "stat")).read().rsplit(")", 1)[1].split() if pid_dir else []
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else float("nan")
    except (OSError, ValueError, IndexError):
        return float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=250_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--executors", nargs="+", choices=sorted(EXECUTORS), default=list(EXECUTORS),
                   help="the executors to run (default: all three; Celery is the native production stack)")
    p.add_argument("--setting", action="append", default=[], metavar="AIRFLOW__SECTION__KEY=VALUE",
                   help="an Airflow setting for the runs (repeatable), e.g. AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=0.2")
    p.add_argument("--rounds", type=int, default=2,
                   help="measured rounds per executor, each a DAG run then the library runner on the same Spark; "
                        "the last round's figures are reported (the first warms the server's JVM for both)")
    p.add_argument("--keep", action="store_true", help="keep the Airflow homes (task logs) and print where")
    p.add_argument("--commit-in-head", choices=("0", "1"), default=None,
                   help="the DAG's commit_in_head, through ITERATIONS_COMMIT_IN_HEAD (default: the DAG file's)")
    p.add_argument("--overlap-commits", choices=("0", "1"), default=None,
                   help="the DAG's overlap_commits, through ITERATIONS_OVERLAP_COMMITS (default: the DAG file's)")
    args = p.parse_args(argv)
    settings = dict(s.split("=", 1) for s in args.setting)
    bad = [k for k in settings if not k.startswith("AIRFLOW__")]
    if bad:
        p.error(f"--setting takes AIRFLOW__SECTION__KEY=VALUE, not {bad}")
    if args.commit_in_head is not None:
        settings["ITERATIONS_COMMIT_IN_HEAD"] = args.commit_in_head
    if args.overlap_commits is not None:
        settings["ITERATIONS_OVERLAP_COMMITS"] = args.overlap_commits

    from stack.services import Stack
    from tests.dags.airflow_server import AirflowServer, StackApi

    path, exact = graph(args.edges)
    warm, _ = graph(20_000)
    print(f"machine: {machine()}; PageRank {exact:,} edges, {args.partitions} partitions, {args.epochs} epochs, "
          f"airflow standalone (LocalExecutor workers, SQLite) and the native stack (Celery, PostgreSQL)", flush=True)
    results: dict[str, dict] = {}
    lib_seconds = lib_steady = None
    lib_groups: dict[str, float] = {}
    lib_server = None  # the executor on whose server the library runner runs
    stack_lib: tuple[float, float] | None = None
    # per round, on the library runner's server: the DAG run's s per epoch (from epoch 2), the library's
    paired: list[tuple[int, float, float, float, float]] = []
    for name in args.executors:
        executor = EXECUTORS[name]
        home = tempfile.mkdtemp(prefix="airflow-sched-", dir=DATA)
        work = tempfile.mkdtemp(prefix="bench-sched-", dir=DATA)
        if name == "Celery":
            stack = Stack(os.path.join(home, "stack"), extra_env={
                **settings, "ITERATIONS_ALLOWED_ROOTS": DATA, "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"})
        else:
            server = AirflowServer(home, os.path.join(home, "spark-connect"))
            server.env["AIRFLOW__CORE__EXECUTOR"] = executor
            server.env.update(settings)
            server.env["ITERATIONS_ALLOWED_ROOTS"] = ",".join(filter(None, [server.env.get("ITERATIONS_ALLOWED_ROOTS"),
                                                                            DATA]))
        try:
            if name == "Celery":
                server = StackApi(stack.start())
            else:
                server.start()
            server.unpause("iterate_pagerank")
            dag_run(server, work, "warm", warm, 2, args.partitions)  # starts the Spark Connect server
            for round_ in range(1, args.rounds + 1):  # the last round's figures are kept
                cpu, snapshot = scheduler_cpu(server), cpu_snapshot()
                results[name] = dag_run(server, work, f"measured-{round_}", path, args.epochs, args.partitions)
                results[name]["groups"] = cpu_by_group(snapshot, cpu_snapshot())
                results[name]["rss"] = scheduler_rss(server)
                results[name]["cpu"] = (scheduler_cpu(server) - cpu) / results[name]["wall"]
                r = results[name]
                print(f"  {name}, round {round_}: DAG run {r['wall']:.1f} s, {r['epochs']:.2f} s per epoch "
                      f"({r['steady']:.2f} from epoch 2); commits importing Great Expectations themselves: "
                      f"{r['own_gx']} of {r['commits']}", flush=True)
                lib_work = os.path.join(work, f"lib-{round_}")
                if name == "Celery":  # the library runner on the stack's Spark (a standalone cluster)
                    stack_lib, _ = library_on(f"sc://127.0.0.1:{stack.ports['spark_connect']}", warm, path, args,
                                              lib_work)
                    print(f"  library runner on the stack's Spark Connect server, round {round_}: "
                          f"{stack_lib[0]:.1f} s ({stack_lib[1]:.2f} s per epoch from epoch 2)", flush=True)
                elif lib_server in (None, name):  # the first local executor's server, every round
                    # the DAG runs' server (the warm-up started it), found as its tasks find it: by
                    # the Airflow's environment (its port and state directory, which this process's
                    # connect_server module read at import from its own)
                    url = subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "start"], env=server.env,
                                         check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
                    (lib_seconds, lib_steady), lib_groups = library_on(url, warm, path, args, lib_work)
                    lib_server = name
                    r = results[name]
                    paired.append((round_, r["epochs"], r["steady"], lib_seconds / args.epochs, lib_steady))
                    print(f"  library runner on the same Spark Connect server, round {round_}: {lib_seconds:.1f} s "
                          f"({lib_steady:.2f} s per epoch from epoch 2)", flush=True)
        finally:
            if name == "Celery":
                stack.stop()
            else:
                server.stop()
            if args.keep:
                print(f"  kept: Airflow home {home}, job files {work}", flush=True)
            else:
                shutil.rmtree(work, ignore_errors=True)
                shutil.rmtree(home, ignore_errors=True)

    print(f"\nPageRank {exact:,} edges, {args.epochs} epochs, {machine()}")
    kinds = ("run", "align", "commit")
    print("| executor | s per epoch | from epoch 2 | " + " | ".join(f"{k} task, mean s" for k in kinds)
          + " | upstream end -> queued | queued -> running | commits importing GX | scheduler RSS | scheduler CPU |")
    print("|---|---|---|" + "---|" * len(kinds) + "---|---|---|---|---|")
    for name, r in results.items():
        cells = " | ".join(f"{statistics.mean(r['tasks'][k]):.2f}" if k in r["tasks"] else "-" for k in kinds)
        print(f"| {name} | {r['epochs']:.2f} | {r['steady']:.2f} | {cells} | {r['to_queued']:.2f} | "
              f"{r['to_started']:.2f} | {r['own_gx']} of {r['commits']} | {r['rss'] / 2**20:.0f} MiB | "
              f"{r['cpu']:.0%} of a core |")
    for name, r in results.items():
        groups = sorted(r["groups"].items(), key=lambda kv: -kv[1])
        print(f"{name}: CPU seconds per epoch during the DAG run (this machine: {os.cpu_count()} cores, "
              f"{r['epochs']:.2f} s per epoch): " + ", ".join(f"{g} {v / args.epochs:.2f}" for g, v in groups if v > 0.005)
              + f"; all {sum(v for _g, v in groups) / args.epochs:.2f}")
    for name, r in results.items():
        parts = sum(statistics.mean(v) * len(v) for v in r["tasks"].values()) / args.epochs + \
            r["hand_offs"] * (r["to_queued"] + r["to_started"])
        print(f"{name}: the tasks' durations ({', '.join(f'{k} x{len(v)}' for k, v in r['tasks'].items())}) plus "
              f"{r['hand_offs']:.1f} hand-offs per epoch make {parts:.2f} s of the {r['epochs']:.2f} s per epoch")
    for name, r in results.items():
        if r["phases"]:
            print(f"{name}: the run task, mean s per epoch from epoch 2: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()))
    if "LocalExecutor" in results and "PreloadingLocalExecutor" in results:
        a, b = results["LocalExecutor"]["epochs"], results["PreloadingLocalExecutor"]["epochs"]
        print(f"preloading: {b - a:+.2f} s per epoch ({b / a:.2f}x)")
    local = {n: r for n, r in results.items() if n != "Celery"}
    if settings:
        print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    if lib_seconds is not None:
        lib = lib_seconds / args.epochs
        print(f"library runner: {lib:.2f} s per epoch (load included); above it per epoch: "
              + ", ".join(f"{n} {r['epochs'] - lib:+.2f} s ({r['epochs'] / lib:.2f}x)" for n, r in local.items()))
        groups = sorted(lib_groups.items(), key=lambda kv: -kv[1])
        print("library runner: CPU seconds per epoch (this process is 'other'): "
              + ", ".join(f"{g} {v / args.epochs:.2f}" for g, v in groups if v > 0.005)
              + f"; all {sum(v for _g, v in groups) / args.epochs:.2f}")
        print(f"library runner from epoch 2: {lib_steady:.2f} s per epoch; above it: "
              + ", ".join(f"{n} {r['steady'] - lib_steady:+.2f} s ({r['steady'] / lib_steady:.2f}x)"
                          for n, r in local.items()))
    if len(paired) > 1:
        # one round's ratio moves with whatever else the machine did in those minutes: each
        # round, then the medians of the warm rounds (the first warms the server's JVM)
        print(f"\n{lib_server} and the library runner, round by round (s per epoch; from epoch 2):")
        print("| round | DAG run | library runner | ratio | ratio from epoch 2 |")
        print("|---|---|---|---|---|")
        for round_, dag_m, dag_s, lib_m, lib_s in paired:
            print(f"| {round_} | {dag_m:.2f} ({dag_s:.2f}) | {lib_m:.2f} ({lib_s:.2f}) | "
                  f"{dag_m / lib_m:.2f}x | {dag_s / lib_s:.2f}x |")
        dag_m, dag_s, lib_m, lib_s = (statistics.median(column) for column in list(zip(*paired[1:]))[1:])
        print(f"medians of rounds 2-{paired[-1][0]}: DAG run {dag_m:.2f} s per epoch ({dag_s:.2f} from epoch 2), "
              f"library runner {lib_m:.2f} ({lib_s:.2f}): {dag_m / lib_m:.2f}x ({dag_s / lib_s:.2f}x)")
    if stack_lib is not None:
        r, lib = results["Celery"], stack_lib[0] / args.epochs
        print(f"Celery stack: library runner on its Spark cluster {lib:.2f} s per epoch ({stack_lib[1]:.2f} from epoch 2); "
              f"the DAG run {r['epochs']:.2f} s ({r['epochs'] / lib:.2f}x), from epoch 2 {r['steady']:.2f} s "
              f"({r['steady'] / stack_lib[1]:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
