"""One run of a job through the epoch protocol, as a state machine (``EpochRun``): the rules
it keeps at each step are include.runs.boundary's; the library runner drives every phase in one
process, each task of a DAG its part.

Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from include.checkpoints.checkpoint_log import ABANDONED, describe_run
from include.checkpoints.head_state import AlignmentDecision, EpochReport, HeadStatus
from include.checkpoints.lifecycle import StopMode
from include.checkpoints.manifest import Manifest
from include.epoch.commit import PendingCommit
from include.epoch.job import EpochPlan, IterationJob, JobState
from include.process.failpoints import failpoint
from include.runs.boundary import (
    Step,
    align_attempt,
    align_if_complete,
    attempt_failed,
    attempt_ran,
    commit_epoch,
    complete_epoch,
    end_run,
    next_step,
    start_run,
)
from include.runs.leases import Holder

log = logging.getLogger("iterations")


Execute = Callable[[EpochPlan], "Sequence[EpochReport] | None"]


@dataclass
class EpochOutcome:
    """A committed epoch: its plan, its checkpoint as committed, where its outputs went."""

    plan: EpochPlan
    manifest: Manifest
    published: dict[str, str]

    @property
    def decision(self) -> AlignmentDecision:
        return self.manifest.decision


@dataclass
class _Behind:
    """A commit running behind the next epoch: what it commits, the state before it, its thread."""

    pending: PendingCommit
    before: JobState
    future: Future


class EpochRun:
    """One run of a job through the epoch protocol, as a state machine::

        start -> boundary -+- EPOCH:   plan -> run -> align -> commit -> boundary ...
                           +- FINISH / DRAIN: finish (plan, run, commit the final checkpoint)
                           +- SUSPEND: suspend
                           +- DONE
                 then conclude (a terminated job's outputs published), end (the lease released)

    Each phase takes what the one before produced (the plan, the reports the attempt's run
    returned, the alignment's decision) and keeps the job's ``state``. The library runner
    drives every phase in one process (``epoch`` chains plan, run, align and commit); each
    task of a DAG drives its part (the head: start, boundary, plan, run; the alignment
    sensor: align; the commit task: commit; finish: start, boundary, finish or suspend,
    conclude, end) and a later task recovers what an earlier one produced from the store
    (``resolve_attempt``).

    ``execute(plan)`` runs an attempt's Spark job and returns the reports its tail wrote (None:
    read them from the store); ``interrupt(plan)`` stops what an earlier run left of an attempt.

    ``commit_behind`` instead of ``commit`` overlaps an epoch's commit with the next epoch
    (docs/how-it-works.md, "Commits behind the next epoch"; design rule 12): the next plan starts from the checkpoint
    being committed, and ``land`` (which ``boundary`` calls before anything but an epoch, and
    ``end`` before the lease goes) waits for it; if it does not commit, the attempt planned over
    it is aborted.
    """

    def __init__(self, job: IterationJob, execute: Execute | None = None, batch_id: str | None = None, *,
                 interrupt: Callable[[EpochPlan], None] | None = None, run: Mapping[str, Any] | None = None,
                 on_settled: Callable[[Manifest, dict[str, str]], None] | None = None):
        self.job = job
        # told each time this run publishes what a crash left of a committed checkpoint's outputs
        # (``settle``): the checkpoint and output -> where (a task puts them in its lineage)
        self.on_settled = on_settled
        self.batch_id = batch_id
        self.run_info = dict(run) if run else None  # who runs: recorded in its attempts' plans
        self._execute = execute
        self._interrupt = interrupt
        self.state: JobState | None = None
        self.published: dict[str, str] = {}  # output -> where, everything this run published
        self.failed_partitions: list[int] = []  # of the last attempt that failed (their reports missing)
        self.failed_plan: EpochPlan | None = None  # that attempt
        self.requested: StopMode | None = None  # the stop request the last boundary saw
        self.running: EpochPlan | None = None  # the attempt ``run`` is running now (``cancel``)
        self._cancelled: str | None = None  # the abort reason of an attempt ``cancel`` stopped
        self._fenced: set[int] = set()
        self._behind: _Behind | None = None  # the commit running behind the next epoch
        self._over: EpochPlan | None = None  # the attempt planned over it (aborted if it fails)
        self._threads: ThreadPoolExecutor | None = None
        self._landed: list[EpochOutcome] = []  # commits that landed since ``take_landed``

    # -- start and end ------------------------------------------------------------------------
    def start(self, holder: Holder, **options: Any) -> JobState:
        """``start_run``: validated, the store probed, the job claimed and its lease held; the
        job's state at its latest checkpoint."""
        self.state = start_run(self.job, holder, **options)
        return self.state

    def end(self) -> None:
        """``end_run``: the lease released, once a commit still running behind has ended (its
        failure logged: the run is ending on an error of its own already)."""
        if self._behind is not None:
            epoch = self._behind.pending.plan.epoch
            try:
                self.land()
            except BaseException as e:
                log.error("job %s: the commit of epoch %d failed while the run ended on another error: %s: %s",
                          self.job.config.job_id, epoch, type(e).__name__, _last_line(e))
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
        end_run(self.job)

    # -- at an epoch boundary -----------------------------------------------------------------
    def boundary(self, *, asked: StopMode | None = None) -> Step:
        """What comes next (``next_step``) over the pending stop request (read once per
        boundary: ``requested``); ``asked``: this run's own stop (its ``stop`` param)."""
        state = self._state()
        self.requested = self.job.stopping.stop_requested(state) if state.status is HeadStatus.RUNNING else None
        step = next_step(state, self.requested, asked=asked)
        if step is not Step.EPOCH:
            self.land()  # a finish, drain or suspend starts from a committed checkpoint
        return step

    def suspend(self, reason: str = "suspend requested") -> int | None:
        """Suspend at the latest checkpoint (a savepoint) unless it is already; its id."""
        state = self._state()
        if self.job.stopping.suspended_at(state) is None:
            return self.job.stopping.suspend(state, reason=reason)
        self.job.log.control.clear_stop_request()  # suspended there already: the request is met
        return state.latest.checkpoint_id if state.latest else None

    def settle(self) -> dict[str, str]:
        """Publish what a crash between the latest commit and its publication left; what this
        call published (``Publisher.settle``), also in ``published`` and told to ``on_settled``.
        Planning an epoch or the finish settles first, the same way."""
        return self._settle(self._state())

    def _settle(self, state: JobState) -> dict[str, str]:
        published = self.job.publisher.settle(state)
        if published:
            self.published.update(published)
            if self.on_settled is not None:
                self.on_settled(state.latest, published)
        return published

    # -- an epoch -----------------------------------------------------------------------------
    def plan(self) -> EpochPlan:
        """Plan the next epoch (``Attempts.plan_epoch``: a complete earlier attempt is
        adopted) after fencing what an earlier run left unfinished of it."""
        state = self._state()
        self._fence(state.next_epoch)
        plan = self.job.attempts.plan_epoch(self.batch_id, state, run=self.run_info,
                                            settle=self._settle if self._behind is None else False)
        if self._behind is not None:
            self._over = plan
        return plan

    def run(self, plan: EpochPlan) -> Sequence[EpochReport] | None:
        """Run the attempt's Spark job unless it was adopted complete: the reports its run
        returned, or None (they are in the store). A failed attempt is aborted (its files
        deleted, never adopted; ``failed_partitions`` says which partitions had not reported)
        and a damaged restored checkpoint refused with the way out."""
        if plan.adopted:
            return None
        if self._execute is None:
            raise RuntimeError("this run executes no attempts (no execute given)")
        self.failed_partitions, self.failed_plan = [], None
        self.running, self._cancelled = plan, None
        try:
            reports = self._execute(plan)
        except BaseException as e:
            self.running = None
            if not isinstance(e, Exception) and self._interrupt is not None:
                # stopped from outside (a time-out, an interrupt): the Spark work may still run
                self._interrupt(plan)
            self.failed_plan = plan
            if plan.kind == "epoch":
                missing = plan.aligner().missing(self.job.attempts.reports(plan))
                self.failed_partitions = sorted({p for _h, p in missing})
            error = attempt_failed(self.job, plan, e, self._cancelled)
            if error is e:
                raise
            raise error from e
        self.running = None
        attempt_ran(self.job, plan)
        return reports

    def cancel(self, reason: str) -> EpochPlan | None:
        """Stop the attempt ``run`` is running, for good: its process is being stopped (the task
        killed, marked failed or timed out). Its Spark work is interrupted, then the attempt is
        aborted, so nothing of it is ever committed or adopted (the next run or try plans a new
        one). Called from a signal handler or another thread while ``run`` waits on the attempt;
        returns the plan it cancelled, or None when no attempt was running."""
        plan = self.running
        if plan is None:
            return None
        self._cancelled = f"cancelled: {reason}"  # the attempt's failure, once interrupted, is this cancel
        if self._interrupt is not None:
            self._interrupt(plan)
        self.job.attempts.abort(plan, reason=self._cancelled[:500])
        log.warning("checkpoint %d: attempt %s cancelled (%s)", plan.checkpoint_id, plan.attempt_id, reason)
        return plan

    def align(self, plan: EpochPlan, reports: Sequence[EpochReport] | None = None) -> AlignmentDecision:
        """``align_attempt`` over the reports the run returned (None: those in the store)."""
        return align_attempt(self.job, plan, reports)

    def align_if_complete(self, plan: EpochPlan, reports: Sequence[EpochReport] | None = None,
                          ) -> tuple[AlignmentDecision | None, list[tuple[str, int]]]:
        """``align_if_complete``: the decision if every report is there, else the missing ones."""
        return align_if_complete(self.job, plan, reports)

    def commit(self, plan: EpochPlan, decision: AlignmentDecision | None = None,
               reports: Sequence[EpochReport] | None = None) -> EpochOutcome:
        """``commit_epoch``: checks, the single-winner commit, the epoch's outputs published."""
        manifest, published = commit_epoch(self.job, plan, decision, reports)
        return self._committed(plan, manifest, published)

    def commit_behind(self, plan: EpochPlan, decision: AlignmentDecision | None = None,
                      reports: Sequence[EpochReport] | None = None) -> EpochOutcome | None:
        """``commit``, behind the next epoch: the checkpoint is prepared (``Committer.prepare``),
        the coordinators' valves opened, and the run goes on from its state at once while the
        checks, the single-winner write and the outputs' publication (``complete_epoch``) run
        in a thread of their own until ``land``. The next epoch may run but never commits before
        this one: its commit lands this one first. None, or the outcome when nothing was left to
        commit (a retry found the attempt committed)."""
        self.land()
        pending = self.job.committer.prepare(plan, decision, reports)
        if pending.committed is not None:
            return self.committed(plan, pending.committed)
        self.job.committer.release(pending)  # held events go to the next inbox: undone if this fails
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"commit-{self.job.config.job_id}")
        before = self._state()
        self._behind = _Behind(pending, before, self._threads.submit(complete_epoch, self.job, pending))
        self.state = state_of(pending.manifest)
        return None

    def land(self) -> EpochOutcome | None:
        """Wait for the commit running behind the next epoch (``commit_behind``): its outcome,
        or None when none runs. If it failed (a check refused it, another attempt superseded it,
        the run lost its lease) the attempt planned over it is aborted, the coordinators reset to
        the store and the state put back to what did commit, and its error raised."""
        behind, self._behind = self._behind, None
        if behind is None:
            return None
        over, self._over = self._over, None
        failpoint("epoch.before_land", job=self.job.config.job_id, epoch=behind.pending.plan.epoch)
        try:
            manifest, published = behind.future.result()
        except BaseException as e:
            self.state = behind.before
            self.job.coordination.reset()  # the events it released to the next inbox are dropped
            if over is not None:
                k = behind.pending.plan.epoch
                self.job.attempts.abort(over, reason=f"epoch {k} it ran from did not commit "
                                                     f"({type(e).__name__}: {_last_line(e)})"[:500])
                log.warning("checkpoint %d: attempt %s aborted: epoch %d it ran from did not commit",
                            over.checkpoint_id, over.attempt_id, k)
            raise
        self.published.update(published)
        self.state = state_of(manifest)  # the prepared checkpoint as it was written, with its history
        outcome = EpochOutcome(behind.pending.plan, manifest, published)
        self._landed.append(outcome)
        return outcome

    def take_landed(self) -> list[EpochOutcome]:
        """The commits behind that landed since the last call (``land``, wherever it was called:
        ``boundary`` lands one before a finish), oldest first."""
        landed, self._landed = self._landed, []
        return landed

    def committed(self, plan: EpochPlan | None, manifest: Manifest) -> EpochOutcome:
        """An attempt found committed (an earlier try's reply was lost): publish what is left."""
        return self._committed(plan, manifest, self.job.publisher.notify_checkpoint_complete(manifest))

    def plan_and_run(self, retries: int = 0, planned: Callable[[EpochPlan], None] | None = None,
                     ) -> tuple[EpochPlan, Sequence[EpochReport] | None]:
        """plan -> run (``planned(plan)`` called in between). An attempt that failed leaving
        some partitions without a report is planned and run again, up to ``retries`` times, in
        this process: the coordinators are told which partitions failed (their held events for
        those partitions dropped, ``Coordinator.partition_failed``) and are not reset, and the
        new attempt gets the same inbox (Flink's failover of the failed subtasks while the
        coordinator goes on). Any other failure, or the last one, is raised."""
        while True:
            plan = self.plan()
            if planned is not None:
                planned(plan)
            try:
                return plan, self.run(plan)
            except Exception as e:
                failed, failed_plan = self.failed_partitions, self.failed_plan
                if retries <= 0 or not failed or failed_plan is None:
                    raise
                retries -= 1
                log.warning("job %s epoch %d: attempt %s failed in partition(s) %s (%s: %s); retrying in this "
                            "process with the same inbox (%d more %s)", self.job.config.job_id, plan.epoch,
                            plan.attempt_id, ", ".join(map(str, failed)), type(e).__name__, _last_line(e), retries,
                            "retry" if retries == 1 else "retries")
                for p in failed:
                    self.job.coordination.partition_failed(failed_plan, p)

    def epoch(self, retries: int = 0) -> EpochOutcome:
        """plan -> run -> align -> commit, the reports handed from one phase to the next;
        ``retries``: an attempt that failed in some partitions is run again (``plan_and_run``)."""
        plan, reports = self.plan_and_run(retries)
        failpoint("epoch.before_align", job=self.job.config.job_id, epoch=plan.epoch)
        return self.commit(plan, self.align(plan, reports), reports)

    def epoch_behind(self, retries: int = 0, planned: Callable[[EpochPlan], None] | None = None,
                     ) -> list[EpochOutcome]:
        """``epoch`` with its commit behind the next one: plan and run it while the epoch
        before commits (``commit_behind``), land that commit (if it failed, this attempt is
        aborted and its error raised; if this attempt failed, that commit still lands first),
        then align it and commit it behind. The outcomes that landed (``take_landed``): the
        epoch before's, and this one's when it was found committed already. ``planned`` as in
        ``plan_and_run``. The library runner calls it for every epoch; a DAG's head with
        ``overlap_commits`` for the epoch the head before it ran, with nothing committing yet."""
        try:
            plan, reports = self.plan_and_run(retries, planned)
        except BaseException:
            self.land()  # the commit behind lands (or its failure is raised) before this failure
            raise
        self.land()
        failpoint("epoch.before_align", job=self.job.config.job_id, epoch=plan.epoch)
        done = self.commit_behind(plan, self.align(plan, reports), reports)
        return self.take_landed() + ([done] if done is not None else [])

    @property
    def committing(self) -> EpochPlan | None:
        """The epoch whose commit runs behind (``commit_behind``) until ``land``, if any."""
        return self._behind.pending.plan if self._behind is not None else None

    # -- the end of the job -------------------------------------------------------------------
    def finish(self, *, drain: bool = False) -> Manifest:
        """The final checkpoint: after the epoch that decided termination, or (``drain``) at the
        latest checkpoint. Plans (``Attempts.plan_finish``, which first publishes what a crash
        left of the latest checkpoint's outputs), runs and commits it."""
        return self.finish_with(lambda plan: self.job.committer.commit_finish(plan), drain=drain)

    def finish_with(self, commit: Callable[[EpochPlan], Manifest], *, drain: bool = False) -> Manifest:
        """``finish``, its commit made by ``commit(plan)`` (a task wraps it to keep the checks'
        report)."""
        state = self._state()
        self._fence(state.latest.checkpoint_id + 1 if state.latest is not None else 0)
        plan = self.job.attempts.plan_finish(self.batch_id, state, drain=drain, run=self.run_info,
                                             settle=self._settle)
        self.run(plan)
        final = commit(plan)
        self.state = state_of(final)
        return final

    def conclude(self, *, may_publish: Callable[[], None] | None = None) -> dict[str, str]:
        """A terminated job's outputs published (``may_publish``, or the job's, first: it raises
        to refuse), and the batch's final checkpoint recorded; what was published."""
        state = self._state()
        published: dict[str, str] = {}
        may_publish = may_publish or self.job.may_publish
        if state.status is HeadStatus.TERMINATED:
            if may_publish is not None:
                may_publish()
            published = self.job.publisher.publish(state.latest)
            self.published.update(published)
        if self.batch_id is not None and state.latest is not None:
            self.job.log.batches.record_final(self.batch_id, state.latest.checkpoint_id)
        return published

    # -- internals ----------------------------------------------------------------------------
    def _state(self) -> JobState:
        if self.state is None:
            raise RuntimeError("the run has not started: call start() first")
        return self.state

    def _committed(self, plan: EpochPlan | None, manifest: Manifest, published: dict[str, str]) -> EpochOutcome:
        self.published.update(published)
        self.state = state_of(manifest)
        return EpochOutcome(plan, manifest, published)  # type: ignore[arg-type]

    def _fence(self, checkpoint_id: int) -> None:
        """The first time this run plans ``checkpoint_id``: stop and abort what an earlier run
        (or an earlier try of a task) left unfinished of it (its process died; its Spark job may
        still run), so two attempts of one checkpoint never run at once. A complete attempt is
        kept: it is adopted. Later plans of the same checkpoint are this run's own."""
        if checkpoint_id in self._fenced:
            return
        self._fenced.add(checkpoint_id)
        for plan in self.job.attempts.unfinished_attempts(checkpoint_id):
            if self._interrupt is not None:
                self._interrupt(plan)
            why = f"{ABANDONED} (killed, lost or timed out); superseded by a new attempt of {describe_run(self.run_info)}"
            if self.job.attempts.abort(plan, reason=why):
                log.warning("checkpoint %d: aborted attempt %s left unfinished by an earlier run or try",
                            checkpoint_id, plan.attempt_id)


def _last_line(error: BaseException) -> str:
    """An error's message in one line. A Python worker's error from Spark carries the worker's
    traceback and the JVM's: its last ``SomeError: message`` line says what failed."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\w*: \S", line)
              and not line.startswith(("org.apache.", "java.", "py4j."))]
    return (raised[-1] if raised else lines[0] if lines else "")[:300]


def state_of(manifest: Manifest) -> JobState:
    """The job's state right after ``manifest`` committed."""
    return JobState(manifest, manifest.head_state.status, manifest.epoch + 1)


__all__ = ["EpochOutcome", "EpochRun", "state_of"]
