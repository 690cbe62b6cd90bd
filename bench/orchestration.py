"""Orchestration overhead (issue 8, benchmark 2): the same PageRank job through ``airflow dags
test iterate_pagerank`` in both Spark modes, against the library runner, in one run.

* ``library``: ``IterationRunner`` on a session of the warm Spark Connect server;
* ``dags test, connect``: every task of the DAG (run -> align -> commit per epoch, finish,
  continue) in ``airflow dags test``, each epoch's Spark job on the same warm server;
* ``dags test, submit``: the same DAG with every epoch (and the finish) ``spark-submit``-ted
  through the apache-spark provider: a fresh driver JVM per epoch, the conventional cluster path.

The per-epoch overhead is (DAG run - library run) / epochs, where both are end to end; the
DAG run's time includes ``airflow dags test``'s own start (parsing the DAG, the run's set-up),
which is also printed on its own (a run of 1 epoch minus the library's 1 epoch). A warm-up
DAG run on a small graph comes first. Run::

    .venv/bin/python -m bench.orchestration --edges 1000000 --epochs 10
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

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
    }
    env.pop("ITERATIONS_DRIVER_PID", None)
    return env


def dags_test(env: dict[str, str], conf: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run([AIRFLOW, "dags", "test", "iterate_pagerank", "--conf", json.dumps(conf)], env=env,
                          cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0 or "state=success" not in log:
        print(log[-4000:], file=sys.stderr)
        raise SystemExit(f"dags test failed (exit {done.returncode})")
    return elapsed


def library(spark, path: str, epochs: int, partitions: int, root: str, job_id: str) -> float:
    from include.config import JobConfig
    from include.runner import IterationRunner

    cfg = JobConfig(job_id=job_id, body="pagerank", input=path, checkpoint_root=os.path.join(root, "store"),
                    output_path=os.path.join(root, "out"), max_epochs=epochs, tolerance=0.0,
                    num_partitions=partitions)
    started = time.perf_counter()
    result = IterationRunner(cfg, spark).run()
    elapsed = time.perf_counter() - started
    if result.status.value != "TERMINATED":
        raise SystemExit(f"library run ended {result.status}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--no-submit", action="store_true", help="skip spark-submit mode")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from tests.conftest import free_port

    home = tempfile.mkdtemp(prefix="airflow-", dir=DATA) if os.path.isdir(DATA) else tempfile.mkdtemp()
    work = tempfile.mkdtemp(prefix="bench-orch-", dir=DATA)
    env = airflow_env(home, free_port())
    os.environ.update({k: env[k] for k in ("ITERATIONS_SPARK_CONNECT_PORT", "ITERATIONS_SPARK_CONNECT_DIR")})
    path, exact = graph(args.edges)
    warm, _ = graph(20_000)
    print(f"machine: {machine()}; PageRank {exact:,} edges, {args.partitions} partitions, {args.epochs} epochs",
          flush=True)
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)

    def conf(job_id, input_path, epochs):
        return {"job_id": job_id, "input_path": input_path, "checkpoint_root": os.path.join(work, job_id, "store"),
                "output_path": os.path.join(work, job_id, "out"), "max_epochs": epochs, "tolerance": 0,
                "num_partitions": args.partitions, "continuation": False}

    from pyspark.sql import SparkSession

    from spark_jobs import connect_server

    times: dict[str, float] = {}
    try:
        t = dags_test(env, conf("warm", warm, 2))  # starts the warm Spark Connect server too
        print(f"  warm-up DAG run (20k edges, 2 epochs, starts the Spark Connect server): {t:.1f} s", flush=True)
        spark = SparkSession.builder.remote(connect_server.ensure()).create()
        library(spark, warm, 2, args.partitions, os.path.join(work, "warm-lib"), "warm-lib")
        runs = [("library, 1 epoch", lambda: library(spark, path, 1, args.partitions, os.path.join(work, "lib1"), "lib1")),
                ("dags test connect, 1 epoch", lambda: dags_test(env, conf("dag1", path, 1))),
                ("library", lambda: library(spark, path, args.epochs, args.partitions, os.path.join(work, "lib"), "lib")),
                ("dags test connect", lambda: dags_test(env, conf("dagc", path, args.epochs)))]
        if not args.no_submit:
            submit_env = {**env, "ITERATIONS_SPARK_MODE": "submit",
                          "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"})}
            runs.append(("dags test submit", lambda: dags_test(submit_env, conf("dags", path, args.epochs))))
        for name, run in runs:
            times[name] = run()
            print(f"  {name}: {times[name]:.1f} s", flush=True)
    finally:
        subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], env=env, cwd=ROOT,
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)

    fixed = times["dags test connect, 1 epoch"] - times["library, 1 epoch"]
    print(f"\nPageRank {exact:,} edges, {args.epochs} epochs, {machine()}")
    print("| run | seconds | above the library | per epoch |")
    print("|---|---|---|---|")
    lib = times["library"]
    print(f"| library runner (warm Spark Connect session) | {lib:.1f} | | |")
    for name in ("dags test connect", "dags test submit"):
        if name in times:
            extra = times[name] - lib
            print(f"| {name} | {times[name]:.1f} | {extra:+.1f} s | {extra / args.epochs:+.2f} s |")
    print(f"a 1-epoch DAG run costs {fixed:+.1f} s above a 1-epoch library run (dags test start-up, "
          f"DAG parsing, finish and continue tasks); per epoch without it, connect mode: "
          f"{(times['dags test connect'] - lib - fixed) / max(args.epochs - 1, 1):+.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
