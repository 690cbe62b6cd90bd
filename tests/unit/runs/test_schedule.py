"""Scheduled jobs' batch records (include.runs.schedule), without Spark: which generation a DAG run
works on, where it starts from, and when it becomes the date's current one."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import HeadStatus
from include.errors import CheckpointError, ConfigError
from include.runs.schedule import Schedule, batch_date
from include.store import LocalStore
from tests.unit.checkpoints.test_checkpoint_log import write_attempt

D1, D2, D3 = "20260101T000000Z", "20260102T000000Z", "20260103T000000Z"


def finish(store, log_id: str) -> int:
    """Commit a one-epoch log ending in a terminated final checkpoint (what a finished batch leaves)."""
    log = CheckpointLog(store, log_id)
    m = write_attempt(log, 0, "a0", None)
    log.commit(m)
    final = dataclasses.replace(m, checkpoint_id=1, kind="final", parent_id=0, attempt_id="f1",
                                head_state=m.head_state.with_status(HeadStatus.TERMINATED))
    log.start_attempt(1, "f1", {})
    log.commit(final)
    return 1


@pytest.fixture
def sched(tmp_path):
    return Schedule(LocalStore(tmp_path), "daily")


def test_batch_date_keys():
    assert batch_date(dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)) == D2
    assert batch_date("2026-01-02T00:00:00+00:00") == D2
    assert batch_date(D2) == D2
    with pytest.raises(ConfigError, match="'yesterday'"):
        batch_date("yesterday")


def test_first_batch_cold_then_each_warm_from_the_previous(sched):
    g1 = sched.attach(D1, "run-1")
    assert (g1.job_id, g1.started_from) == ("daily.20260101T000000Z", None)
    assert sched.attach(D1, "run-1") == g1, "every task of a run finds the same generation"
    with pytest.raises(CheckpointError, match="has not finished"):
        sched.attach(D2, "run-2")  # D1 pending: D2 may not guess where to start
    with pytest.raises(CheckpointError, match="has not terminated"):
        sched.complete(g1)
    final = finish(sched.store, g1.job_id)
    sched.complete(g1)
    assert sched.date_record(D1) == {"date": D1, "current": g1.job_id, "pending": None}
    g2 = sched.attach(D2, "run-2")
    assert g2.started_from == {"job_id": g1.job_id, "checkpoint_id": final}
    assert sched.warm_start_manifest(g2).kind == "final"


def test_rerun_without_recompute_finds_the_same_generation(sched):
    g1 = sched.attach(D1, "run-1")
    assert sched.attach(D1, "continuation-1") == g1, "a continuation run continues the pending generation"
    finish(sched.store, g1.job_id)
    sched.complete(g1)
    assert sched.attach(D1, "backfill-again") == g1, "a done batch re-run changes nothing"
    assert sched.date_record(D1)["pending"] is None


def test_recompute_starts_a_new_generation_from_the_same_checkpoint(sched):
    g1 = sched.attach(D1, "r1")
    finish(sched.store, g1.job_id)
    sched.complete(g1)
    g2 = sched.attach(D2, "r2")
    finish(sched.store, g2.job_id)
    sched.complete(g2)
    g3 = sched.attach(D3, "r3")
    finish(sched.store, g3.job_id)
    sched.complete(g3)

    again = sched.attach(D2, "recompute-2", recompute=True)
    assert again.job_id == "daily.20260102T000000Z.r1" and again.recompute
    assert again.started_from == g2.started_from, "from the checkpoint the batch started from"
    assert sched.attach(D2, "recompute-2", recompute=True) == again, "a retried recompute run does not fork again"
    assert sched.date_record(D2) == {"date": D2, "current": g2.job_id, "pending": again.job_id}
    finish(sched.store, again.job_id)
    sched.complete(again)
    assert sched.date_record(D2) == {"date": D2, "current": again.job_id, "pending": None}
    assert sched.attach(D2, "recompute-3", recompute=True).job_id == "daily.20260102T000000Z.r2"


def test_an_older_generation_never_publishes_over_a_newer_one(sched):
    """A date recomputed (generation .r1) while its first run is cleared and finished afterwards:
    the older generation may not publish nor become current; the newest one may."""
    first = sched.attach(D1, "run-1")
    finish(sched.store, first.job_id)
    sched.complete(first)
    newer = sched.attach(D1, "run-2", recompute=True)
    assert newer.job_id == "daily.20260101T000000Z.r1"
    assert sched.generations_of(D1) == [first.job_id, newer.job_id]
    with pytest.raises(CheckpointError,
                       match="generation daily.20260101T000000Z of batch .* was superseded by daily.20260101T000000Z.r1"):
        sched.check_may_publish(first)
    with pytest.raises(CheckpointError, match="superseded"):
        sched.complete(first)
    sched.check_may_publish(newer)
    finish(sched.store, newer.job_id)
    sched.complete(newer)
    assert sched.date_record(D1)["current"] == newer.job_id
    assert sched.generations_of(D2) == []


def test_a_rewound_batch_is_a_new_generation_of_its_date(sched):
    """``rewind_to`` on a scheduled batch: a new generation of the date, recorded with where it
    rewinds from and where the batch started; every task of the run finds it, the older one can
    no longer publish, and nothing is recorded for a date that never ran or a run of another owner."""
    from include.runs.generations import Lineage, job_options
    from include.runs.ownership import JobOwner, OwnershipError, claim

    owner = JobOwner(dag_id="daily_dag", body="pagerank", input={"path": "in.csv"}, output_path=None)
    with pytest.raises(ConfigError, match="batch 20260101T000000Z of daily has not run: nothing to rewind"):
        sched.attach(D1, "run-0", rewind_to=1, owner=owner)
    g1 = sched.attach(D1, "run-1")
    claim(sched.store, g1.job_id, owner)
    finish(sched.store, g1.job_id)
    sched.complete(g1)
    other = dataclasses.replace(owner, dag_id="someone_else")
    with pytest.raises(OwnershipError, match="it cannot rewind the job"):
        sched.attach(D1, "run-x", rewind_to=1, owner=other)
    with pytest.raises(ConfigError, match="checkpoint 1 of job daily.20260101T000000Z is its final checkpoint"):
        sched.attach(D1, "run-x", rewind_to=2, owner=owner)
    assert sched.generations_of(D1) == [g1.job_id]

    g = sched.attach(D1, "run-2", rewind_to=1, owner=owner)
    assert g.job_id == f"{g1.job_id}.r1" and g.recompute and g.started_from == g1.started_from
    assert g.rewound_from == {"job_id": g1.job_id, "epoch": 1}
    assert sched.attach(D1, "run-2") == g, "every task of the run finds the same generation"
    assert sched.date_record(D1)["pending"] == g.job_id
    lineage = sched.lineage(D1)
    assert isinstance(lineage, Lineage) and lineage.family(g.job_id) == [g1.job_id]
    with pytest.raises(CheckpointError, match=f"superseded by {g.job_id}"):
        sched.check_may_publish(g1)
    with pytest.raises(CheckpointError, match=f"superseded by {g.job_id}"):
        job_options(lineage, g1.job_id)["may_publish"]()
