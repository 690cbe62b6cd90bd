"""The rules a run of a job keeps at the epoch boundary, written once: the library runner
(spark_jobs.runner) and the Airflow operators (plugins/iterations/operators) both call them.

- ``start_run``: before a run writes anything: the store can commit exactly once (its
  conditional writes are probed), the job is this run's (its owner record), and no other run
  writes it (the lease, whose token fences every commit and publication).
- ``next_step``: at an epoch boundary, run the next epoch, finish, drain, suspend, or stop.
- ``resolve_attempt``: what became of an attempt a step of the run recorded earlier (a retried
  task): still pending, committed by itself (its reply was lost, its plan since collected), or
  superseded.
- ``awaiting_reports``: which reports the alignment of an attempt still waits for, or why the
  wait is over without them.
- ``attempt_failed``: a failed attempt is aborted (its files deleted, never adopted); a damaged
  checkpoint is refused with the way out.
- ``align_attempt``: the global alignment of an attempt, or why it cannot be had.
- ``commit_epoch``: checks, the single-winner commit, then the epoch's outputs published.
- ``end_run``: the lease is released.
- ``warm_up_checks``: Great Expectations imported while an attempt's Spark job runs.

``EpochRun`` strings these into the state machine a run goes through; the library runner
drives all of it in one process, each task of a DAG drives its part.

Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from include.checkpoints.checkpoint_log import ABANDONED, CheckpointLog, describe_run
from include.checkpoints.head_state import AlignmentDecision, EpochReport, HeadStatus
from include.checkpoints.lifecycle import StopMode
from include.checkpoints.manifest import Manifest
from include.contract.body import body_reference
from include.contract.config import JobConfig
from include.epoch.aligner import missing_reports
from include.epoch.job import EpochPlan, IterationJob, JobState
from include.errors import AlignmentIncomplete, CheckpointCorrupted, CheckpointError, CheckpointSuperseded
from include.process.failpoints import failpoint
from include.publication.output_owners import check_output_location
from include.publication.outputs import check_output_path_outside_stores
from include.runs.generations import seed
from include.runs.leases import Holder, JobLease
from include.runs.ownership import JobOwner, check_claim, claim
from include.store import STORE_MARKER, ObjectStore
from include.store.borders import check_input_borders, check_store_borders

log = logging.getLogger("iterations")


def owner_of(config: JobConfig, dag_id: str | None) -> JobOwner:
    """What a run of ``config`` claims the job for (``dag_id`` None: outside Airflow)."""
    return JobOwner(dag_id=dag_id, body=body_reference(config.body), input=config.input.to_dict(),
                    output_path=config.output_path)


def mark_store(store: ObjectStore) -> None:
    """Mark the store's root as a checkpoint store: no output is ever published inside one
    (include.publication.outputs.check_not_in_store)."""
    if not store.exists(STORE_MARKER):
        store.put_if_absent(STORE_MARKER, json.dumps({"format": "iterations.store/1"}).encode())


def check_borders(config: JobConfig, store: ObjectStore, store_options: dict, output_owner=None, *,
                  take_over: bool = False) -> None:
    """The borders a run's locations must keep, checked against the stores themselves before the
    run's first write (its lease, its binding to a generation): its checkpoint store neither
    inside nor around another store or job directory, its input nothing of a store, its output
    not another job's (include.store). LocationError / OutputOwned naming what it would reach."""
    check_store_borders(store)
    check_input_borders(config.input.location, config.checkpoint_location, store_options)
    if config.output_path and output_owner is not None:
        check_output_location(config.output_location, output_owner, take_over=take_over, store_options=store_options)


def start_run(job: IterationJob, holder: Holder, *, dag_id: str | None = None, take_over: bool = False,
              lease_wait: float = 0.0, alive: Callable[[Holder], bool | None] | None = None,
              poll: float = 1.0, validate: bool = True) -> JobState:
    """Everything a run does before it writes: check the body, its parameters and the data
    checks; probe the store's conditional writes (once per process); check the borders of the
    store (no other store or job directory inside or above it), of the input (nothing of a
    store) and of the output (not inside a store, not another job's); mark the store; refuse a
    job of another owner unless taken over (OwnershipError); hold the job's lease (JobBusy
    naming the run that holds it, after ``lease_wait`` seconds); only then record the owner (a
    take-over replaces it under the lease); then the job's state at its latest checkpoint.
    Every refusal comes before the first write. ``validate`` False: a step that plans nothing
    (a commit: its attempt's plan was validated) skips loading the body's metadata."""
    if validate:
        job.attempts.check_expectations()  # the body, its parameters and the data checks, refused before anything is written
    job.store.check_conditional_writes()
    if validate:  # the borders, once per planning step (a commit's step was planned by one that checked them)
        check_borders(job.config, job.store, job.store_options, job.output_owner, take_over=take_over)
    check_output_path_outside_stores(job.config.output_path, **job.store_options)
    owner = owner_of(job.config, dag_id)
    check_claim(job.store, job.config.job_id, owner, take_over=take_over)
    job.take_over = take_over
    job.lease = JobLease(job.store, job.lease_id).acquire(holder, wait=lease_wait, alive=alive, poll=poll)
    mark_store(job.store)
    claim(job.store, job.config.job_id, owner, take_over=take_over, claimed_by=holder.describe())
    seed(job)  # a generation that recomputes a job from an epoch starts from a copy of its checkpoint
    state = job.restorer.state()
    if validate and state.status is not HeadStatus.TERMINATED:
        job.check_input(full=True)  # every pinned file's content checked (once per process), before any Spark work
    return state


def end_run(job: IterationJob) -> None:
    """Release the run's lease (nothing if it holds none, or lost it)."""
    if job.lease is not None:
        job.lease.release()
        job.lease = None


class Step(str, enum.Enum):
    """What a run does at an epoch boundary (``next_step``)."""

    EPOCH = "epoch"  # run the next epoch
    DRAIN = "drain"  # a drain is asked for: finish now, at the latest checkpoint
    SUSPEND = "suspend"  # a suspend is asked for: stop at the latest checkpoint
    FINISH = "finish"  # an epoch decided termination: the final checkpoint is next
    DONE = "done"  # terminated: only the outputs' publication is left


def next_step(state: JobState, requested: StopMode | None = None, *, asked: StopMode | None = None) -> Step:
    """What a run does at an epoch boundary, after a restore or a commit; the same rule for the
    library runner and the DAG's tasks. A terminated job is done, a terminating one finishes;
    a running one honours a pending stop request (``requested``: the control DAG's, or ``asked``:
    the run's own ``stop``), once it has a checkpoint to drain from or suspend at, and
    otherwise runs its next epoch."""
    if state.status is HeadStatus.TERMINATED:
        return Step.DONE
    if state.status is HeadStatus.TERMINATING:
        return Step.FINISH
    stop = (requested or asked) if state.latest is not None else None
    if stop is StopMode.SUSPEND:
        return Step.SUSPEND
    if stop is StopMode.DRAIN:
        return Step.DRAIN
    return Step.EPOCH


def resolve_attempt(job: IterationJob, epoch: int, attempt_id: str) -> tuple[EpochPlan | None, Manifest | None]:
    """(its plan, the checkpoint it committed) for an attempt recorded earlier: (plan, None)
    while it is not committed; (plan or None, manifest) once it committed (its plan may be gone:
    the commit's garbage collection removes a committed attempt's plan); CheckpointSuperseded
    if another attempt committed the checkpoint or the attempt was aborted."""
    recorded = job.log.read_plan(epoch, attempt_id)
    plan = EpochPlan.from_dict(recorded) if recorded is not None else None
    if job.attempts.raise_if_superseded(epoch, attempt_id):
        return plan, job.log.load(epoch, verify="none")
    reason = job.log.abort_reason(epoch, attempt_id)
    if reason is not None:
        raise CheckpointSuperseded(f"attempt {attempt_id} of checkpoint {epoch} of job {job.config.job_id} was "
                                   f"aborted ({reason or 'no reason given'}): run the epoch again")
    if plan is None:
        raise CheckpointError(f"attempt {attempt_id} of checkpoint {epoch} of job {job.config.job_id} has no plan "
                              f"in the store ({job.store.location(job.log.layout.plan(epoch, attempt_id))}) and "
                              "was not committed: run the epoch again")
    return plan, None


def awaiting_reports(log: CheckpointLog, epoch: int, attempt_id: str,
                     expected: Mapping[str, int]) -> tuple[list[str], dict[str, Any] | None]:
    """What the alignment of an attempt still waits for: (the missing reports as ``head/p``,
    None), or (missing, the event that ends the wait without them): the attempt was aborted, or
    another attempt committed the epoch (whose GC then removes this attempt's files: its
    reports will never all be there). ``expected``: head -> partitions."""
    end: dict[str, Any] = {"epoch": epoch, "attempt_id": attempt_id}
    if log.is_aborted(epoch, attempt_id):
        return [], {**end, "status": "aborted"}
    seen = ((r.head, r.partition) for r in log.reports(epoch, attempt_id))
    missing = [f"{h}/{p}" for h, p in missing_reports(expected, seen)]
    if missing:
        committed, winner = log.committed_attempt(epoch)
        if committed and winner != attempt_id:
            return missing, {**end, "status": "superseded", "committed_by": winner}
    return missing, None


def warm_up_checks(job: IterationJob, plan: EpochPlan | None = None) -> None:
    """Import Great Expectations in the background, at low priority, while an attempt's Spark
    job runs (include.checks.warm_up), when the job's data checks are on and ``plan`` (if
    given) is not adopted: the commit that follows finds it imported."""
    if job.check_settings.enabled and (plan is None or not plan.adopted):
        from include.checks import warm_up

        warm_up()


def attempt_ran(job: IterationJob, plan: EpochPlan) -> None:
    """The attempt's Spark job ended and every report is written (a failure point for tests:
    ``head.after_run`` / ``finish.after_run``)."""
    failpoint(f"{'head' if plan.kind == 'epoch' else 'finish'}.after_run", job=job.config.job_id,
              epoch=plan.checkpoint_id)


def attempt_failed(job: IterationJob, plan: EpochPlan, error: BaseException,
                   reason: str | None = None) -> BaseException:
    """Abort a failed attempt (its files deleted now, not left to GC; it is never adopted) and
    return the error to raise: for a damaged restored checkpoint, the refusal that names the
    way out; otherwise ``error`` itself."""
    job.attempts.abort(plan, reason=(reason or f"{type(error).__name__}: {error}")[:500])
    if isinstance(error, CheckpointCorrupted):
        return job.restorer.refuse_damaged(error)
    return error


def align_attempt(job: IterationJob, plan: EpochPlan,
                  reports: Sequence[EpochReport] | None = None) -> AlignmentDecision:
    """The global alignment of an attempt (over ``reports``, those its run returned, or else
    those in the store): its decision once every partition of every head has reported;
    AlignmentIncomplete naming the missing ones, or CheckpointSuperseded when another attempt
    committed the epoch meanwhile (its GC took this attempt's files: the reports will never all
    be there)."""
    try:
        return job.committer.align(plan, reports)
    except AlignmentIncomplete:
        job.attempts.raise_if_superseded(plan.checkpoint_id, plan.attempt_id)
        raise


def align_if_complete(job: IterationJob, plan: EpochPlan, reports: Sequence[EpochReport] | None = None,
                      ) -> tuple[AlignmentDecision | None, list[tuple[str, int]]]:
    """(the attempt's decision, []) once every partition of every head has reported (over
    ``reports``, or those in the store), else (None, the missing (head, partition)s): the one
    check the run task (``commit_in_head``) and the alignment sensor make before aligning."""
    reports = job.attempts.reports(plan) if reports is None else reports
    missing = plan.aligner().missing(reports)
    if missing:
        return None, missing
    return align_attempt(job, plan, reports), []


def commit_epoch(job: IterationJob, plan: EpochPlan, decision: AlignmentDecision | None = None,
                 reports: Sequence[EpochReport] | None = None) -> tuple[Manifest, dict[str, str]]:
    """Check, commit (single winner; a retry of a commit that landed gets its manifest), then
    publish the epoch's outputs: (the manifest as committed, output name -> where published)."""
    manifest = job.committer.commit(plan, decision, reports)
    return manifest, job.publisher.notify_checkpoint_complete(manifest)


def aligned_line(decision: AlignmentDecision) -> str:
    """The line of an epoch's global alignment: ``epoch 3 globally aligned: feedback=4804
    terminated=False``."""
    return (f"epoch {decision.epoch} globally aligned: feedback={decision.feedback_count} "
            f"terminated={decision.terminated}" + (f" ({decision.reason})" if decision.reason else ""))


def metrics_text(decision: AlignmentDecision) -> str:
    """An epoch's metrics as a log shows them: ``l1_delta=4.575e-07 max_shift=0.000e+00``."""
    return " ".join(f"{k}={v:.3e}" for k, v in sorted(decision.metrics.items()))


def epoch_line(decision: AlignmentDecision) -> str:
    """The progress line of a committed epoch: ``epoch 3 committed: feedback=4804 l1_delta=4.575e-07``."""
    return (f"epoch {decision.epoch} committed: feedback={decision.feedback_count} {metrics_text(decision)}".rstrip()
            + (f" -> terminating ({decision.reason})" if decision.terminated else ""))


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
    """

    def __init__(self, job: IterationJob, execute: Execute | None = None, batch_id: str | None = None, *,
                 interrupt: Callable[[EpochPlan], None] | None = None, run: Mapping[str, Any] | None = None):
        self.job = job
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

    # -- start and end ------------------------------------------------------------------------
    def start(self, holder: Holder, **options: Any) -> JobState:
        """``start_run``: validated, the store probed, the job claimed and its lease held; the
        job's state at its latest checkpoint."""
        self.state = start_run(self.job, holder, **options)
        return self.state

    def end(self) -> None:
        """``end_run``: the lease released."""
        end_run(self.job)

    # -- at an epoch boundary -----------------------------------------------------------------
    def boundary(self, *, asked: StopMode | None = None) -> Step:
        """What comes next (``next_step``) over the pending stop request (read once per
        boundary: ``requested``); ``asked``: this run's own stop (its ``stop`` param)."""
        state = self._state()
        self.requested = self.job.stopping.stop_requested(state) if state.status is HeadStatus.RUNNING else None
        return next_step(state, self.requested, asked=asked)

    def suspend(self, reason: str = "suspend requested") -> int | None:
        """Suspend at the latest checkpoint (a savepoint) unless it is already; its id."""
        state = self._state()
        if self.job.stopping.suspended_at(state) is None:
            return self.job.stopping.suspend(state, reason=reason)
        self.job.log.control.clear_stop_request()  # suspended there already: the request is met
        return state.latest.checkpoint_id if state.latest else None

    def settle(self) -> dict[str, str]:
        """Publish what a crash between the latest commit and its publication left."""
        published = self.job.publisher.settle(self._state())
        self.published.update(published)
        return published

    # -- an epoch -----------------------------------------------------------------------------
    def plan(self) -> EpochPlan:
        """Plan the next epoch (``Attempts.plan_epoch``: a complete earlier attempt is
        adopted) after fencing what an earlier run left unfinished of it."""
        state = self._state()
        self._fence(state.next_epoch)
        return self.job.attempts.plan_epoch(self.batch_id, state, run=self.run_info)

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
        plan = self.job.attempts.plan_finish(self.batch_id, state, drain=drain, run=self.run_info)
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


__all__ = ["EpochOutcome", "EpochRun", "Step", "attempt_failed", "attempt_ran", "commit_epoch", "end_run",
           "epoch_line", "mark_store", "metrics_text", "owner_of", "resolve_attempt", "start_run", "state_of"]
