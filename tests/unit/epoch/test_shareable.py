"""EpochPlan.shareable: the one rule of which earlier files an attempt's report may name
(docs/how-it-works.md#shared-files), read by the tail and by the commit."""

from __future__ import annotations

import dataclasses

import pytest

from include.checkpoints import FileRef
from include.checkpoints.manifest import DatasetRef
from include.contract import JobConfig
from include.epoch import EpochPlan
from include.errors import ConfigError


def ref(key: str, n: int = 0) -> FileRef:
    return FileRef(key, 10 + n, f"{n:064x}", 1)


OWN = "jobs/j/attempts/0000000003/a3-x/ranks"


def plan(**changes) -> EpochPlan:
    ranks = DatasetRef("{}", ((ref(f"{OWN}/part-00000-1.parquet", 0),), (ref(f"{OWN}/part-00001-1.parquet", 1),),
                              (), (ref(f"{OWN}/part-00003-1.parquet", 3), ref(f"{OWN}/part-00003-2.parquet", 4))))
    base = EpochPlan(job_id="j", kind="epoch", checkpoint_id=4, attempt_id="a4-y", batch_id=None, parent_id=3,
                     body={"name": "pagerank", "heads": {"ranks": ["node"]}}, input={"path": "/in.csv"},
                     num_partitions=4, store={}, restore={"ranks": ranks.to_dict()}, head_state={},
                     max_epochs=None, tolerance=None, share_unchanged=True)
    return dataclasses.replace(base, **changes)


def test_each_partition_with_one_file_of_the_jobs_own_attempts_is_shareable():
    assert plan().shareable() == {"ranks": {0: ref(f"{OWN}/part-00000-1.parquet", 0),
                                            1: ref(f"{OWN}/part-00001-1.parquet", 1)}}


@pytest.mark.parametrize("change", [
    {"share_unchanged": False},   # a full checkpoint
    {"kind": "final"},            # the finish writes outputs only
    {"num_partitions": 8},        # partitions that are not the same partitions any more
    {"job_id": "other"},          # another job's files (a warm start's source)
])
def test_nothing_is_shareable(change):
    assert plan(**change).shareable() == {}


def test_a_key_that_climbs_out_of_the_job_is_never_shareable():
    climbing = DatasetRef("{}", ((ref("jobs/j/attempts/../../k/attempts/1/a/x.parquet"),),) + ((),) * 3)
    assert plan(restore={"ranks": climbing.to_dict()}).shareable() == {}


def test_full_checkpoint_every_is_checked():
    cfg = dict(job_id="j", body="pagerank", input="/in.csv", checkpoint_root="/tmp/store")
    assert JobConfig(**cfg).full_checkpoint_every == 10
    with pytest.raises(ConfigError, match="full_checkpoint_every"):
        JobConfig(**cfg, full_checkpoint_every=0)
