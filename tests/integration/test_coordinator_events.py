"""Coordinator events exactly once (ports of CoordinatorEventsExactlyOnceITCase and of the
stream-operator-recipient variants), on Spark through the library runner.

Two coordinators send 0..n-1 from their own threads at different speeds, one to partition 0, one
to partition 1, with different snapshot delays. The receiving body appends every event of its
inbox to its variable (the receiving side's state). Failures are injected at seeded random
points: inside an epoch, between a coordinator snapshot and the commit, inside the commit (the
manifest written, the process dies), after the commit before the next epoch, a checkpoint
refused on the receiving side, and one partition's attempt failing while the coordinators go
on. After each failure a new runner resumes. The state must end with exactly 0..n-1, in order,
for each coordinator.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from include import failpoints
from include.body import EpochContext, IterationBody, StepResult
from include.config import JobConfig
from include.coordinator import Coordinator
from include.failpoints import FailpointError
from include.head import HeadStatus
from spark_jobs.runner import IterationRunner
from include.runtime import DEFAULT_CHECKS, DataCheckFailed

pytestmark = pytest.mark.spark

N_FAST, N_SLOW = 40, 6


class EventSendingCoordinator(Coordinator):
    """Sends 0..n-1 to one partition from its own thread: each time an epoch is planned it may
    send ``per_epoch`` more (every ``every`` epochs), a few milliseconds apart, so most of its
    events are sent while an epoch runs and the valve is shut."""

    failed_partitions: list = []

    def __init__(self, n: int, per_epoch: int, partition: int, every: int = 1, snapshot_delay: float = 0.0):
        self.n, self.per_epoch, self.every, self.partition = n, per_epoch, every, partition
        self.snapshot_delay = snapshot_delay
        self.next = 0
        self.budget = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    def start(self, ctx):
        self.close()
        self._stop, self._wake = threading.Event(), threading.Event()
        self.budget = 0
        self._thread = threading.Thread(target=self._run, args=(ctx, self._stop, self._wake), daemon=True)
        self._thread.start()

    def on_epoch_start(self, epoch, ctx):
        if epoch % self.every == 0:
            with ctx.lock:
                self.budget += self.per_epoch
            self._wake.set()

    def _run(self, ctx, stop, wake):
        rng = random.Random(self.partition)
        while not stop.is_set():
            if not wake.wait(0.05):
                continue
            wake.clear()
            time.sleep(rng.uniform(0, 0.03))
            while not stop.is_set():
                with ctx.lock:  # state change and send together, atomic w.r.t. the snapshot
                    if self.budget <= 0 or self.next >= self.n:
                        break
                    ctx.send(self.partition, self.next)
                    self.next += 1
                    self.budget -= 1
                time.sleep(0.005)

    def partition_failed(self, epoch, partition, dropped, ctx):
        type(self).failed_partitions.append((epoch, partition))
        with ctx.lock:
            if dropped:  # the held events for it are gone: send them again
                self.budget += self.next - min(e.payload for e in dropped)
                self.next = min(e.payload for e in dropped)
        self._wake.set()

    def snapshot(self):
        time.sleep(self.snapshot_delay)
        return {"next": self.next}

    def reset_to(self, state):
        self.next = 0 if state is None else state["next"]

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class Receiver(IterationBody):
    """Appends every event of its inbox to its state (the alignment decisions too); done when
    all N_FAST + N_SLOW numbers are in. Starts from one sentinel row (so epoch 0 is never empty)."""

    name = "receiver"
    heads = {"received": ("partition",)}
    metric_aggregations = {"remaining": "sum"}
    convergence_metric = "remaining"
    static_input = False  # everything it receives comes from the coordinators

    def parse_params(self, raw):
        return dict(raw)

    def load(self, raw, params):
        return {}

    def init(self, data, ctx):
        return {"received": ctx.spark.createDataFrame([(0, "init", -1, 0, -1)], _SCHEMA)}

    def step(self, variables, data, ctx: EpochContext):
        from pyspark.sql import functions as F

        rows = []
        for name, events in sorted(ctx.events.items()):
            for i, e in enumerate(events):
                value = e["payload"]["epoch"] if name == "alignment" else e["payload"]
                rows.append((int(e["partition"]), name, ctx.epoch, i, int(value)))
        received = variables["received"].unionByName(ctx.spark.createDataFrame(rows, _SCHEMA))
        flag = ctx.params.get("poison")
        if flag and ctx.epoch == ctx.params.get("poison_epoch") and os.path.exists(flag):
            poison = F.udf(lambda p: _fail_once(flag, p), "int")
            received = received.withColumn("partition", poison("partition"))
        numbers = F.sum(F.when(F.col("coordinator").isin("fast", "slow"), 1).otherwise(0)).over(_all())
        remaining = (F.lit(N_FAST + N_SLOW) - numbers) / F.count(F.lit(1)).over(_all())
        return StepResult({"received": received.withColumn("remaining", remaining)},
                          metrics={"remaining": ("received", "remaining")})

    def finish(self, variables, data, ctx):
        return {}


def _all():
    from pyspark.sql import Window

    return Window.partitionBy()


def _fail_once(flag, p):
    """The task holding partition 1's records fails, once (it removes the flag as it fails)."""
    if p != 1:
        return p
    try:
        os.remove(flag)
    except FileNotFoundError:
        return p
    raise RuntimeError("partition 1 poisoned")


_SCHEMA = "partition int, coordinator string, epoch int, idx int, value long"


def coordinators():
    return {"fast": EventSendingCoordinator(N_FAST, per_epoch=5, partition=0),
            "slow": EventSendingCoordinator(N_SLOW, per_epoch=1, every=2, partition=1, snapshot_delay=0.05)}


def received_sequences(runner) -> dict[str, list[int]]:
    rows = runner.read_variables()["received"].collect()
    out = {}
    for name, partition in (("fast", 0), ("slow", 1)):
        mine = sorted((r["epoch"], r["idx"], r["value"]) for r in rows
                      if r["coordinator"] == name and r["partition"] == partition)
        out[name] = [v for _e, _i, v in mine]
    return out


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
    cfg = JobConfig(job_id="events", body="tests.integration.test_coordinator_events:Receiver", input="unused",
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
    runner, result, fired = run_with_failures(spark, tmp_path, seed)
    assert len(fired) == 3, f"every injected failure happened: {fired}"
    rows = runner.read_variables()["received"].collect()
    assert len({r["epoch"] for r in rows if r["coordinator"] == "fast"}) >= 3, "events spread over epochs"
    got = received_sequences(runner)
    assert got["fast"] == list(range(N_FAST)), f"failures {fired}"
    assert got["slow"] == list(range(N_SLOW)), f"failures {fired}"


def test_alignment_decisions_reach_the_next_epoch_through_the_valve(spark, tmp_path):
    """Epoch k >= 1 receives, in every partition, exactly one decision: the one on epoch k-1;
    each checkpoint's alignment coordinator snapshot has aligned up to the epoch before it."""
    from include.runtime import IterationJob

    runner, result, fired = run_with_failures(spark, tmp_path, seed=3)
    assert fired
    rows = runner.read_variables()["received"].collect()
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
    cfg = JobConfig(job_id="events", body="tests.integration.test_coordinator_events:Receiver", input="unused",
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
