"""The end-to-end demo behind ``./run.sh demo``: PageRank on a generated graph on the embedded
default - the ``iterate_pagerank`` Airflow DAG run by ``airflow dags test`` (local Airflow with
SQLite under .local/airflow), each epoch a Spark job on the embedded Spark Connect server,
checkpoints in a local directory store - then the published ranks checked against networkx.

    ./run.sh demo                    # fresh job: .local/demo is cleared first
    ./run.sh demo --resume           # keep the store: resume (or re-read) the same job
    ./run.sh demo --library          # the same job through the Python library runner, no Airflow
    ./run.sh demo --nodes 20000      # a bigger graph
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import time

import numpy as np
import pandas as pd

from include.contract import JobConfig
from include.process import AIRFLOW_HOME, LOCAL_DIR, PROJECT_ROOT


def generate_graph(path: str, nodes: int, avg_degree: int, seed: int) -> int:
    """A directed graph with a skewed in-degree (some pages are popular) and dangling nodes."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    edges = nodes * avg_degree
    src = rng.integers(0, nodes, edges)
    dst = np.minimum((rng.pareto(1.5, edges) * nodes / 50).astype(np.int64), nodes - 1)
    keep = src % 17 != 0  # every 17th node has no out-edges
    frame = pd.DataFrame({"src": src[keep], "dst": dst[keep]}).drop_duplicates()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    frame.to_parquet(path, index=False)
    return len(frame)


#: Airflow's console log lines: ``<time> [<level>] <message> [<logger>] <key=value...>``
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT(\d\d:\d\d:\d\d)\S*\s+\[(\w+)\s*\]\s+(.*)\s+\[([\w.]+)\](?=\s+\w+=|\s*$)")
#: what the demo shows of a DAG run as it goes: the job's progress, not Airflow's own chatter
_PROGRESS = ("committed", "restored", "published", "is TERMINATED", "terminating", "retrying", "failed")


def _ours(logger: str) -> bool:
    """A logger of this project (the runtime's, or an operator of the iterations plugin)."""
    return logger in ("iterations", "task") or logger.startswith(("iterations.", "include.")) \
        or ".iterations." in logger


def readable(line: str) -> str | None:
    """One line of ``airflow dags test``'s output as a sentence, ``12:03:04 epoch 3 committed:
    ...`` (the level when it is not info), without the logger's name, the source location and
    the other fields; None for a line that is not the job's progress (Airflow's own lines, but
    for a task's error)."""
    m = _LOG_LINE.match(line)
    if m is None:
        return line.rstrip() if line.startswith(("ERROR", "Traceback")) else None
    clock, level, message, logger = m.groups()
    message = message.strip()
    serious = level in ("error", "critical")
    if not _ours(logger) or "[DAG TEST]" in message:
        return None
    if logger == "task" and not serious:
        return None
    if not serious and level != "warning" and not any(word in message for word in _PROGRESS):
        return None
    return f"{clock} {'' if level == 'info' else level.upper() + ' '}{message[:300]}"


def run_dag(dag_id: str, conf: dict, allowed_roots: tuple[str, ...] = ()) -> int:
    """``airflow dags test`` with an Airflow home under .local/airflow (created on first use).
    ``allowed_roots``: places the run may name besides the DAG's own roots (the demo, acting as
    the deployer of its run, allows its own directory: the local directory is no DAG's root)."""
    import json
    import subprocess

    from include.store import ROOTS_ENV, deployment_roots

    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    env = {
        **os.environ,
        ROOTS_ENV: ",".join([*deployment_roots(), *allowed_roots]),
        "AIRFLOW_HOME": AIRFLOW_HOME.get() or os.path.join(LOCAL_DIR, "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(PROJECT_ROOT, "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(PROJECT_ROOT, "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__CALLSITE_PARAMETERS": "",  # task logs without loc=file.py:123
    }
    # the embedded Spark Connect server starts (its JVM, seconds) while Airflow's database is
    # migrated and the DAG run made; the run's first task finds it up, or waits for its start lock
    starter = subprocess.Popen([sys.executable, "-m", "spark_jobs.connect_server", "start"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(f"airflow db migrate (AIRFLOW_HOME={env['AIRFLOW_HOME']})")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    print(f"airflow dags test {dag_id} --conf '{json.dumps(conf)}'", flush=True)
    proc = subprocess.Popen([airflow, "dags", "test", dag_id, "--conf", json.dumps(conf)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    for line in proc.stdout:  # the job's progress as it goes
        lines.append(line)
        shown = readable(line)
        if shown is not None:
            print("  " + shown, flush=True)
    code = proc.wait()
    started, _ = starter.communicate()
    if starter.returncode != 0:  # the first task started it, or said why it could not
        print(f"(starting the Spark Connect server beforehand failed: {started.strip()[-500:]})", file=sys.stderr)
    log = "".join(lines)
    if code != 0 or "state=success" not in log:
        print(log[-4000:], file=sys.stderr)
        print(f"error: the DAG run failed (exit {code})", file=sys.stderr)
        return 1
    return 0


def generate_points(path: str, points: int, seed: int) -> None:
    """Blobs for the iterate_kmeans DAG's default input."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-20, 20, size=(4, 2))
    labels = rng.integers(0, len(centers), points)
    xy = centers[labels] + rng.normal(0, 2.0, size=(points, 2))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pd.DataFrame({"id": np.arange(points), "x": xy[:, 0], "y": xy[:, 1]}).to_parquet(path, index=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="./run.sh demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--avg-degree", type=int, default=8)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--tolerance", type=float, default=1e-6)
    p.add_argument("--max-epochs", type=int, default=20)
    p.add_argument("--library", action="store_true", help="run through the Python library, not Airflow")
    p.add_argument("--resume", action="store_true", help="keep .local/demo and resume the same job")
    p.add_argument("--workdir", default=os.path.join(LOCAL_DIR, "demo"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)

    if not args.resume:
        shutil.rmtree(args.workdir, ignore_errors=True)
    edges_path = os.path.join(args.workdir, "input", "edges.parquet")
    if not os.path.exists(edges_path):
        n = generate_graph(edges_path, args.nodes, args.avg_degree, seed=7)
        print(f"generated {n} edges over {args.nodes} nodes in {edges_path}")
    points_path = os.path.join(args.workdir, "input", "points.parquet")
    if not os.path.exists(points_path):
        generate_points(points_path, 2000, seed=7)  # the iterate_kmeans DAG's default input

    store, output = os.path.join(args.workdir, "store"), os.path.join(args.workdir, "output")
    started = time.monotonic()
    if args.library:
        from spark_jobs.runner import IterationRunner

        config = JobConfig(job_id="demo-pagerank", body="pagerank", input=edges_path, checkpoint_root=store,
                           output_path=output, body_params={"damping": 0.85}, max_epochs=args.max_epochs,
                           tolerance=args.tolerance, num_partitions=args.partitions)
        result = IterationRunner(config).run()
        print(f"job {result.job_id}: {result.status.value} at checkpoint {result.checkpoint_id}, "
              f"{len(result.epochs_computed)} epochs computed this run")
    else:
        conf = {"job_id": "demo-pagerank", "input_path": edges_path, "checkpoint_root": store,
                "output_path": output, "max_epochs": args.max_epochs, "tolerance": args.tolerance,
                "num_partitions": args.partitions, "damping": 0.85}
        if run_dag("iterate_pagerank", conf, allowed_roots=(os.path.realpath(args.workdir),)) != 0:
            return 1
    elapsed = time.monotonic() - started
    from include.publication import published

    current = published(output, "ranks")
    ranks = pd.concat([pd.read_parquet(f) for f in current.locations]).sort_values("rank", ascending=False)

    import networkx as nx

    edges = pd.read_parquet(edges_path)
    graph = nx.from_pandas_edgelist(edges, "src", "dst", create_using=nx.DiGraph)
    reference = nx.pagerank(graph, alpha=0.85, tol=1e-12)
    diff = max(abs(r - reference[n]) for n, r in zip(ranks["node"], ranks["rank"]))

    print()
    print(f"PageRank of {len(ranks)} nodes in {elapsed:.1f}s "
          f"({'library runner' if args.library else 'Airflow DAG iterate_pagerank'})")
    print(f"  checkpoints: {store}")
    print(f"  output:      {os.path.join(output, 'ranks', '_PUBLISHED.json')} (checkpoint {current.checkpoint_id})")
    print(f"  ranks sum to {ranks['rank'].sum():.12f}; max |ours - networkx| = {diff:.2e}")
    print("  top 5 nodes:")
    for node, rank in ranks.head(5).itertuples(index=False):
        print(f"    {node:>8}  {rank:.6f}")
    if not args.library:
        print("  the warm Spark Connect server stays up for the next runs; stop it with:\n"
              "    .venv/bin/python -m spark_jobs.connect_server stop")
    if diff > 1e-5:
        print("error: the result differs from networkx.pagerank", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
