"""Resuming with a different number of partitions (Flink refuses this; we don't)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from include.epoch.job import IterationJob
from spark_jobs.runner import IterationRunner
from spark_jobs.storeio import read_dataset
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of, write_edges

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return write_edges(tmp_path_factory.mktemp("graph") / "edges.csv", graph_with_dangling(50, 0.08, seed=11))


@pytest.fixture(scope="module")
def uninterrupted(spark, edges, tmp_path_factory):
    cfg = pagerank_config(tmp_path_factory.mktemp("ref"), edges, num_partitions=4, max_epochs=4, tolerance=0.0)
    return ranks_of(IterationRunner(cfg, spark).run().outputs["ranks"])


@pytest.mark.parametrize("new_partitions", [2, 8])
def test_resume_with_other_partition_count(spark, tmp_path, edges, uninterrupted, new_partitions):
    cfg = pagerank_config(tmp_path, edges, num_partitions=4, max_epochs=4, tolerance=0.0)
    IterationRunner(cfg, spark).run(max_epochs_in_batch=2)

    rescaled = pagerank_config(tmp_path, edges, num_partitions=new_partitions, max_epochs=4, tolerance=0.0)
    job = IterationJob(rescaled)
    latest = job.restorer.state().latest
    assert latest.num_partitions == 4
    plan = job.attempts.plan_epoch()
    moved = plan.head_state["heads"]["ranks"]
    in_flight = [p["in_flight"] for p in moved["partitions"]]
    assert len(in_flight) == new_partitions
    assert sum(in_flight) == latest.head_state.feedback_counts()[1], "totals stay exact"
    assert {p["latest_globally_aligned"] for p in moved["partitions"]} == {1}

    replayed = read_dataset(spark, job.store, latest.variables["ranks"], new_partitions)
    counts = dict(replayed.groupBy(F.spark_partition_id().alias("p")).count().collect())
    assert [counts.get(i, 0) for i in range(new_partitions)] == in_flight, \
        "each partition's head state counts exactly the records it replays"
    job.attempts.abort(plan, "test only looked at the plan")

    result = IterationRunner(rescaled, spark).run()
    assert result.restored_from == 1 and result.epochs_computed == [2, 3]
    manifest = result.final
    assert manifest.num_partitions == new_partitions
    assert len(manifest.variables["ranks"].partitions) == new_partitions, "the feedback log is repartitioned"
    ours = ranks_of(result.outputs["ranks"])
    assert ours.keys() == uninterrupted.keys()
    # Sums run in another order across partitions: equal up to floating-point rounding.
    assert max(abs(ours[n] - uninterrupted[n]) for n in ours) < 1e-15
