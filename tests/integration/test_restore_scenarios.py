"""The restore scenarios of the design (adapted from flink-ml's HeadOperatorTest) that
need no coordinator and no finish lifecycle. Each epoch is driven phase by phase, as the
Airflow tasks do, and a "crash" is a fresh IterationJob over the same store."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from include.checkpoints.head_state import HeadStatus
from include.epoch.job import IterationJob
from spark_jobs.epoch import EpochExecutor
from spark_jobs.runner import IterationRunner
from spark_jobs.storeio import read_dataset
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of, write_edges

pytestmark = pytest.mark.spark

MAX_EPOCHS = 4  # restores after epochs 0, 1 and 2 (three before the last), and after termination


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return write_edges(tmp_path_factory.mktemp("graph") / "edges.csv", graph_with_dangling(30, 0.12, seed=7))


@pytest.fixture(scope="module")
def reference(spark, edges, tmp_path_factory):
    """The uninterrupted run every scenario must end up equal to."""
    tmp = tmp_path_factory.mktemp("reference")
    result = IterationRunner(pagerank_config(tmp, edges, max_epochs=MAX_EPOCHS, tolerance=0.0), spark).run()
    return ranks_of(result.outputs["ranks"])


def config(tmp_path, edges, **kw):
    return pagerank_config(tmp_path, edges, max_epochs=MAX_EPOCHS, tolerance=0.0, **kw)


def run_epoch(job: IterationJob, executor: EpochExecutor):
    plan = job.attempts.plan_epoch()
    if not plan.adopted:
        executor.run(plan, job.store)
    return plan, job.committer.commit(plan)


def finish(spark, cfg):
    return IterationRunner(cfg, spark).run()


def test_restore_before_epoch0_finishes(spark, tmp_path, edges, reference):
    cfg = config(tmp_path, edges)
    crashed = IterationJob(cfg)
    crashed.attempts.plan_epoch()  # the attempt is recorded, then the process dies before its tail ran

    job = IterationJob(cfg)
    state = job.restorer.state()
    assert state.latest is None and state.status is HeadStatus.RUNNING and state.next_epoch == 0
    plan = job.attempts.plan_epoch()
    assert not plan.adopted and plan.restore is None, "nothing is replayed"
    head = plan.head_state["heads"]["ranks"]
    assert head["feedback_counts"] == {}
    assert {(p["latest_aligned"], p["latest_globally_aligned"]) for p in head["partitions"]} == {(-1, -1)}

    result = finish(spark, cfg)
    assert ranks_of(result.outputs["ranks"]) == pytest.approx(reference, abs=1e-15)


def test_restore_after_epoch0_finished_and_not_aligned(spark, tmp_path, edges, reference):
    """Every partition reported epoch 0, the process died before the global alignment: the
    restore re-reports epoch 0's alignment from the reports, without recomputing it."""
    cfg = config(tmp_path, edges)
    crashed = IterationJob(cfg)
    plan = crashed.attempts.plan_epoch()
    EpochExecutor(spark).run(plan, crashed.store)

    job = IterationJob(cfg)
    assert job.restorer.state().latest is None
    again = job.attempts.plan_epoch()
    assert again.adopted and again.attempt_id == plan.attempt_id
    reports = job.attempts.reports(again)
    assert {r.epoch for r in reports} == {0} and len(reports) == cfg.num_partitions
    decision = job.committer.align(again)
    assert decision.epoch == 0 and not decision.terminated

    result = IterationRunner(cfg, spark).run()
    assert result.epochs_adopted == [0] and result.epochs_computed == list(range(1, MAX_EPOCHS))
    assert ranks_of(result.outputs["ranks"]) == pytest.approx(reference, abs=1e-15)


def test_restore_after_epoch1_aligned(spark, tmp_path, edges, reference):
    cfg = config(tmp_path, edges)
    first = IterationRunner(cfg, spark).run(max_epochs_in_batch=2)
    assert first.checkpoint_id == 1 and first.status is HeadStatus.RUNNING

    state = IterationJob(cfg).restorer.state(verify="full")
    hs = state.latest.head_state
    nodes = len(reference)
    assert hs.status is HeadStatus.RUNNING
    assert hs.feedback_counts() == {0: nodes, 1: nodes}
    head = hs.heads["ranks"]
    assert head.latest_aligned == 1 and head.latest_globally_aligned == 1
    assert sum(p.in_flight for p in head.partitions) == nodes
    assert state.next_epoch == 2

    result = IterationRunner(cfg, spark).run()
    assert result.restored_from == 1 and result.epochs_computed == list(range(2, MAX_EPOCHS))
    assert ranks_of(result.outputs["ranks"]) == pytest.approx(reference, abs=1e-15)


def test_feedback_records_in_flight_then_a_checkpoint_just_before_termination(spark, tmp_path, edges, reference):
    """Two scenarios of one run, whose batch ends with checkpoint MAX_EPOCHS - 2, the one before
    the terminating epoch: the feedback records in flight at it are replayed once, in order, by
    partition; restored, the job runs exactly the last epoch and terminates."""
    cfg = config(tmp_path, edges)
    IterationRunner(cfg, spark).run(max_epochs_in_batch=MAX_EPOCHS - 1)
    job = IterationJob(cfg)
    state = job.restorer.state()
    assert state.status is HeadStatus.RUNNING and state.latest.epoch == MAX_EPOCHS - 2
    assert not state.latest.decision.terminated
    latest = state.latest
    ds = latest.variables["ranks"]

    written = []
    for part in ds.partitions:
        for f in part:
            written += pq.read_table(job.store.local_path(f.key)).to_pylist()
    replayed = read_dataset(spark, job.store, ds, cfg.num_partitions)
    rows = [r.asDict() for r in replayed.collect()]
    assert rows == written, "every in-flight record exactly once, in log order"

    per_partition = dict(replayed.groupBy(F.spark_partition_id().alias("p")).count().collect())
    in_flight = [p.in_flight for p in latest.head_state.heads["ranks"].partitions]
    assert [per_partition.get(i, 0) for i in range(cfg.num_partitions)] == in_flight

    result = IterationRunner(cfg, spark).run()
    assert result.epochs_computed == [MAX_EPOCHS - 1]
    assert result.decisions[-1].terminated and result.status is HeadStatus.TERMINATED
    assert ranks_of(result.outputs["ranks"]) == pytest.approx(reference, abs=1e-15)


def test_checkpoint_after_termination_started(spark, tmp_path, edges, reference):
    cfg = config(tmp_path, edges)
    job, executor = IterationJob(cfg), EpochExecutor(spark)
    for _ in range(MAX_EPOCHS):
        plan, manifest = run_epoch(job, executor)
    assert manifest.decision.terminated
    # The process dies after committing the terminating epoch, before the finish step.
    state = IterationJob(cfg).restorer.state()
    assert state.status is HeadStatus.TERMINATING

    result = IterationRunner(cfg, spark).run()
    assert result.epochs_computed == [] and result.epochs_adopted == [], "no epoch runs again"
    assert result.status is HeadStatus.TERMINATED
    assert result.final.kind == "final" and result.final.parent_id == MAX_EPOCHS - 1
    assert ranks_of(result.outputs["ranks"]) == pytest.approx(reference, abs=1e-15)


def test_aborted_checkpoint_leaves_no_trace(spark, tmp_path, edges, reference):
    cfg = config(tmp_path, edges)
    job, executor = IterationJob(cfg), EpochExecutor(spark)
    run_epoch(job, executor)
    plan = job.attempts.plan_epoch()
    executor.run(plan, job.store)
    assert job.attempts.abort(plan, "test abort")
    assert job.store.list(job.log.layout.attempt(plan.epoch, plan.attempt_id) + "/") == []
    assert job.restorer.state().latest.checkpoint_id == 0

    again = job.attempts.plan_epoch()
    assert not again.adopted and again.attempt_id != plan.attempt_id
    result = IterationRunner(cfg, spark).run()
    assert result.epochs_computed == list(range(1, MAX_EPOCHS)), "an incomplete attempt is never adopted"
    committed = job.log.load(1, verify="none").attempt_id if 1 in job.log.checkpoint_ids() else None
    leftovers = {a for a in job.log.attempt_ids(1) if a != committed}
    assert leftovers == set(), "aborted and abandoned attempts of epoch 1 are garbage collected"
    assert ranks_of(result.outputs["ranks"]) == pytest.approx(reference, abs=1e-15)
