"""The phases of an IterationJob (include.epoch.job) are objects of their own: each can be built
and driven alone, from what it is given, over a local store and without Spark (the fake tail of
tests.unit.runs.test_boundary stands for an attempt's Spark job)."""

from __future__ import annotations

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import HeadStatus
from include.checkpoints.lifecycle import StopMode
from include.checkpoints.manifest import JobState
from include.epoch import Attempts, Committer, DataCheckFailed, IterationJob, Restorer, Stopping
from include.store import LocalStore
from tests.unit.runs.test_boundary import config, fake_tail


def test_stop_requests_need_only_a_checkpoint_log(tmp_path):
    """Stopping is built from a checkpoint log alone: a request is kept in the log, honoured
    only once the job has a checkpoint, and consumed by a suspend."""
    log = CheckpointLog(LocalStore(tmp_path / "store"), "alone")
    stopping = Stopping(log)
    fresh = JobState(None, HeadStatus.RUNNING, 0)
    stopping.request_stop("suspend", requested_by="test")
    assert log.control.stop_request() is StopMode.SUSPEND
    assert stopping.stop_requested(fresh) is None  # no checkpoint yet: epoch 0 runs first
    assert stopping.suspend(fresh) is None and log.control.stop_request() is None
    assert stopping.suspended_at(fresh) is None


def test_a_committer_of_its_own_checks_the_attempts_another_one_planned(tmp_path):
    """A Committer built apart, over the job's attempts and coordinators, with checks of its own:
    it refuses what the job's own committer would commit, and the attempt it refused is aborted
    for every part of the job (the planner does not adopt it again)."""
    job = IterationJob(config(tmp_path))

    def refuse(plan, decision, reports):
        raise DataCheckFailed(f"epoch {plan.epoch}: refused by a committer of its own (test)")

    strict = Committer(job, job.attempts, job.coordination, checks=(refuse,))
    plan = job.attempts.plan_epoch()
    fake_tail(job, plan)
    with pytest.raises(DataCheckFailed, match="refused by a committer of its own"):
        strict.commit(plan)
    assert job.log.is_aborted(plan.checkpoint_id, plan.attempt_id)
    again = job.attempts.plan_epoch()
    assert again.attempt_id != plan.attempt_id and not again.adopted
    fake_tail(job, again)
    assert job.committer.commit(again).checkpoint_id == 0
    assert strict.last_check_report is None  # the data checks are off in this job: only the Python check ran


def test_the_outputs_an_attempt_owes_are_named_before_its_tail_writes_them(tmp_path):
    """Attempts names the outputs a plan writes and the partitions it has not staged yet: the
    committer refuses an epoch on them, the planner adopts only an attempt that owes none."""
    job = IterationJob(config(tmp_path))
    plan = job.attempts.plan_epoch()
    assert Attempts.output_names(plan) == ["history"]
    assert job.attempts.missing_outputs(plan) == ["history/0", "history/1"]
    assert job.attempts.unfinished_attempts(plan.checkpoint_id) == [plan]
    fake_tail(job, plan)
    assert job.attempts.missing_outputs(plan) == []
    complete, unfinished = job.attempts.live_attempts(plan.checkpoint_id)
    assert [p.attempt_id for p in complete] == [plan.attempt_id] and unfinished == []


def test_a_restorer_of_another_process_sees_what_this_one_committed(tmp_path):
    """A Restorer over a second job object (another process's view of the same store) restores
    the checkpoint the first one committed, with the state the next epoch starts from."""
    cfg = config(tmp_path)
    job = IterationJob(cfg)
    plan = job.attempts.plan_epoch()
    fake_tail(job, plan)
    job.committer.commit(plan)
    other = IterationJob(cfg)
    state = Restorer(other, other.coordination).state()
    assert (state.latest.checkpoint_id, state.status, state.next_epoch) == (0, HeadStatus.RUNNING, 1)
    assert other.attempts.plan_epoch(state=state).epoch == 1
