"""Cancelling the attempt a run is running (what a task's on_kill does, in the core): its Spark
work interrupted, the attempt aborted, and the next run resumes exactly."""

from __future__ import annotations

import threading

import pytest

from include.runs.epoch_run import EpochRun
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of, write_edges

pytestmark = pytest.mark.spark


def test_a_cancelled_attempt_is_interrupted_and_aborted_and_the_next_run_resumes(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(20, 0.15, seed=3))
    cfg = pagerank_config(tmp_path, edges, max_epochs=2, tolerance=0.0, num_partitions=2)
    runner = IterationRunner(cfg, spark)
    started, interrupted = threading.Event(), threading.Event()
    seen: list[str] = []

    def execute(plan):  # a Spark job that runs until it is interrupted
        started.set()
        assert interrupted.wait(60), "never interrupted"
        raise RuntimeError("[OPERATION_CANCELED] the Spark job was interrupted")

    def interrupt(plan):
        seen.append(plan.attempt_id)
        interrupted.set()

    run = EpochRun(runner.job, execute, "batch-1", interrupt=interrupt)
    run.start(runner.holder)
    cancelled = []
    try:
        assert run.cancel("nothing runs yet") is None
        run.boundary()
        plan = run.plan()
        canceller = threading.Thread(target=lambda: started.wait(60) and cancelled.append(run.cancel("a test")))
        canceller.start()
        with pytest.raises(RuntimeError, match="OPERATION_CANCELED"):
            run.run(plan)
        canceller.join(60)
    finally:
        run.end()
    assert cancelled == [plan] and seen == [plan.attempt_id], "cancel interrupted the running attempt once"
    assert runner.job.log.abort_reason(plan.epoch, plan.attempt_id) == "cancelled: a test"
    assert run.running is None and run.cancel("again") is None

    resumed = IterationRunner(cfg, spark).run()
    assert resumed.epochs_computed == [0, 1]
    reference = IterationRunner(pagerank_config(tmp_path, edges, job_id="ref", checkpoint_root=str(tmp_path / "ref"),
                                                max_epochs=2, tolerance=0.0, num_partitions=2), spark).run()
    assert ranks_of(resumed.outputs["ranks"]) == ranks_of(reference.outputs["ranks"])
