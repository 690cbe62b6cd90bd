"""Checkpoints that share unchanged partitions (docs/design.md, rules of the store): a partition
whose bytes are the same as in the checkpoint the epoch started from is referenced, not written
again; every ``full_checkpoint_every``-th epoch writes everything; retention keeps what a kept
checkpoint references; a restore through the store reads and verifies the shared files; a
report that names a file it may not share is refused."""

from __future__ import annotations

import dataclasses

import pytest
from pyspark.sql import functions as F

from include.contract import JobConfig
from include.epoch.job import IterationJob
from include.errors import CheckpointError
from spark_jobs.epoch import EpochExecutor
from spark_jobs.runner import IterationRunner

pytestmark = pytest.mark.spark

P = 4


def half_ticker(tmp_path, job_id: str, **settings) -> JobConfig:
    return JobConfig(job_id=job_id, body="tests.ticker:HalfTicker", input="unused",
                     checkpoint_root=str(tmp_path / "store"), tolerance=None, num_partitions=P,
                     **{"max_epochs": 8, "retain_last": 20, **settings})


def own_prefix(manifest) -> str:
    return f"jobs/{manifest.job_id}/attempts/{manifest.checkpoint_id:010d}/{manifest.attempt_id}/"


def expected_counts(spark, epochs: int) -> dict[int, int]:
    """The keys of partition 0 (the tail's rule) ticked once an epoch; the others never."""
    keys = spark.range(64).select(F.col("id").cast("int").alias("key"))
    rows = keys.select("key", (F.pmod(F.hash("key"), F.lit(P)) == 0).alias("ticks")).collect()
    return {r.key: epochs if r.ticks else 0 for r in rows}


@pytest.mark.parametrize("tail", ["spark", "driver"])
def test_unchanged_partitions_are_referenced_and_every_nth_checkpoint_is_full(spark, tmp_path, tail):
    cfg = half_ticker(tmp_path, f"half-{tail}", full_checkpoint_every=4)
    runner = IterationRunner(cfg, spark, driver_tail_bytes=-1 if tail == "spark" else None)
    result = runner.run()
    got = result.outputs["counts"].toPandas()
    assert dict(zip(got["key"], got["n"])) == expected_counts(spark, 8)

    job = IterationJob(cfg)
    manifests = [job.log.load(epoch, verify="full") for epoch in range(8)]
    for m in manifests:
        own = own_prefix(m)
        parts = m.variables["counts"].partitions
        assert all(len(files) == 1 for files in parts), parts
        written = [p for p, (f,) in enumerate(parts) if f.key.startswith(own)]
        if m.epoch % 4 == 0:  # epoch 0 (nothing to share) and every 4th: full
            assert written == list(range(P)), (m.epoch, parts)
            continue
        # partition 0 ticked and was written; the others are the previous checkpoint's files
        assert written == [0], (m.epoch, parts)
        previous = manifests[m.epoch - 1].variables["counts"].partitions
        assert parts[1:] == previous[1:]
        # and nothing else was written under the attempt for them
        stored = [o.key for o in job.store.list(own) if o.key.endswith(".parquet")]
        assert stored == [parts[0][0].key], stored
    # the determinism audit of an epoch that shares files recomputes the same bytes
    assert runner.verify_epoch(5).identical
    assert runner.verify_epoch(4).identical


def test_retention_keeps_shared_files_and_a_restore_reads_them_back(spark, tmp_path):
    """retain_last=1: the epochs whose files the latest checkpoint shares are retired, their
    shared files stay and nothing else of their attempts; a new runner (nothing kept in Spark)
    restores from them, verified, and goes on to the same result."""
    cfg = half_ticker(tmp_path, "half-gc", retain_last=1, full_checkpoint_every=1000)
    IterationRunner(cfg, spark).run(max_epochs_in_batch=5)
    job = IterationJob(cfg)
    assert job.log.checkpoint_ids() == [4]
    latest = job.log.load(4, verify="full")
    referenced = {f.key for f in latest.objects}
    epoch0 = {f.key for f in latest.variables["counts"].partitions[1]} | \
        {f.key for f in latest.variables["counts"].partitions[3]}
    assert all(key.startswith("jobs/half-gc/attempts/0000000000/") for key in epoch0), epoch0
    left = {o.key for o in job.store.list("jobs/half-gc/attempts/")}
    assert epoch0 <= left  # the shared files of retired epoch 0 are kept
    assert {k for k in left if k.split("/")[3] < "0000000004"} <= referenced, sorted(left - referenced)

    result = IterationRunner(cfg, spark).run()
    got = result.outputs["counts"].toPandas()
    assert dict(zip(got["key"], got["n"])) == expected_counts(spark, 8)
    final = IterationJob(cfg).log.latest(verify="full")
    assert final.kind == "final"


def test_a_report_naming_a_file_it_may_not_share_is_refused(spark, tmp_path):
    cfg = half_ticker(tmp_path, "half-forged", full_checkpoint_every=1000)
    job, executor = IterationJob(cfg), EpochExecutor(spark)
    try:
        for _ in range(2):
            plan = job.attempts.plan_epoch()
            executor.run(plan, job.store)
            job.committer.commit(plan)
        plan = job.attempts.plan_epoch()
        executor.run(plan, job.store)
    finally:
        executor.release()
    reports = job.attempts.reports(plan)
    # partition 2 claims epoch 0's file of partition 1: a file of the job, but not its partition's
    other = job.log.load(0).variables["counts"].partitions[1][0]
    forged = [dataclasses.replace(r, files=(other,)) if r.partition == 2 else r for r in reports]
    with pytest.raises(CheckpointError) as refused:
        job.committer.commit(plan, reports=forged)
    assert f"epoch 2 attempt {plan.attempt_id} of job half-forged is not committed" in str(refused.value)
    assert f"counts partition 2: {other.key}" in str(refused.value)
    assert job.log.latest_id() == 1 and job.log.is_aborted(2, plan.attempt_id)
    assert job.store.get(other.key)  # an abort deletes only the attempt's own files
