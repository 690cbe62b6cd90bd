"""PageRank through the library runner equals networkx.pagerank."""

from __future__ import annotations

import networkx as nx
import pyarrow.parquet as pq
import pytest

from include.checkpoints.head_state import HeadStatus
from include.epoch.job import IterationJob
from include.publication.outputs import published
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of, write_edges

pytestmark = pytest.mark.spark


def hand_graph():
    g = nx.DiGraph()
    g.add_edges_from([(1, 2), (2, 3), (3, 1), (3, 4), (4, 5), (5, 4), (6, 4), (2, 7), (7, 8)])
    g.add_edge(9, 9)  # a self-loop counts as an out-edge, as in networkx
    return g  # 8 is dangling; 6 has no in-edges


def assert_matches_networkx(result, graph, damping, output_path) -> None:
    """A run to convergence equals networkx.pagerank, its ranks sum to 1, and the published
    output holds exactly its ranks."""
    assert result.status is HeadStatus.TERMINATED
    assert result.decisions[-1].reason.startswith("converged")

    ours = ranks_of(result.outputs["ranks"])
    reference = nx.pagerank(graph, alpha=damping, tol=1e-14, max_iter=10_000)
    assert set(ours) == set(reference)
    assert max(abs(ours[n] - reference[n]) for n in reference) < 1e-9
    assert sum(ours.values()) == pytest.approx(1.0, abs=1e-12)

    table = pq.read_table(list(published(output_path, "ranks").locations)).to_pydict()
    assert dict(zip(table["node"], table["rank"])) == ours


# a random graph with dangling nodes, at damping 0.85 (about 160 epochs to 1e-11): the first run
# of test_warm_start_from_yesterdays_ranks_on_a_changed_graph
@pytest.mark.parametrize(
    "name, graph, damping",
    [
        ("hand-made", hand_graph(), 0.6),
        ("star", nx.DiGraph([(0, i) for i in range(1, 12)] + [(i, 0) for i in range(1, 6)]), 0.5),
    ],
)
def test_matches_networkx(spark, tmp_path, name, graph, damping):
    edges = write_edges(tmp_path / "edges.csv", graph)
    config = pagerank_config(tmp_path, edges, job_id=f"pr-{name}", body_params={"damping": damping},
                             tolerance=1e-11, max_epochs=200, output_path=str(tmp_path / "out"))
    assert_matches_networkx(IterationRunner(config, spark).run(), graph, damping, str(tmp_path / "out"))


def test_second_run_changes_nothing(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(20, 0.2, seed=3))
    config = pagerank_config(tmp_path, edges, job_id="pr-again", tolerance=1e-6)
    first = IterationRunner(config, spark).run()
    again = IterationRunner(config, spark).run()
    assert again.epochs_computed == [] and again.epochs_adopted == []
    assert again.checkpoint_id == first.checkpoint_id
    assert ranks_of(again.outputs["ranks"]) == ranks_of(first.outputs["ranks"])


@pytest.mark.slow  # three runs to convergence at 1e-11 and 1e-10
def test_warm_start_from_yesterdays_ranks_on_a_changed_graph(spark, tmp_path):
    """A scheduled job's next batch: epoch 0 starts from the previous job's final ranks, carried
    to today's graph (a new node gets 1/N, a removed one drops out, ranks sum to 1 again);
    it converges to today's PageRank, in fewer epochs than from scratch. Yesterday's job, from
    scratch on a random graph with dangling nodes, equals networkx.pagerank (as
    test_matches_networkx does for its graphs)."""
    yesterday = graph_with_dangling(40, 0.1, seed=21)
    today = yesterday.copy()
    today.add_edge(3, 999)  # a new node
    today.remove_node(7)
    old = pagerank_config(tmp_path, write_edges(tmp_path / "d1.csv", yesterday), job_id="daily.d1",
                          tolerance=1e-11, max_epochs=300, output_path=str(tmp_path / "out-d1"))
    first = IterationRunner(old, spark).run()
    assert_matches_networkx(first, yesterday, 0.85, str(tmp_path / "out-d1"))

    edges = write_edges(tmp_path / "d2.csv", today)
    warm = IterationRunner(pagerank_config(tmp_path, edges, job_id="daily.d2", tolerance=1e-10, max_epochs=300),
                           spark, warm_start=first.final).run()
    # from scratch, the same job has not converged after as many epochs as the warm start took
    # (so it takes more; run no further than that)
    cold = IterationRunner(pagerank_config(tmp_path, edges, job_id="cold.d2", tolerance=1e-10,
                                           max_epochs=len(warm.decisions)), spark).run()
    plan0 = IterationJob(pagerank_config(tmp_path, edges, job_id="daily.d3"), warm_start=first.final).attempts.plan_epoch()
    assert plan0.epoch == 0 and plan0.parent_id is None
    assert plan0.warm_start == {"job_id": "daily.d1", "checkpoint_id": first.checkpoint_id}
    assert plan0.restore_datasets()["ranks"] == first.final.variables["ranks"]
    assert warm.decisions[-1].reason.startswith("converged")
    assert len(cold.decisions) == len(warm.decisions) and cold.decisions[-1].reason.startswith("max epochs reached")
    ours = ranks_of(warm.outputs["ranks"])
    reference = nx.pagerank(today, alpha=0.85, tol=1e-14, max_iter=10_000)
    assert set(ours) == set(reference) and 999 in ours and 7 not in ours
    assert max(abs(ours[n] - reference[n]) for n in reference) < 1e-8
