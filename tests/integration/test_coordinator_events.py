"""Coordinator events exactly once (ports of CoordinatorEventsExactlyOnceITCase and of the
stream-operator-recipient variants), on Spark through the library runner.

The job (tests/coordinator_events.py): two coordinators send 0..n-1 from their own threads at different speeds, one
to partition 0, one
to partition 1, with different snapshot delays. The receiving body appends every event of its
inbox to its variable (the receiving side's state). Failures are injected at seeded random
points: inside an epoch, between a coordinator snapshot and the commit, inside the commit (the
manifest written, the process dies), after the commit before the next epoch, a checkpoint
refused on the receiving side, and one partition's attempt failing while the coordinators go
on. After each failure a new runner resumes. The state must end with exactly 0..n-1, in order,
for each coordinator.
"""

from __future__ import annotations

import random

import pytest

from include.checkpoints.head_state import HeadStatus
from include.contract.config import JobConfig
from include.epoch.job import DEFAULT_CHECKS, DataCheckFailed
from include.process import failpoints
from include.process.failpoints import FailpointError
from spark_jobs.runner import IterationRunner
from tests.coordinator_events import N_FAST, N_SLOW, EventSendingCoordinator, coordinators
from tests.coordinator_events import received_sequences as sequences_of

pytestmark = pytest.mark.spark

RECEIVER = "tests.coordinator_events:Receiver"


def received_sequences(runner) -> dict[str, list[int]]:
    return sequences_of(runner.read_variables()["received"].collect())


class RefuseOnce:
    """A check that refuses checkpoint ``epoch`` once: the checkpoint fails on the receiving side."""

    def __init__(self, epoch):
        self.epoch, self.done = epoch, False

    def __call__(self, plan, decision, reports):
        if plan.epoch == self.epoch and not self.done:
            self.done = True
            raise DataCheckFailed(f"receiving side refuses checkpoint {plan.epoch} (test)")


POINTS = ["coordinator.triggered", "commit.before_write", "commit.after_write", "commit.after_release",
          "epoch", "check"]


def run_with_failures(spark, tmp_path, seed, *, attempt_retries=0, params=None):
    """Run until terminated, injecting the seeded failures one at a time (a failure ends the
    runner as a crash would; the next runner resumes)."""
    rng = random.Random(seed)
    failures = [(rng.choice(POINTS), e) for e in sorted(rng.sample(range(1, 5), 3))]
    cfg = JobConfig(job_id="events", body=RECEIVER, input="unused",
                    checkpoint_root=str(tmp_path / "store"), max_epochs=60, tolerance=0.5, num_partitions=2,
                    retain_last=2, body_params=params or {})
    fired = []
    for _run in range(20):
        point, epoch = next(((p, e) for p, e in failures if (p, e) not in fired), (None, None))
        checks = DEFAULT_CHECKS + ((RefuseOnce(epoch),) if point == "check" else ())
        failpoints.configure("" if point in (None, "check") else
                             f"{'epoch.before_write' if point == 'epoch' else point}@epoch={epoch}=raise")
        coords = coordinators()
        runner = IterationRunner(cfg, spark, checks=checks, coordinators=coords, attempt_retries=attempt_retries)
        try:
            result = runner.run()
        except (FailpointError, DataCheckFailed):
            fired.append((point, epoch))
            continue
        finally:
            failpoints.configure("")
            for c in coords.values():
                c.close()
        if result.status is HeadStatus.TERMINATED:
            return runner, result, fired
    raise AssertionError(f"no termination after 20 runs; failures {failures}, fired {fired}")


@pytest.mark.parametrize("seed", [1, 2])
def test_events_exactly_once_in_order_across_failures(spark, tmp_path, seed):
    """Also the fault sweep's coordinator-events scenario (tests/faults/sweep.py: the same run,
    which CI runs here), and the alignment decisions: epoch k >= 1 receives, in every partition,
    exactly one decision, the one on epoch k-1, through the valve across the same failures; each
    checkpoint's alignment coordinator snapshot has aligned up to the epoch before it."""
    from include.epoch.job import IterationJob

    runner, result, fired = run_with_failures(spark, tmp_path, seed)
    assert len(fired) == 3, f"every injected failure happened: {fired}"
    rows = runner.read_variables()["received"].collect()
    assert len({r["epoch"] for r in rows if r["coordinator"] == "fast"}) >= 3, "events spread over epochs"
    got = received_sequences(runner)
    assert got["fast"] == list(range(N_FAST)), f"failures {fired}"
    assert got["slow"] == list(range(N_SLOW)), f"failures {fired}"

    aligned = sorted((r["epoch"], r["partition"], r["value"]) for r in rows if r["coordinator"] == "alignment")
    last = result.final.epoch
    assert aligned == [(k, p, k - 1) for k in range(1, last + 1) for p in (0, 1)]
    job = IterationJob(runner.config)
    for cid in job.log.checkpoint_ids():
        m = job.log.load(cid, verify="none")
        if m.kind == "epoch":
            assert m.coordinators["alignment"]["state"]["latest_aligned"] == m.epoch - 1


def test_one_partition_failing_leaves_the_coordinators_running(spark, tmp_path):
    """Partition 1's task fails in epoch 2 (once); the runner retries the epoch in the same
    process: the coordinators are told and not reset, held events for partition 1 are dropped
    and sent again, and the state still ends with exactly 0..n-1."""
    flag = tmp_path / "poison"
    flag.write_text("1")
    EventSendingCoordinator.failed_partitions = []
    cfg = JobConfig(job_id="events", body=RECEIVER, input="unused",
                    checkpoint_root=str(tmp_path / "store"), max_epochs=60, tolerance=0.5, num_partitions=2,
                    body_params={"poison": str(flag), "poison_epoch": 2})
    coords = coordinators()
    resets = []
    for c in coords.values():
        original = c.reset_to
        c.reset_to = lambda state, original=original: (resets.append(state), original(state))[1]
    runner = IterationRunner(cfg, spark, coordinators=coords, attempt_retries=2)
    try:
        result = runner.run()
    finally:
        for c in coords.values():
            c.close()
    assert result.status is HeadStatus.TERMINATED
    assert not flag.exists(), "partition 1's task failed once"
    failed = EventSendingCoordinator.failed_partitions
    assert failed and {e for e, _p in failed} == {2}, "the coordinators learned which partitions failed in epoch 2"
    assert resets == [None, None], "reset only when created: a partition's failure resets nothing"
    got = received_sequences(runner)
    assert got == {"fast": list(range(N_FAST)), "slow": list(range(N_SLOW))}
