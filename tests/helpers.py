"""Inputs and reference results shared by the integration tests."""

from __future__ import annotations

import os

from include.config import JobConfig


def graph_with_dangling(n: int = 40, p: float = 0.1, seed: int = 1):
    import networkx as nx

    g = nx.gnp_random_graph(n, p, seed=seed, directed=True)
    g.add_edge(0, n)  # n and n+1 have no out-edges
    g.add_edge(1, n + 1)
    g.add_edge(n + 1 - 2, n + 1)
    return g


def write_edges(path, graph) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("src,dst\n")
        for u, v in graph.edges():
            f.write(f"{u},{v}\n")
    return str(path)


def ranks_of(df) -> dict:
    return {row["node"]: row["rank"] for row in df.collect()}


def pagerank_config(tmp_path, edges_path, **kw) -> JobConfig:
    defaults = dict(
        job_id="pr",
        body="pagerank",
        input=edges_path if isinstance(edges_path, dict) else str(edges_path),
        checkpoint_root=str(tmp_path / "store"),
        max_epochs=40,
        tolerance=1e-9,
        num_partitions=3,
    )
    defaults.update(kw)
    return JobConfig(**defaults)


def read_published(output_path, name, **store_options):
    """The current published version of an output as one pandas DataFrame (local store)."""
    import pandas as pd

    from include.outputs import published

    return pd.concat([pd.read_parquet(f) for f in published(str(output_path), name, **store_options).locations],
                     ignore_index=True)
