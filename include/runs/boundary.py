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
- ``commit_epoch``: checks, the single-winner commit, then the epoch's outputs published
  (``complete_epoch``: the same once prepared, for a commit that runs behind the next epoch).
- ``end_run``: the lease is released.
- ``warm_up_checks``: Great Expectations imported while an attempt's Spark job runs.

``include.runs.epoch_run.EpochRun`` strings these into the state machine a run goes through;
the library runner drives all of it in one process, each task of a DAG drives its part.

Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any, Callable, Mapping, Sequence

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import AlignmentDecision, EpochReport, HeadStatus
from include.checkpoints.lifecycle import StopMode
from include.checkpoints.manifest import Manifest
from include.checks import warm_up
from include.contract.body import body_reference
from include.contract.config import JobConfig
from include.epoch.aligner import missing_reports
from include.epoch.commit import PendingCommit
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


def complete_epoch(job: IterationJob, pending: PendingCommit) -> tuple[Manifest, dict[str, str]]:
    """``commit_epoch`` after its ``Committer.prepare``: the checks, the single-winner write,
    then the epoch's outputs published; what a commit that runs behind the next epoch does in
    its own thread (include.runs.epoch_run.EpochRun.commit_behind). Touches no coordinator."""
    manifest = job.committer.complete(pending)
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


__all__ = ["Step", "attempt_failed", "attempt_ran", "commit_epoch", "complete_epoch", "end_run",
           "epoch_line", "mark_store", "metrics_text", "owner_of", "resolve_attempt", "start_run"]
