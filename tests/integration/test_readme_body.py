"""The minimal body in README.md runs as written: connected components of a small graph, through
the library runner, equal networkx's (each node labelled with the smallest node of its
component), and a second run of the job changes nothing."""

from __future__ import annotations

import os
import re
import sys

import networkx as nx
import pytest

from include.checkpoints.head_state import HeadStatus
from include.contract.config import JobConfig
from spark_jobs.runner import IterationRunner
from tests.helpers import write_edges

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_body() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    found = re.search(r"<!-- minimal-body:[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert found, "README.md has no minimal-body code block"
    return found.group(1)


@pytest.fixture
def components_module(tmp_path, monkeypatch):
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "readme_components.py").write_text(readme_body())
    monkeypatch.syspath_prepend(str(tmp_path / "mod"))
    yield "readme_components:ConnectedComponents"
    sys.modules.pop("readme_components", None)


def test_the_readme_body_finds_connected_components(spark, tmp_path, components_module):
    g = nx.Graph()
    g.add_edges_from([(1, 2), (2, 3), (3, 4), (10, 11), (12, 11), (20, 21), (30, 30)])
    g.add_edges_from((i, i + 1) for i in range(40, 52))  # a path: labels travel 12 hops
    edges = write_edges(tmp_path / "edges.csv", g)
    config = JobConfig(job_id="cc", body=components_module, input=edges, checkpoint_root=str(tmp_path / "store"),
                       tolerance=0.5, max_epochs=50, num_partitions=3)
    result = IterationRunner(config, spark).run()
    assert result.status is HeadStatus.TERMINATED
    assert result.decisions[-1].reason.startswith("converged")
    labels = {r["node"]: r["label"] for r in result.outputs["labels"].collect()}
    expected = {n: min(c) for c in nx.connected_components(g) for n in c}
    assert labels == expected
    assert len(result.decisions) >= 12, "the path needs one epoch per hop"

    again = IterationRunner(config, spark).run()
    assert again.epochs_computed == [] and again.checkpoint_id == result.checkpoint_id
