"""The warm-session handoff: an epoch starts from the variables the previous attempt of the same
executor kept in Spark, only when the plan restores exactly the checkpoint that attempt wrote;
the state is the same bits as when it is read back from the store."""

from __future__ import annotations

import logging

import pytest

from include.epoch.job import IterationJob
from include.process import failpoints
from spark_jobs.epoch import EpochExecutor
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of, write_edges

pytestmark = pytest.mark.spark

KEPT = "kept in Spark from the attempt that wrote them"
READ = "read from the checkpoint"


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return write_edges(tmp_path_factory.mktemp("graph") / "edges.csv", graph_with_dangling(40, 0.1, seed=3))


def variables_lines(caplog, job_id):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"job {job_id} ")
            and ": variables " in r.getMessage() and "were lost" not in r.getMessage()]


def persistent_rdds(spark) -> set[int]:
    """Ids of the RDDs persisted now (a set: other tests' RDDs may be cleaned up meanwhile)."""
    return {int(i) for i in spark.sparkContext._jsc.getPersistentRDDs().keySet()}


def test_handoff_gives_the_same_checkpoints_bit_for_bit(spark, tmp_path, edges, caplog):
    """With and without the handoff, and with the small ranks written by the driver (the
    default for a variable this small, from epoch 1) or by Spark's tail: the same bytes."""
    caplog.set_level(logging.INFO, logger="iterations")
    before = persistent_rdds(spark)
    runs = {}
    for handoff, tail in ((False, "driver"), (True, "driver"), (True, "spark")):
        cfg = pagerank_config(tmp_path / f"{handoff}-{tail}", edges, job_id=f"pr-{handoff}-{tail}", max_epochs=5,
                              tolerance=0.0, retain_last=10)
        runner = IterationRunner(cfg, spark, handoff=handoff, driver_tail_bytes=-1 if tail == "spark" else None)
        runs[handoff, tail] = (runner.run(), IterationJob(cfg))
    for job_id in ("pr-True-driver", "pr-True-spark"):
        assert variables_lines(caplog, job_id) == [f"job {job_id} epoch {e}: variables {KEPT}" for e in range(1, 5)] \
            + [f"job {job_id} final 5: variables {KEPT}"]
    assert variables_lines(caplog, "pr-False-driver") == [], "without the handoff nothing is kept (nor logged)"
    # every checkpoint holds the same files' bytes (SHA-256 per object), epoch by epoch
    for epoch in range(5):
        digests = [[f.sha256 for f in job.log.load(epoch).variables["ranks"].files] for _run, job in runs.values()]
        assert digests[0] == digests[1] == digests[2], f"epoch {epoch}"
    outputs = [ranks_of(run.outputs["ranks"]) for run, _job in runs.values()]
    assert outputs[0] == outputs[1] == outputs[2]
    assert persistent_rdds(spark) - before == set(), "the kept variables are freed when the job finishes"


def test_only_the_checkpoint_the_executor_wrote_is_taken_from_memory(spark, tmp_path, edges, caplog):
    caplog.set_level(logging.INFO, logger="iterations")
    cfg = pagerank_config(tmp_path, edges, job_id="pr-only", max_epochs=10, tolerance=0.0)
    job, x, y = IterationJob(cfg), EpochExecutor(spark, handoff=True), EpochExecutor(spark, handoff=True)

    def epoch(executor, commit=True):
        plan = job.attempts.plan_epoch()
        executor.run(plan, job.store)
        if commit:
            job.committer.commit(plan)
        else:
            job.attempts.abort(plan, "test: not committed")

    epoch(x)  # checkpoint 0, written by x
    epoch(y)  # y kept nothing: reads checkpoint 0 back
    epoch(x)  # x's kept variables are checkpoint 0's, not checkpoint 1's (y wrote it)
    epoch(x)  # checkpoint 2 was x's: from memory
    epoch(x, commit=False)  # x now keeps an attempt that never commits ...
    epoch(x)  # ... so checkpoint 3 is read back
    assert variables_lines(caplog, "pr-only") == [
        f"job pr-only epoch 1: variables {READ}", f"job pr-only epoch 2: variables {READ}",
        f"job pr-only epoch 3: variables {KEPT}", f"job pr-only epoch 4: variables {KEPT}",
        f"job pr-only epoch 4: variables {READ}"]
    x.release(), y.release()


@pytest.mark.parametrize("tail", ["spark", "driver"])
def test_a_failed_attempt_keeps_nothing(spark, tmp_path, edges, caplog, tail):
    """Kept in Spark (blocks of a local checkpoint, freed) or on the driver (a local frame)."""
    caplog.set_level(logging.INFO, logger="iterations")
    before = persistent_rdds(spark)
    cfg = pagerank_config(tmp_path, edges, job_id="pr-fail", max_epochs=10, tolerance=0.0)
    job = IterationJob(cfg)
    executor = EpochExecutor(spark, handoff=True, driver_tail_bytes=-1 if tail == "spark" else None)
    for _ in range(2):
        plan = job.attempts.plan_epoch()
        executor.run(plan, job.store)
        job.committer.commit(plan)
    kept = persistent_rdds(spark) - before  # the input's cached frames and epoch 1's kept variables
    failpoints.configure("epoch.before_write@epoch=2=raise")
    try:
        plan = job.attempts.plan_epoch()
        with pytest.raises(failpoints.FailpointError):
            executor.run(plan, job.store)
        job.attempts.abort(plan, "test: failed")
    finally:
        failpoints.configure("")
    left = persistent_rdds(spark) - before
    assert "pr-fail" not in executor._kept, "the variables kept from epoch 1 are forgotten after the failure"
    if tail == "spark":
        assert left < kept and len(left) == len(kept) - 1, "the variables kept from epoch 1 are freed after the failure"
    else:
        assert left == kept, "a local frame holds no blocks in Spark"
    plan = job.attempts.plan_epoch()
    executor.run(plan, job.store)  # the retry starts from the store
    job.committer.commit(plan)
    assert variables_lines(caplog, "pr-fail")[-3:] == [
        f"job pr-fail epoch 1: variables {KEPT}",
        f"job pr-fail epoch 2: variables {KEPT}", f"job pr-fail epoch 2: variables {READ}"]
    executor.release()
    assert persistent_rdds(spark) - before == set()


def test_kept_variables_lost_with_an_executor_are_read_back_in_the_same_attempt(spark, tmp_path, edges, caplog):
    """An executor that held kept variables is gone (its blocks with it; Spark cannot recompute
    a local checkpoint): the epoch runs again from the checkpoint in the same attempt, which
    commits the same bytes as a run that never kept anything."""
    from spark_jobs.storeio import release_kept

    caplog.set_level(logging.INFO, logger="iterations")
    cfg = pagerank_config(tmp_path / "lost", edges, job_id="pr-lost", max_epochs=10, tolerance=0.0,
                          retain_last=10)
    # blocks in Spark to lose: the tail runs in Spark, however small the ranks
    job, executor = IterationJob(cfg), EpochExecutor(spark, handoff=True, driver_tail_bytes=-1)
    for epoch in range(4):
        plan = job.attempts.plan_epoch()
        if epoch == 2:  # the blocks of epoch 1's kept ranks disappear, the executor's record of them stays
            (_keys, _schema, (_records, checkpointed)), = executor._kept["pr-lost"].values()
            release_kept(checkpointed)
        reports = executor.run(plan, job.store)
        assert job.committer.commit(plan).attempt_id == plan.attempt_id, f"epoch {epoch}"
        assert sorted(r.partition for r in reports) == list(range(cfg.num_partitions))
    executor.release()
    lines = variables_lines(caplog, "pr-lost")
    assert lines == [f"job pr-lost epoch 1: variables {KEPT}", f"job pr-lost epoch 2: variables {KEPT}",
                         f"job pr-lost epoch 2: variables {READ}", f"job pr-lost epoch 3: variables {KEPT}"]
    lost = [r.getMessage() for r in caplog.records if "were lost with an executor" in r.getMessage()]
    assert len(lost) == 1 and "epoch 2" in lost[0] and "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND" in lost[0] \
        and "checkpoint 1" in lost[0], lost

    reference = pagerank_config(tmp_path / "ref", edges, job_id="pr-ref", max_epochs=4, tolerance=0.0,
                                retain_last=10)
    IterationRunner(reference, spark, handoff=False).run()
    ref = IterationJob(reference)
    for epoch in range(4):
        assert [f.sha256 for f in job.log.load(epoch).variables["ranks"].files] == \
            [f.sha256 for f in ref.log.load(epoch).variables["ranks"].files], f"epoch {epoch}"


def test_other_failures_of_an_epoch_on_kept_variables_are_not_retried(spark, tmp_path, edges, caplog):
    caplog.set_level(logging.INFO, logger="iterations")
    cfg = pagerank_config(tmp_path, edges, job_id="pr-other", max_epochs=10, tolerance=0.0)
    job, executor = IterationJob(cfg), EpochExecutor(spark, handoff=True)
    for _ in range(2):
        plan = job.attempts.plan_epoch()
        executor.run(plan, job.store)
        job.committer.commit(plan)
    failpoints.configure("epoch.before_write@epoch=2=raise")
    try:
        with pytest.raises(failpoints.FailpointError):
            executor.run(job.attempts.plan_epoch(), job.store)
    finally:
        failpoints.configure("")
        executor.release()
    assert variables_lines(caplog, "pr-other")[-1] == f"job pr-other epoch 2: variables {KEPT}", "not run again"
    assert not [r for r in caplog.records if "were lost with an executor" in r.getMessage()]
