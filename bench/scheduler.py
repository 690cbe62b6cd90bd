"""Epochs under the real scheduler: LocalExecutor against ``PreloadingLocalExecutor``, in one run.

Under a scheduler every task is a process of its own, forked from a LocalExecutor worker. With
plain LocalExecutor each such process imports what its epoch needs for itself: Great
Expectations in every commit task, the Spark Connect client in every run task. The preloading
executor imports them once in the scheduler, before it forks its workers. This runs the same
PageRank DAG run under ``airflow standalone`` (LocalExecutor, SQLite, the warm Spark Connect
server) with each executor, after an uncounted warm-up DAG run each, and prints per epoch: the
wall time from the first epoch's start to the last commit's end, the mean duration of each
kind of task (from the task instances' start and end), and how many commit tasks imported
Great Expectations themselves (their "Great Expectations ready" log line). The library runner
on a session of the same server gives the Spark time the epochs cannot go below. Run::

    .venv/bin/python -m bench.scheduler --edges 250000 --epochs 10
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, graph, machine  # noqa: E402

EXECUTORS = {"LocalExecutor": "LocalExecutor",
             "PreloadingLocalExecutor": "iterations.executors.PreloadingLocalExecutor"}


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
    # a skipped task instance carries start and end dates too (the same instant)
    durations: dict[str, list[float]] = {}
    for e in range(epochs):
        for kind in ("run", "align", "commit"):
            ti = tis[f"epoch_{e}.{kind}"]
            durations.setdefault(kind, []).append(_t(ti["end_date"]) - _t(ti["start_date"]))
    first = _t(tis["epoch_0.run"]["start_date"])
    last = _t(tis[f"epoch_{epochs - 1}.commit"]["end_date"])
    logs = glob.glob(os.path.join(server.home, "logs", "dag_id=iterate_pagerank", f"run_id={run_id}",
                                  "task_id=epoch_*.commit", "*.log"))
    own = sum(1 for f in logs if "imported by this process" in open(f, errors="replace").read())
    # latency between a task's end and its successor's start: until the scheduler queues the
    # successor, then until its process reports it running
    queued: list[float] = []
    started: list[float] = []
    for e in range(epochs):
        chain = [f"epoch_{e - 1}.commit"] if e else []
        chain += [f"epoch_{e}.run", f"epoch_{e}.align", f"epoch_{e}.commit"]
        for up, down in zip(chain, chain[1:]):
            ended, ti = _t(tis[up]["end_date"]), tis[down]
            if ti.get("queued_when"):
                queued.append(_t(ti["queued_when"]) - ended)
                started.append(_t(ti["start_date"]) - _t(ti["queued_when"]))
    return {"wall": wall, "epochs": (last - first) / epochs, "tasks": durations, "own_gx": own, "commits": len(logs),
            "to_queued": statistics.mean(queued), "to_started": statistics.mean(started)}


def library(spark, path: str, epochs: int, partitions: int, root: str) -> float:
    from include.config import JobConfig
    from spark_jobs.runner import IterationRunner

    cfg = JobConfig(job_id="lib", body="pagerank", input=path, checkpoint_root=os.path.join(root, "store"),
                    output_path=os.path.join(root, "out"), max_epochs=epochs, tolerance=0.0,
                    num_partitions=partitions)
    started = time.perf_counter()
    IterationRunner(cfg, spark).run()
    return time.perf_counter() - started


def scheduler_rss(server) -> int:
    """Resident bytes of the ``airflow scheduler`` process (not its workers)."""
    for pid_dir in glob.glob("/proc/[0-9]*"):
        try:
            cmd = open(os.path.join(pid_dir, "cmdline"), "rb").read().replace(b"\0", b" ").decode(errors="replace")
            if re.search(r"airflow scheduler\b", cmd) and os.getpgid(int(os.path.basename(pid_dir))) == server.proc.pid:
                for line in open(os.path.join(pid_dir, "status")):
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=250_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--partitions", type=int, default=4)
    args = p.parse_args(argv)

    from tests.dags.airflow_server import AirflowServer

    path, exact = graph(args.edges)
    warm, _ = graph(20_000)
    print(f"machine: {machine()}; PageRank {exact:,} edges, {args.partitions} partitions, {args.epochs} epochs, "
          f"airflow standalone (LocalExecutor workers, SQLite)", flush=True)
    results: dict[str, dict] = {}
    lib_seconds = None
    for name, executor in EXECUTORS.items():
        home = tempfile.mkdtemp(prefix="airflow-sched-", dir=DATA)
        work = tempfile.mkdtemp(prefix="bench-sched-", dir=DATA)
        server = AirflowServer(home, os.path.join(home, "spark-connect"))
        server.env["AIRFLOW__CORE__EXECUTOR"] = executor
        server.env["ITERATIONS_ALLOWED_ROOTS"] = ",".join(filter(None, [server.env.get("ITERATIONS_ALLOWED_ROOTS"), DATA]))
        try:
            server.start()
            server.unpause("iterate_pagerank")
            dag_run(server, work, "warm", warm, 2, args.partitions)  # starts the Spark Connect server
            results[name] = dag_run(server, work, "measured", path, args.epochs, args.partitions)
            results[name]["rss"] = scheduler_rss(server)
            r = results[name]
            print(f"  {name}: DAG run {r['wall']:.1f} s, {r['epochs']:.2f} s per epoch; commits importing "
                  f"Great Expectations themselves: {r['own_gx']} of {r['commits']}", flush=True)
            if lib_seconds is None:
                from pyspark.sql import SparkSession

                from spark_jobs import connect_server

                os.environ.update({k: server.env[k] for k in ("ITERATIONS_SPARK_CONNECT_PORT",
                                                              "ITERATIONS_SPARK_CONNECT_DIR")})
                spark = SparkSession.builder.remote(connect_server.ensure()).create()
                library(spark, warm, 2, args.partitions, os.path.join(work, "lib-warm"))
                lib_seconds = library(spark, path, args.epochs, args.partitions, os.path.join(work, "lib"))
                spark.stop()
                print(f"  library runner on the same Spark Connect server: {lib_seconds:.1f} s", flush=True)
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(home, ignore_errors=True)

    print(f"\nPageRank {exact:,} edges, {args.epochs} epochs, {machine()}")
    kinds = ("run", "align", "commit")
    print("| executor | s per epoch | " + " | ".join(f"{k} task, mean s" for k in kinds)
          + " | upstream end -> queued | queued -> running | commits importing GX | scheduler RSS |")
    print("|---|---|" + "---|" * len(kinds) + "---|---|---|---|")
    for name, r in results.items():
        cells = " | ".join(f"{statistics.mean(r['tasks'][k]):.2f}" if k in r["tasks"] else "-" for k in kinds)
        print(f"| {name} | {r['epochs']:.2f} | {cells} | {r['to_queued']:.2f} | {r['to_started']:.2f} | "
              f"{r['own_gx']} of {r['commits']} | {r['rss'] / 2**20:.0f} MiB |")
    for name, r in results.items():
        parts = sum(statistics.mean(r["tasks"][k]) for k in kinds) + len(kinds) * (r["to_queued"] + r["to_started"])
        print(f"{name}: the three tasks' mean durations plus three latencies make {parts:.2f} s of the "
              f"{r['epochs']:.2f} s per epoch")
    a, b = results["LocalExecutor"]["epochs"], results["PreloadingLocalExecutor"]["epochs"]
    print(f"preloading: {b - a:+.2f} s per epoch ({b / a:.2f}x)")
    if lib_seconds is not None:
        lib = lib_seconds / args.epochs
        print(f"library runner: {lib:.2f} s per epoch (load included); above it per epoch: "
              + ", ".join(f"{n} {r['epochs'] - lib:+.2f} s" for n, r in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
