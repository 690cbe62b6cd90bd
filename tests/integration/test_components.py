"""Connected components (spark_jobs.bodies.components) equal networkx's on graphs with a long
path, stars, isolated pairs and self-loops, in O(log n) epochs; bad edge lists are refused."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from include.errors import InputDataError
from spark_jobs.runner import IterationRunner

pytestmark = pytest.mark.spark


def components_config(tmp_path, name: str, **settings) -> JobConfig:
    return JobConfig(job_id=name, body="components", input=str(tmp_path / f"{name}.parquet"),
                     checkpoint_root=str(tmp_path / "store"), max_epochs=60, tolerance=0.5, num_partitions=2,
                     **settings)


def expected(edges) -> dict[int, int]:
    graph = nx.Graph()
    graph.add_edges_from(edges)
    return {node: min(c) for c in nx.connected_components(graph) for node in c}


def test_components_equal_networkx_in_log_n_epochs(spark, tmp_path):
    rng = np.random.default_rng(3)
    ids = rng.permutation(20_000)  # node ids shuffled: the path's order says nothing about them
    path = [(int(ids[i]), int(ids[i + 1])) for i in range(9_999)]  # 10,000 nodes, diameter 9,999
    star = [(int(ids[10_000]), int(ids[10_001 + i])) for i in range(300)]
    pairs = [(int(ids[10_400 + 2 * i]), int(ids[10_401 + 2 * i])) for i in range(50)]
    loops = [(int(ids[10_600]), int(ids[10_600])), (int(ids[10_601]), int(ids[10_601])),
             (int(ids[10_602]), int(ids[10_603])), (int(ids[10_603]), int(ids[10_603]))]
    # a tree of stars joined at their leaves, and each edge given both ways and twice
    tree = [(int(ids[11_000 + i]), int(ids[11_000 + (i - 1) // 3])) for i in range(1, 400)]
    edges = path + star + pairs + loops + tree + [(v, u) for u, v in tree] + pairs
    pd.DataFrame(edges, columns=["src", "dst"]).sample(frac=1, random_state=1).to_parquet(tmp_path / "g.parquet")

    result = IterationRunner(components_config(tmp_path, "g"), spark).run()
    assert result.status.value == "TERMINATED" and result.decisions[-1].reason.startswith("converged")
    assert len(result.epochs_computed) < 30, result.epochs_computed  # label propagation: ~10,000
    got = result.outputs["components"].toPandas()
    assert got["node"].is_unique
    assert dict(zip(got["node"], got["component"])) == expected(edges)


@pytest.mark.parametrize("case", ["null", "text", "double"])
def test_bad_edge_lists_are_refused(spark, tmp_path, case):
    if case == "null":
        (tmp_path / "e.csv").write_text("src,dst\n1,2\n2,\n3,4\n")
        message = "connected components input has an edge with a null dst (e.g. src=2, dst=None)"
    elif case == "text":
        (tmp_path / "e.csv").write_text("src,dst\n1,2\n2,3\nx7,4\n")
        message = "connected components needs integer node ids; column src has 'x7' (e.g. the edge src='x7', dst=4)"
    else:
        pd.DataFrame({"src": [1.0, 2.5], "dst": [2, 3]}).to_parquet(tmp_path / "e.parquet")
        message = "connected components needs integer node ids; column src is double"
    name = "e.parquet" if case == "double" else "e.csv"
    config = JobConfig(job_id="cc", body="components", input=str(tmp_path / name),
                       checkpoint_root=str(tmp_path / "store"), max_epochs=5, tolerance=0.5)
    with pytest.raises(InputDataError) as refused:
        IterationRunner(config, spark).run()
    assert str(refused.value) == message
    assert IterationJob(config).log.latest_id() is None
