"""The end-to-end demo behind ``./run.sh demo``: PageRank on a generated graph, on the embedded
default (local Spark, checkpoints in a local directory store under .local/), checked against
networkx. Run it twice: the second run restores the finished job and computes nothing.

    ./run.sh demo                    # fresh job: .local/demo is cleared first
    ./run.sh demo --resume           # keep the store: resume (or re-read) the same job
    ./run.sh demo --nodes 20000      # a bigger graph
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time

import numpy as np

from include.config import JobConfig
from spark_jobs.session import PROJECT_ROOT


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="./run.sh demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--avg-degree", type=int, default=8)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--tolerance", type=float, default=1e-8)
    p.add_argument("--resume", action="store_true", help="keep .local/demo and resume the same job")
    p.add_argument("--workdir", default=os.path.join(PROJECT_ROOT, ".local", "demo"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)

    if not args.resume:
        shutil.rmtree(args.workdir, ignore_errors=True)
    edges_path = os.path.join(args.workdir, "input", "edges.parquet")
    if not os.path.exists(edges_path):
        n = generate_graph(edges_path, args.nodes, args.avg_degree, seed=7)
        print(f"generated {n} edges over {args.nodes} nodes in {edges_path}")

    config = JobConfig(
        job_id="demo-pagerank",
        body="pagerank",
        input=edges_path,
        checkpoint_root=os.path.join(args.workdir, "store"),
        output_path=os.path.join(args.workdir, "output"),
        body_params={"damping": 0.85},
        max_epochs=100,
        tolerance=args.tolerance,
        num_partitions=args.partitions,
    )
    from include.runner import IterationRunner

    started = time.monotonic()
    result = IterationRunner(config).run()
    elapsed = time.monotonic() - started
    ranks = result.outputs["ranks"].toPandas().sort_values("rank", ascending=False)

    import networkx as nx
    import pandas as pd

    edges = pd.read_parquet(edges_path)
    graph = nx.from_pandas_edgelist(edges, "src", "dst", create_using=nx.DiGraph)
    reference = nx.pagerank(graph, alpha=0.85, tol=1e-12)
    diff = max(abs(r - reference[n]) for n, r in zip(ranks["node"], ranks["rank"]))

    print()
    print(f"job {result.job_id}: {result.status.value} at checkpoint {result.checkpoint_id} in {elapsed:.1f}s")
    print(f"  epochs computed this run: {len(result.epochs_computed)}"
          + (f" (resumed from checkpoint {result.restored_from})" if result.restored_from is not None else ""))
    if result.decisions:
        print(f"  termination: {result.decisions[-1].reason}")
    print(f"  checkpoints: {config.checkpoint_root}")
    for name, where in result.published.items():
        print(f"  output {name}: {where}")
    print(f"  ranks sum to {ranks['rank'].sum():.12f}; max |ours - networkx| = {diff:.2e}")
    print("  top 5 nodes:")
    for node, rank in ranks.head(5).itertuples(index=False):
        print(f"    {node:>8}  {rank:.6f}")
    if diff > 1e-6:
        print("error: the result differs from networkx.pagerank", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
