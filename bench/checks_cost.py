"""What the data checks cost per epoch, next to the epoch's compute time (issue 6).

PageRank on a generated graph, on one warm local Spark session, two jobs side by side in one
run, epoch by epoch alternately: one with the data checks off (no profile in the tail, no
validation), one with them on (the tail's profile + Great Expectations validating the
attempt's profile + the report written to the store). Per epoch it prints the run step
(Spark: compute + tail writes), the commit step and the validation alone; then medians and
the checks' share. Run::

    .venv/bin/python -m bench.checks_cost --edges 250000 --epochs 8
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=250_000, help="edges of the generated graph")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from include.contract import JobConfig
    from include.epoch import IterationJob
    from spark_jobs.demo import generate_graph
    from spark_jobs.epoch import EpochExecutor
    from spark_jobs.session import get_spark

    work = tempfile.mkdtemp(prefix="bench-checks-")
    edges_path = os.path.join(work, "edges.parquet")
    nodes = max(args.edges // 10, 10)
    edges = generate_graph(edges_path, nodes=nodes, avg_degree=10, seed=7)
    spark = get_spark("bench-checks")
    executor = EpochExecutor(spark)
    jobs = {}
    for mode in ("off", "on"):
        cfg = JobConfig(job_id=f"checks-{mode}", body="pagerank", input=edges_path,
                        checkpoint_root=os.path.join(work, "store"), max_epochs=args.epochs + 1, tolerance=0.0,
                        num_partitions=args.partitions, checks={"enabled": mode == "on"})
        jobs[mode] = IterationJob(cfg)

    rows = {"off": [], "on": []}
    t_import = None
    for epoch in range(args.epochs + 1):  # epoch 0 warms the session and caches the graph
        for mode in ("off", "on") if epoch % 2 else ("on", "off"):
            job = jobs[mode]
            plan = job.attempts.plan_epoch()
            t0 = time.perf_counter()
            executor.run(plan, job.store)
            t1 = time.perf_counter()
            job.committer.commit(plan)
            t2 = time.perf_counter()
            validation = job.committer.last_check_report.seconds if job.committer.last_check_report else 0.0
            if epoch == 0:
                if mode == "on":
                    t_import = validation
                continue
            rows[mode].append((t1 - t0, t2 - t1, validation))
    spark.stop()

    print(f"PageRank, {edges:,} edges, {args.partitions} partitions, {args.epochs} epochs after a warm-up epoch; "
          f"machine: {os.cpu_count()} cores")
    print(f"{'epoch':>5} | {'run off':>8} {'run on':>8} | {'commit off':>10} {'commit on':>9} | {'validation':>10}")
    for i, (off, on) in enumerate(zip(rows["off"], rows["on"]), start=1):
        print(f"{i:>5} | {off[0]:8.3f} {on[0]:8.3f} | {off[1]:10.3f} {on[1]:9.3f} | {on[2]:10.3f}")
    med = {m: [statistics.median(r[k] for r in rows[m]) for k in range(3)] for m in rows}
    epoch_off = med["off"][0] + med["off"][1]
    epoch_on = med["on"][0] + med["on"][1]
    print(f"median | run off {med['off'][0]:.3f}s, on {med['on'][0]:.3f}s (tail profile: "
          f"{med['on'][0] - med['off'][0]:+.3f}s) | commit off {med['off'][1]:.3f}s, on {med['on'][1]:.3f}s | "
          f"validation {med['on'][2]:.3f}s")
    print(f"epoch (run + commit): checks off {epoch_off:.3f}s, on {epoch_on:.3f}s, "
          f"checks cost {epoch_on - epoch_off:+.3f}s per epoch = {100 * (epoch_on - epoch_off) / epoch_off:+.1f}% "
          f"(ratio on/off {epoch_on / epoch_off:.3f})")
    print(f"first validation in a process (imports Great Expectations): {t_import:.2f}s")
    print(f"tail profile alone, all {nodes:,} ranks records in one process (the tail spreads it over "
          f"the partitions' tasks): {profile_seconds(nodes) * 1000:.1f} ms")
    return 0


def profile_seconds(rows: int, batch: int = 10_000) -> float:
    """The tail's profile over ``rows`` (node bigint, rank double) records in Arrow batches of
    ``batch`` (Spark's default), timed directly: the run step's difference above is below the
    noise of one epoch's Spark time."""
    import numpy as np
    import pyarrow as pa

    from spark_jobs.storeio import Profile

    nodes = np.arange(rows, dtype=np.int64)
    ranks = np.random.default_rng(1).random(rows)
    batches = [pa.record_batch({"node": nodes[i:i + batch], "rank": ranks[i:i + batch]}) for i in range(0, rows, batch)]
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        p = Profile(("node",), {"input_nodes": rows})
        for b in batches:
            p.add(b)
        p.to_dict()
        best = min(best, time.perf_counter() - started)
    return best


if __name__ == "__main__":
    sys.exit(main())
