"""The epoch protocol of the runtime core driven without Spark: a fake tail writes what an
attempt's Spark job would (the receiving side's state, its reports, its staged outputs), and
the core plans, aligns, commits, finishes and publishes for real over a local store. Cheap
ports of seed behaviours that need no computation:

- seed 004's failing checkpoint: coordinator events arrive exactly once, in order, while
  checkpoints fail on the receiving side and in the commit, with the job going on in the same
  process or restarted;
- FLIP-147 (seed 001): outputs wait for the first checkpoint completed after finish (the final
  one); a pending checkpoint's second phase is completed, not cancelled, when the job finishes.
"""

from __future__ import annotations

import json
import os

import pytest

from include.checkpoints.head_state import EpochReport, FileRef, HeadStatus
from include.contract.body import IterationBody
from include.contract.config import JobConfig
from include.epoch.coordinators import Coordinator
from include.epoch.job import DataCheckFailed, IterationJob
from include.errors import OutputError, TransientStoreError
from include.process import failpoints
from include.process.failpoints import FailpointError
from include.publication.outputs import published, published_increments
from include.runs.epoch_run import EpochRun
from include.store import sha256_hex

BODY = "tests.unit.runs.test_boundary:Staged"
EPOCHS = 6  # max_epochs: epochs 0..5, the last one decides termination


class Staged(IterationBody):
    """A body whose Spark side is never run (the fake tail below stands for it): one head, a
    final output and a per-epoch output."""

    name = "staged"
    heads = {"received": ("partition",)}
    outputs = ("result",)
    epoch_outputs = ("history",)
    static_input = False

    def load(self, raw, params):
        raise AssertionError("not run: the fake tail stands for the Spark job")

    init = step = finish = load


class Numbers(Coordinator):
    """Sends 0..n-1 to partition 0: asked for ``per_epoch`` more when an epoch is planned, it
    sends the first of them into that epoch's inbox and the rest when ``pump`` is called, while
    the epoch runs (the valve shut: held until its checkpoint commits). Reset to a snapshot, it
    first sends what it still owes."""

    def __init__(self, n: int, per_epoch: int):
        self.n, self.per_epoch = n, per_epoch
        self.next = self.target = 0
        self.ctx = None

    def start(self, ctx):
        self.ctx = ctx
        self.pump()

    def on_epoch_start(self, epoch, ctx):
        self.target = min(self.n, self.target + self.per_epoch)
        if self.next < self.target:
            self._send()

    def pump(self):
        while self.next < self.target:
            self._send()

    def _send(self):
        self.ctx.send(0, self.next)
        self.next += 1

    def snapshot(self):
        return {"next": self.next, "target": self.target}

    def reset_to(self, state):
        self.next, self.target = (0, 0) if state is None else (state["next"], state["target"])


def _put(job: IterationJob, key: str, value) -> FileRef:
    blob = json.dumps(value).encode()
    job.store.put(key, blob)
    return FileRef(key, len(blob), sha256_hex(blob), 1)


def fake_tail(job: IterationJob, plan) -> None:
    """What an attempt's Spark job writes: per partition, the receiving side's state (what the
    partition had received up to the parent checkpoint, then this epoch's inbox: each
    coordinator's events in order, the alignment's as the epoch decided), its report, and the
    per-epoch output (a final plan: the final output)."""
    root = job.log.layout.attempt(plan.checkpoint_id, plan.attempt_id)
    before = {}
    for ds in plan.restore_datasets().values():
        for p, files in enumerate(ds.partitions):
            before[p] = [row for f in files for row in json.loads(job.store.get(f.key))]
    for p in range(plan.num_partitions):
        if plan.kind == "final":
            ref = _put(job, f"{root}/outputs/result/part-{p:05d}.json", before.get(p, []))
            report = EpochReport("result", p, plan.checkpoint_id, plan.attempt_id, 0, {}, (ref,), "{}")
            job.store.put(f"{job.log.layout.output_reports(plan.checkpoint_id, plan.attempt_id)}result/"
                          f"part-{p:05d}.json", report.to_json().encode())
            continue
        got = list(before.get(p, []))
        for name, events in sorted((plan.events or {}).items()):
            got += [[name, plan.epoch, e["payload"]["epoch"] if name == "alignment" else e["payload"]]
                    for e in events if e["partition"] == p]
        ref = _put(job, f"{root}/received/part-{p:05d}.json", got)
        report = EpochReport("received", p, plan.epoch, plan.attempt_id, 1, {}, (ref,), "{}")
        job.store.put(job.log.layout.report(plan.epoch, plan.attempt_id, "received", p), report.to_json().encode())
        out = _put(job, f"{root}/outputs/history/part-{p:05d}.json", [[plan.epoch, p]])
        staged = EpochReport("history", p, plan.epoch, plan.attempt_id, 0, {}, (out,), "{}")
        job.store.put(f"{job.log.layout.output_reports(plan.epoch, plan.attempt_id)}history/part-{p:05d}.json",
                      staged.to_json().encode())


def received(job: IterationJob) -> dict[int, list]:
    latest = job.log.latest()
    return {p: [row for f in files for row in json.loads(job.store.get(f.key))]
            for p, files in enumerate(latest.variables["received"].partitions)}


def config(tmp_path, **kw) -> JobConfig:
    settings = dict(job_id="core", body=BODY, input="unused", checkpoint_root=str(tmp_path / "store"),
                    output_path=str(tmp_path / "out"), max_epochs=EPOCHS, tolerance=None, num_partitions=2,
                    checks={"enabled": False})
    settings.update(kw)
    return JobConfig(**settings)


class FailsOnce:
    """Wraps a callable: the first call while ``armed`` raises ``error`` instead."""

    def __init__(self, call, error):
        self.call, self.error, self.armed, self.fired = call, error, False, False

    def __call__(self, *args, **kwargs):
        if self.armed and not self.fired:
            self.fired = True
            raise self.error
        return self.call(*args, **kwargs)


# epoch -> how its first checkpoint fails
FAILURES = {
    1: "the manifest write fails",  # in the commit: the coordinators are reset, the attempt adopted
    2: "refused by the receiving side",  # a check declines it (seed 004's failing snapshot): aborted
    3: "fails before the manifest write",  # the coordinators go on as they were: the same inbox again
    4: "fails after the manifest write",  # committed, the valves not opened: restored from the store
}


@pytest.mark.parametrize("restart", [False, True], ids=["job goes on", "job restarts"])
def test_coordinator_events_exactly_once_in_order_while_checkpoints_fail(tmp_path, restart):
    """CoordinatorEventsToStreamOperatorRecipientExactlyOnceITCase's testFailingCheckpoint:
    checkpoints 1 to 4 each fail once, a different way (above), with events held by the shut
    valve at that moment; the job goes on in the same process (a failed checkpoint, no
    failover) or restarts (a new job object and coordinator, restored from the store). Partition
    0 receives exactly 0..n-1, in order, and every epoch k >= 1 exactly one alignment decision
    per partition, the one on epoch k-1."""
    cfg = config(tmp_path)
    n = 12
    refuse = FailsOnce(lambda plan, decision, reports: None, DataCheckFailed("the receiving side declines (test)"))

    def new_job():
        numbers = Numbers(n, per_epoch=3)
        job = IterationJob(cfg, checks=(refuse,), coordinators={"numbers": numbers})
        job.log.commit = FailsOnce(job.log.commit, TransientStoreError("manifest write failed (test)"))
        return job, numbers

    job, numbers = new_job()
    failed, held_at_failure = [], []
    for _ in range(EPOCHS + len(FAILURES)):
        plan = job.attempts.plan_epoch()
        numbers.pump()  # sent while the epoch runs: held
        if not plan.adopted:
            fake_tail(job, plan)
        how = FAILURES.get(plan.epoch) if plan.epoch not in [e for e, _ in failed] else None
        job.log.commit.armed = how == "the manifest write fails"
        refuse.armed = how == "refused by the receiving side"
        failpoints.configure({"fails before the manifest write": "commit.before_write=raise",
                              "fails after the manifest write": "commit.after_write=raise"}.get(how, ""))
        try:
            manifest = job.committer.commit(plan)
        except (TransientStoreError, DataCheckFailed, FailpointError):
            failed.append((plan.epoch, how))
            held_at_failure.append(sum(len(h.valve.blocked()) for h in job.coordination.coordinators.holders.values()))
            if restart:
                job, numbers = new_job()
            continue
        finally:
            failpoints.configure("")
        job.publisher.notify_checkpoint_complete(manifest)
        if manifest.decision.terminated:
            break
    assert failed == sorted(FAILURES.items()), "every checkpoint failure happened, once"
    assert all(held_at_failure), "events were held by the shut valve at every failure"
    assert job.log.latest().epoch == EPOCHS - 1
    got = received(job)
    assert [v for name, _epoch, v in got[0] if name == "numbers"] == list(range(n))
    assert [r for r in got[1] if r[0] == "numbers"] == []
    for p in (0, 1):
        assert [(k, v) for name, k, v in got[p] if name == "alignment"] == [(k, k - 1) for k in range(1, EPOCHS)]


def test_outputs_wait_for_the_first_checkpoint_completed_after_finish(tmp_path):
    """FLIP-147: a two-phase-commit sink commits its last data once a checkpoint taken after
    finish() completes. Here the finish attempt stages the outputs (finish), the final
    checkpoint is the first checkpoint after it, and publication waits for it: a crash after
    finish, before the final checkpoint, leaves nothing published; the restore adopts the
    finish attempt (not run again), commits the final checkpoint, and only then publishes, once."""
    cfg = config(tmp_path)
    run = EpochRun(IterationJob(cfg), execute=lambda plan: fake_tail(run.job, plan))
    run.state = run.job.restorer.state()
    while run.state.status is HeadStatus.RUNNING:
        run.epoch()
    failpoints.configure("finish.before_final_checkpoint=raise")
    try:
        with pytest.raises(FailpointError):
            run.finish()
    finally:
        failpoints.configure("")
    job = IterationJob(cfg)
    [finish_attempt] = job.log.attempt_ids(EPOCHS)
    assert job.log.latest().kind == "epoch", "no final checkpoint yet"
    with pytest.raises(OutputError):
        published(cfg.output_path, "result")
    assert not os.path.exists(os.path.join(cfg.output_path, "result")), "nothing of the finish is visible"

    again = EpochRun(job, execute=lambda plan: pytest.fail("the finish attempt is adopted, not run again"))
    again.state = job.restorer.state()
    final = again.finish()
    assert final.kind == "final" and final.attempt_id == finish_attempt
    with pytest.raises(OutputError):
        published(cfg.output_path, "result")  # committed, not yet published: conclude publishes
    assert set(again.conclude()) == {"result"}
    result = published(cfg.output_path, "result")
    assert (result.checkpoint_id, result.manifest["replaces"]) == (EPOCHS, None)
    assert set(again.conclude()) == {"result"} and published(cfg.output_path, "result").checkpoint_id == EPOCHS


def test_finish_completes_the_pending_publication_of_the_checkpoint_before_it(tmp_path):
    """FLIP-147's "do not cancel a pending checkpoint on finish": the checkpoint that decided
    termination committed, then the process died before its per-epoch output was published
    (its second phase pending). The finish does not drop it: planning the finish publishes it
    first, once, and every epoch's increment is there once."""
    cfg = config(tmp_path)
    run = EpochRun(IterationJob(cfg), execute=lambda plan: fake_tail(run.job, plan))
    run.state = run.job.restorer.state()
    last = EPOCHS - 1
    failpoints.configure(f"publish.before_output@checkpoint={last}=raise")
    try:
        with pytest.raises(FailpointError):
            while True:
                run.epoch()
    finally:
        failpoints.configure("")
    job = IterationJob(cfg)
    state = job.restorer.state()
    assert state.latest.epoch == last and state.status is HeadStatus.TERMINATING
    assert set(job.log.publications.of(last)) == set(), "its publication is pending"

    plan = job.attempts.plan_finish()
    assert set(job.log.publications.of(last)) == {"history"}, "published before the finish runs"
    fake_tail(job, plan)
    job.publisher.publish(job.committer.commit_finish(plan))
    increments = published_increments(cfg.output_path, "history")
    assert increments.checkpoints == tuple(("core", e) for e in range(EPOCHS)), "each epoch's once, none dropped"


def test_what_a_crash_left_unpublished_is_published_and_told_once(tmp_path):
    """A commit whose publication a crash cut off: the next run publishes it as it plans its
    next epoch (or the finish), and tells ``on_settled`` (a DAG task puts it in its lineage)
    once: the checkpoint and where each output went. A publication its commit made is not told
    again: ``Publisher.settle`` returns only what it published itself."""
    cfg = config(tmp_path)
    told = []

    def new_run() -> EpochRun:
        """A run of a new job object from the store's state, telling ``told``."""
        run = EpochRun(IterationJob(cfg), execute=lambda plan: fake_tail(run.job, plan),
                       on_settled=lambda manifest, published: told.append((manifest.checkpoint_id, published)))
        run.state = run.job.restorer.state()
        return run

    def crashed_at(point: str) -> EpochRun:
        """A run that goes on until ``point`` raises; then a new one."""
        run = new_run()
        failpoints.configure(f"{point}=raise")
        try:
            with pytest.raises(FailpointError):
                while True:
                    run.epoch() if run.state.status is HeadStatus.RUNNING else run.finish()
        finally:
            failpoints.configure("")
        return new_run()

    run = crashed_at("publish.before_output@checkpoint=2")
    assert run.state.latest.checkpoint_id == 2 and run.job.log.publications.of(2) == {}
    assert told == []
    run.epoch()  # plans epoch 3: checkpoint 2's output published first
    where = os.path.join(cfg.output_path, "history")
    assert told == [(2, {"history": where})] and run.published == {"history": where}
    assert set(run.job.log.publications.of(2)) == {"history"}
    assert run.job.publisher.settle(run.job.restorer.state()) == {}, "published by its commit: nothing to tell"

    run = crashed_at(f"publish.before_output@checkpoint={EPOCHS - 1}")  # the epoch that decided termination
    assert run.state.status is HeadStatus.TERMINATING and told == [(2, {"history": where})]
    run.finish()  # planning the finish publishes it first
    assert told == [(2, {"history": where}), (EPOCHS - 1, {"history": where})]
    assert set(run.conclude()) == {"result"} and len(told) == 2, "the final outputs are the finish's own"
    increments = published_increments(cfg.output_path, "history")
    assert increments.checkpoints == tuple(("core", e) for e in range(EPOCHS)), "each epoch's once"
