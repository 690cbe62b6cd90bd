"""Small variables written by the driver (``IterationRunner(driver_tail_bytes=...)``) against the
tail in Spark, side by side on one warm local session.

A PageRank job on a small graph runs ``--epochs`` epochs with each tail, ``--rounds`` times, in
alternating order (the JVM keeps getting faster over a run, which favours whatever runs last);
the first round of each is a warm-up and is not counted. Printed per tail: the median seconds
and CPU seconds (the driver, the Spark JVM and its Python workers) per epoch, and the Spark
jobs per epoch; then whether both wrote the same bytes in every checkpoint. Run::

    .venv/bin/python -m bench.driver_tail                        # 40 nodes, 20 epochs, 5 rounds
    .venv/bin/python -m bench.driver_tail --nodes 2000 --epochs 10
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TAILS = {"spark": -1, "driver": None}  # driver_tail_bytes: -1 never, None the default


def last_job(tracker) -> int:
    """The id of the newest Spark job (ids count up from 0; the tracker forgets old jobs, so
    the difference of two ids counts the jobs in between, not the lengths of two lists)."""
    return max(tracker.getJobIdsForGroup(None), default=-1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="rounds per tail, the first not counted")
    args = ap.parse_args(argv)
    if args.rounds < 2 or args.epochs < 2 or args.nodes < 2:
        ap.error(f"--rounds, --epochs and --nodes must be at least 2 (got {args.rounds}, {args.epochs}, {args.nodes})")
    logging.basicConfig(level=logging.WARNING)

    from bench.common import tree_cpu_seconds
    from include.epoch import IterationJob
    from spark_jobs.runner import IterationRunner
    from spark_jobs.session import get_spark
    from tests.helpers import graph_with_dangling, pagerank_config, write_edges

    spark = get_spark("bench-driver-tail")
    tracker = spark.sparkContext.statusTracker()
    work = Path(tempfile.mkdtemp(prefix="bench-driver-tail-"))
    edges = write_edges(work / "edges.csv", graph_with_dangling(args.nodes, min(0.5, 4.0 / args.nodes), seed=3))
    per_epoch: dict[str, list[tuple[float, float, float]]] = {t: [] for t in TAILS}
    last: dict[str, IterationJob] = {}
    for rnd in range(args.rounds):
        for tail in (TAILS if rnd % 2 == 0 else reversed(list(TAILS))):
            cfg = pagerank_config(work / f"{tail}-{rnd}", edges, job_id=f"pr-{tail}-{rnd}", max_epochs=args.epochs,
                                  tolerance=0.0, retain_last=args.epochs + 1)
            runner = IterationRunner(cfg, spark, driver_tail_bytes=TAILS[tail])
            jobs_before = last_job(tracker)
            wall, cpu = time.perf_counter(), tree_cpu_seconds()
            runner.run()
            wall, cpu = time.perf_counter() - wall, tree_cpu_seconds() - cpu
            jobs = last_job(tracker) - jobs_before
            if rnd > 0:
                per_epoch[tail].append((wall / args.epochs, cpu / args.epochs, jobs / args.epochs))
            last[tail] = IterationJob(cfg)
            print(f"round {rnd} {tail:6s} {wall:6.1f} s {cpu:6.1f} CPU s{'' if rnd else ' (warm-up)'}", flush=True)
    print(f"\nPageRank, {args.nodes} nodes, {args.epochs} epochs, medians of {args.rounds - 1} rounds per tail:")
    print(f"{'tail':8s} {'s/epoch':>8s} {'CPU s/epoch':>12s} {'jobs/epoch':>11s}")
    for tail, rows in per_epoch.items():
        print(f"{tail:8s} {statistics.median(r[0] for r in rows):8.2f} {statistics.median(r[1] for r in rows):12.2f} "
              f"{statistics.median(r[2] for r in rows):11.1f}")
    same = all([f.sha256 for f in last["spark"].log.load(e).variables["ranks"].files]
               == [f.sha256 for f in last["driver"].log.load(e).variables["ranks"].files] for e in range(args.epochs))
    print(f"the same bytes in every checkpoint: {same}")
    spark.stop()


if __name__ == "__main__":
    main()
