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

Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any, Callable, Mapping, Sequence

from include.body import body_reference
from include.checkpoint import CheckpointLog
from include.config import JobConfig
from include.errors import AlignmentIncomplete, CheckpointCorrupted, CheckpointError, CheckpointSuperseded
from include.failpoints import failpoint
from include.head import AlignmentDecision, EpochReport, HeadStatus, missing_reports
from include.lifecycle import StopMode
from include.manifest import Manifest
from include.outputs import check_output_path_outside_stores
from include.ownership import Holder, JobLease, JobOwner, claim
from include.runtime import EpochPlan, IterationJob, JobState
from include.store import STORE_MARKER, ObjectStore

log = logging.getLogger("iterations")


def owner_of(config: JobConfig, dag_id: str | None) -> JobOwner:
    """What a run of ``config`` claims the job for (``dag_id`` None: outside Airflow)."""
    return JobOwner(dag_id=dag_id, body=body_reference(config.body), input=config.input.to_dict(),
                    output_path=config.output_path)


def mark_store(store: ObjectStore) -> None:
    """Mark the store's root as a checkpoint store: no output is ever published inside one
    (include.outputs.check_not_in_store)."""
    if not store.exists(STORE_MARKER):
        store.put_if_absent(STORE_MARKER, json.dumps({"format": "iterations.store/1"}).encode())


def start_run(job: IterationJob, holder: Holder, *, dag_id: str | None = None, take_over: bool = False,
              lease_wait: float = 0.0, alive: Callable[[Holder], bool | None] | None = None,
              poll: float = 1.0, validate: bool = True) -> JobState:
    """Everything a run does before it writes: check the body, its parameters and the data
    checks; probe the store's conditional writes (once per process), mark the store, refuse an output path inside a checkpoint store, claim the job (OwnershipError if it is another's and not taken
    over), hold its lease (JobBusy naming the run that holds it, after ``lease_wait`` seconds),
    then the job's state at its latest checkpoint. ``validate`` False: a step that plans
    nothing (a commit: its attempt's plan was validated) skips loading the body's metadata."""
    if validate:
        job.check_expectations()  # the body, its parameters and the data checks, refused before anything is written
    job.store.check_conditional_writes()
    mark_store(job.store)
    check_output_path_outside_stores(job.config.output_path, **job.store_options)
    claim(job.store, job.config.job_id, owner_of(job.config, dag_id), take_over=take_over,
          claimed_by=holder.describe())
    job.lease = JobLease(job.store, job.config.job_id).acquire(holder, wait=lease_wait, alive=alive, poll=poll)
    return job.state()


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


def next_step(job: IterationJob, state: JobState, *, asked: StopMode | None = None) -> Step:
    """What a run does at an epoch boundary, after a restore or a commit; the same rule for the
    library runner and the DAG's tasks. A terminated job is done, a terminating one finishes;
    a running one honours a pending stop request (or ``asked``: the run's own ``stop``), once it
    has a checkpoint to drain from or suspend at, and otherwise runs its next epoch."""
    if state.status is HeadStatus.TERMINATED:
        return Step.DONE
    if state.status is HeadStatus.TERMINATING:
        return Step.FINISH
    stop = job.stop_requested(state) or (asked if state.latest is not None else None)
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
    if job.raise_if_superseded(epoch, attempt_id):
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


def attempt_failed(job: IterationJob, plan: EpochPlan, error: BaseException) -> BaseException:
    """Abort a failed attempt (its files deleted now, not left to GC; it is never adopted) and
    return the error to raise: for a damaged restored checkpoint, the refusal that names the
    way out; otherwise ``error`` itself."""
    job.abort(plan, reason=f"{type(error).__name__}: {error}"[:500])
    if isinstance(error, CheckpointCorrupted):
        return job.refuse_damaged(error)
    return error


def align_attempt(job: IterationJob, plan: EpochPlan,
                  reports: Sequence[EpochReport] | None = None) -> AlignmentDecision:
    """The global alignment of an attempt (over ``reports``, those its run returned, or else
    those in the store): its decision once every partition of every head has reported;
    AlignmentIncomplete naming the missing ones, or CheckpointSuperseded when another attempt
    committed the epoch meanwhile (its GC took this attempt's files: the reports will never all
    be there)."""
    try:
        return job.align(plan, reports)
    except AlignmentIncomplete:
        job.raise_if_superseded(plan.checkpoint_id, plan.attempt_id)
        raise


def commit_epoch(job: IterationJob, plan: EpochPlan, decision: AlignmentDecision | None = None,
                 reports: Sequence[EpochReport] | None = None) -> tuple[Manifest, dict[str, str]]:
    """Check, commit (single winner; a retry of a commit that landed gets its manifest), then
    publish the epoch's outputs: (the manifest as committed, output name -> where published)."""
    manifest = job.commit(plan, decision, reports)
    return manifest, job.notify_checkpoint_complete(manifest)


def epoch_line(decision: AlignmentDecision) -> str:
    """The progress line of a committed epoch: ``epoch 3 committed: feedback=4804 l1_delta=4.575e-07``."""
    metrics = " ".join(f"{k}={v:.3e}" for k, v in sorted(decision.metrics.items()))
    return (f"epoch {decision.epoch} committed: feedback={decision.feedback_count} {metrics}".rstrip()
            + (f" -> terminating ({decision.reason})" if decision.terminated else ""))


__all__ = ["attempt_failed", "attempt_ran", "commit_epoch", "end_run", "epoch_line", "mark_store", "owner_of",
           "resolve_attempt", "start_run"]
