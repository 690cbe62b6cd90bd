"""The 20M-edge PageRank DAG on the native stack's Spark standalone cluster (issue 48, item 3):
``python -m stack start`` (the real services of ``./run.sh stack``: PostgreSQL, Redis, Celery
workers, the real scheduler, a Spark master with two workers and a Spark Connect server on
them, moto_server for S3), the input uploaded to its ``iterations-inputs`` bucket, the
checkpoint root and the outputs on its S3 endpoint, one DAG run triggered through the REST API.

Reported from the run's task instances (the API's start and end dates): each epoch's ``run``
task (head, step, tail and commit: ``commit_in_head``), the finish, and the run's wall time;
the bytes one epoch's checkpoint holds; the settings the stack's Spark was started with. Put it
beside the embedded default's figure (``bench.sweep``). Run::

    .venv/bin/python -m bench.cluster_scale                  # 20M edges, 4 epochs
    .venv/bin/python -m bench.cluster_scale --edges 1000000 --executor-memory 768m
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, ROOT, graph, machine  # noqa: E402


def _seconds(ti: dict) -> float:
    start, end = (dt.datetime.fromisoformat(ti[k].replace("Z", "+00:00")) for k in ("start_date", "end_date"))
    return (end - start).total_seconds()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=20_000_000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--worker-memory", default="6g", help="each Spark worker's memory (the stack's default: 2g)")
    p.add_argument("--executor-memory", default="4g", help="the Connect server's executors' (the stack's: 768m)")
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error(f"--epochs must be >= 2 (the first epoch also loads the input), got {args.epochs}")

    import boto3

    from include.checkpoints import CheckpointLog
    from include.store import open_store
    from stack.services import S3_KEY_ID, Stack
    from tests.dags.airflow_server import StackApi

    path, exact = graph(args.edges)
    home = tempfile.mkdtemp(prefix="stack-", dir=DATA)
    started = subprocess.run(
        [sys.executable, "-m", "stack", "start", "--home", home, "--spark-worker-memory", args.worker_memory,
         "--spark-conf", f"spark.executor.memory={args.executor_memory}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    stack = Stack(home)
    try:
        if started.returncode != 0:
            raise SystemExit(f"the stack did not start:\n{started.stdout[-3000:]}{started.stderr[-3000:]}")
        secret = stack.state["secrets"]["s3_secret"]
        s3 = boto3.client("s3", endpoint_url=stack.s3_endpoint, region_name="us-east-1",
                          aws_access_key_id=S3_KEY_ID, aws_secret_access_key=secret)
        key = os.path.basename(path)
        t = time.perf_counter()
        s3.upload_file(path, "iterations-inputs", key)
        print(f"machine: {machine()}; the stack's Spark: 2 workers of {args.worker_memory}, the Connect server's "
              f"executors {args.executor_memory}, 2 cores; input {exact:,} edges uploaded in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        api = StackApi(stack)
        api.unpause("iterate_pagerank")
        job = "scale"
        conf = {"job_id": job, "input_path": f"s3://iterations-inputs/{key}",
                "checkpoint_root": "s3://iterations-checkpoints/scale", "output_path": "s3://iterations-outputs/scale",
                "max_epochs": args.epochs, "tolerance": 0, "num_partitions": None, "continuation": False}
        t = time.perf_counter()
        run_id = api.trigger("iterate_pagerank", conf)
        state = api.wait_run("iterate_pagerank", run_id, timeout=args.timeout)
        wall = time.perf_counter() - t
        quoted = urllib.parse.quote(run_id, safe="")
        tis = api.get(f"/api/v2/dags/iterate_pagerank/dagRuns/{quoted}/taskInstances?limit=500")["task_instances"]
        if state != "success":
            failed = [ti["task_id"] for ti in tis if ti["state"] == "failed"]
            raise SystemExit(f"run {run_id} ended {state} (failed: {failed}); logs in {home}/logs "
                             f"and {home}/spark; scheduler: {api.log_tail()}")
        runs = sorted((ti["task_id"], _seconds(ti)) for ti in tis
                      if ti["task_id"].endswith(".run") and ti["state"] == "success")
        finish = next(_seconds(ti) for ti in tis if ti["task_id"] == "finish")
        store = open_store("s3://iterations-checkpoints/scale", endpoint_url=stack.s3_endpoint,
                           access_key_id=S3_KEY_ID, secret_access_key=secret, region="us-east-1")
        log = CheckpointLog(store, job)
        held = next((sum(r.size for r in m.objects) for m in (log.load(c, verify="none")
                     for c in reversed(log.checkpoint_ids())) if m.kind == "epoch"), 0)
        epochs = [s for _, s in runs]
        print(f"\n| edges | where | first epoch task | median epoch task (after the first) | finish | run wall "
              f"| checkpoint per epoch |\n|---|---|---|---|---|---|---|\n"
              f"| {exact:,} | stack: standalone cluster, S3 (moto) | {epochs[0]:.1f} s | "
              f"{statistics.median(epochs[1:]):.1f} s | {finish:.1f} s | {wall:.1f} s | {held / 2**20:.1f} MiB |")
        print("epoch tasks: " + ", ".join(f"{name} {s:.1f} s" for name, s in runs))
    finally:
        stack.stop()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
