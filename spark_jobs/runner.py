"""Library API: run a batch of epochs of a body from plain Python on one warm Spark session,
with full checkpointing, resuming from the latest committed checkpoint when there is one.

    from include import JobConfig
    from spark_jobs.runner import IterationRunner

    result = IterationRunner(JobConfig(job_id="pr", body="pagerank", input="edges.csv",
                                       checkpoint_root=".local/store")).run()
    ranks = result.outputs["ranks"]  # a DataFrame read back from the final checkpoint

Each epoch goes through the same phases an Airflow DAG runs as separate tasks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from include.checkpoints import AlignmentDecision, HeadStatus, Manifest
from include.contract import JobConfig
from include.epoch import DEFAULT_CHECKS, Check, DataCheckFailed, EpochPlan
from include.errors import CheckpointError
from include.runs import (
    LEASE_TTL_S,
    EpochRun,
    Holder,
    JobLease,
    Step,
    check_borders,
    metrics_text,
    open_job,
    owner_of,
    retire,
    warm_up_checks,
)
from include.store import ObjectStore, open_store

log = logging.getLogger("iterations")


@dataclass
class RunResult:
    job_id: str
    status: HeadStatus
    checkpoint_id: int | None
    epochs_computed: list[int] = field(default_factory=list)
    epochs_adopted: list[int] = field(default_factory=list)
    restored_from: int | None = None  # checkpoint the run resumed from, None for a fresh start
    decisions: list[AlignmentDecision] = field(default_factory=list)
    published: dict[str, str] = field(default_factory=dict)
    final: Manifest | None = None
    outputs: dict[str, Any] = field(default_factory=dict)  # name -> DataFrame (when finished)
    suspended_at: int | None = None  # the savepoint's checkpoint id when the run was suspended

    def __repr__(self) -> str:
        """One line a person reads: the epochs as ranges, the outputs by name (the manifest and
        the DataFrames stay out of it)."""
        def span(epochs: list[int]) -> str:
            return "[]" if not epochs else f"[{epochs[0]}..{epochs[-1]}] ({len(epochs)})" \
                if epochs == list(range(epochs[0], epochs[-1] + 1)) and len(epochs) > 2 else str(epochs)

        last = self.decisions[-1] if self.decisions else None
        parts = [f"job_id={self.job_id!r}", f"status={self.status.value}", f"checkpoint_id={self.checkpoint_id}",
                 f"restored_from={self.restored_from}", f"epochs_computed={span(self.epochs_computed)}"]
        if self.epochs_adopted:
            parts.append(f"epochs_adopted={span(self.epochs_adopted)}")
        if last is not None and last.terminated:
            parts.append(f"terminated={last.reason!r}")
        if self.suspended_at is not None:
            parts.append(f"suspended_at={self.suspended_at}")
        if self.published:
            parts.append(f"published={sorted(self.published)}")
        if self.outputs:
            parts.append(f"outputs={sorted(self.outputs)}")
        return f"RunResult({', '.join(parts)})"


class IterationRunner:
    def __init__(
        self,
        config: JobConfig,
        spark=None,
        *,
        store: ObjectStore | None = None,
        store_options: Mapping[str, Any] | None = None,
        checks: Sequence[Check] = DEFAULT_CHECKS,
        warm_start: Manifest | None = None,
        coordinators: Mapping[str, Any] | None = None,
        attempt_retries: int = 0,
        wait_for_input: float | None = None,
        poll_interval: float = 1.0,
        handoff: bool = True,
        overlap_commits: bool = True,
        take_over: bool = False,
        lease_wait: float = 0.0,
        rewind_to: int | None = None,
        driver_tail_bytes: int | None = None,
        on_input_change: str = "refuse",
        reviewed: bool = False,
    ):
        """``warm_start``: a final checkpoint (of another job, same store) epoch 0 starts from.
        ``coordinators``: extra coordinators by name (``include.epoch.coordinators``).
        ``attempt_retries``: how many times an epoch attempt that failed in some partitions is
        run again in this process (its coordinators told which partitions failed, not reset).
        ``wait_for_input``: for a job whose input arrives while it runs (a split enumerator), wait
        up to this many seconds before each epoch for new input, polling every
        ``poll_interval``; the run stops (status RUNNING, resumable) when none came.
        ``handoff``: each epoch starts from the variables the previous one left in Spark (kept
        as its tail wrote them) instead of reading its checkpoint back, when that checkpoint is
        exactly what the previous attempt of this run wrote; a restart, or any other
        checkpoint, reads the store (``EpochExecutor``).
        ``overlap_commits``: each epoch's checks, commit and publication run in a thread of their
        own while the next epoch's Spark job runs from its state (``EpochRun.commit_behind``);
        the next epoch never commits before it, and is aborted if it does not commit. False:
        each epoch commits before the next is planned.
        ``take_over``: continue a job that belongs to another owner (a DAG, another body, input or
        output path: include.runs.ownership) and make it this run's. ``lease_wait``: how long to wait
        for another run of the job to end before failing with JobBusy naming it.
        ``rewind_to``: recompute the job from this epoch as a new generation of it, which starts
        from a copy of checkpoint ``rewind_to - 1`` and replaces the outputs when it ends
        (include.runs.generations; each runner given it starts a new one). The runner works on the
        job's newest generation: ``self.config.job_id`` names it.
        ``on_input_change``: what a run does when the input is no longer what the job's log
        pinned at its first plan (include.publication.pinned_inputs): "refuse" (InputChanged, naming the file and
        what changed) or "restart" (a new generation computes the job from epoch 0 on the new
        input, as ``rewind_to=0`` does, recorded with what changed).
        ``driver_tail_bytes``: on a classic session, an epoch's variable whose previous value
        took at most this many bytes in the store is collected and written by the driver
        instead of a shuffle and Spark's Python workers (``EpochExecutor``); None: 4 MiB, -1:
        never.
        ``reviewed``: nothing of the job is published before a person approves it: when it
        terminates, ``run`` publishes nothing; ``review()`` stages the outputs (versions no reader
        sees) and returns what a reviewer needs; ``approve(by)`` publishes what was staged, once;
        ``reject(by, why)`` deletes it (include.publication.review; docs/library.md)."""
        self.store_options = dict(store_options or {})
        store = store or open_store(config.checkpoint_root, **self.store_options)
        self.holder = Holder.this_process()

        def hold(lease_id: str) -> None:  # a rewind writes a new generation: inside its borders, under the lease
            check_borders(config, store, self.store_options)
            JobLease(store, lease_id).acquire(self.holder, wait=lease_wait)

        opened = open_job(config, store, owner=owner_of(config, None), hold=hold, rewind_to=rewind_to,
                          on_input_change=on_input_change, store_options=self.store_options, checks=checks,
                          warm_start=warm_start, coordinators=coordinators, reviewed=reviewed)
        self.lineage = opened.lineage
        self.job = opened.job
        self.config = opened.job.config
        self.attempt_retries = attempt_retries
        self.handoff = handoff
        self.overlap_commits = overlap_commits
        self.driver_tail_bytes = driver_tail_bytes
        self.wait_for_input = wait_for_input
        self.poll_interval = poll_interval
        self._spark = spark
        self._executor = None
        self.take_over = take_over
        self.lease_wait = lease_wait

    @property
    def spark(self):
        if self._spark is None:
            from spark_jobs.session import get_spark

            self._spark = get_spark(f"iterations-{self.config.job_id}", driver_memory=self._driver_memory())
        return self._spark

    def _driver_memory(self) -> str | None:
        """The heap the job's input asks of the driver this runner starts (include.contract.sizing)."""
        from include.contract import driver_memory

        memory, why = driver_memory(self.job.input_spec(), self.store_options)
        log.info("job %s: %s", self.config.job_id, why)
        return memory

    @property
    def executor(self):
        if self._executor is None:
            from spark_jobs.epoch import EpochExecutor

            self._executor = EpochExecutor(self.spark, self.store_options, handoff=self.handoff,
                                           driver_tail_bytes=self.driver_tail_bytes)
        return self._executor

    def retire(self, generation: str, *, dag_id: str | None = None) -> dict[str, int]:
        """Delete the log of an older generation of this job (``include.runs.generations.retire``):
        the objects and bytes deleted. The runner's own (newest) generation is never retired.
        ``dag_id``: the DAG that owns the job, for a job a DAG runs (the owner is checked)."""
        return retire(self.job.store, self.lineage.base, generation,
                                  owner_of(self.config, dag_id),
                                  self.holder)

    def _held(self, step):
        """``step(run)`` with the job's lease held by this process, released after."""
        run = EpochRun(self.job, run={"runner": "library", "host": self.holder.host, "pid": self.holder.pid})
        run.start(self.holder, take_over=self.take_over, lease_wait=self.lease_wait, validate=False)
        try:
            return step(run)
        finally:
            run.end()

    def _awaiting(self, run: EpochRun) -> Manifest:
        final = run.state.latest
        if not self.job.publisher.awaits_approval(final):
            raise CheckpointError(f"job {self.config.job_id} has no publication awaiting approval (latest checkpoint "
                                  f"{final.checkpoint_id if final else None}, {run.state.status.value}): it is "
                                  "approved once its final checkpoint is, for a job run with reviewed=True")
        return final

    def review(self) -> dict[str, Any]:
        """A reviewed job that terminated: its outputs staged (not published) and what a person
        reviews of them (include.publication.review: rows, schema, data checks, the difference
        from the published version); ``review_markdown(...)`` shows it as text."""
        from include.publication import stage_for_review

        return self._held(lambda run: stage_for_review(self.job, self._awaiting(run)))

    def approve(self, by: str | None = None) -> dict[str, str]:
        """Publish what ``review`` staged (the approval recorded once; each output exactly once
        across retries): output name -> where."""
        def approve(run: EpochRun) -> dict[str, str]:
            final = run.state.latest
            if self.job.log.reviews.approval(final.checkpoint_id if final else -1) is None:
                self.job.publisher.approve(self._awaiting(run), by)
            return run.conclude()

        return self._held(approve)

    def reject(self, by: str | None = None, why: str = "rejected") -> int:
        """Delete what ``review`` staged: nothing visible changed; ``review`` may stage again.
        How many files were deleted."""
        return self._held(lambda run: self.job.publisher.reject(self._awaiting(run), by, why))

    def verify_epoch(self, epoch: int, *, scratch_dir: str | None = None):
        """The determinism audit (docs/writing-a-body.md; include.epoch.restore.Restorer.verify_epoch)
        on this process's warm session: an ``include.epoch.restore.EpochVerification``."""
        def execute(plan, scratch) -> None:
            try:
                self.executor.run(plan, scratch)
            finally:
                self.executor.release()  # nothing of the scratch attempt is kept for a later epoch

        return self.job.restorer.verify_epoch(epoch, execute, scratch_dir=scratch_dir)

    def _execute(self, plan: EpochPlan) -> list:
        """Run the attempt on this process's warm session: the reports its tail wrote."""
        return self.executor.run(plan, self.job.store)

    def run(self, *, batch_id: str | None = None, max_epochs_in_batch: int | None = None) -> RunResult:
        """Run epochs until the job terminates (then finish and publish) or the batch's epoch
        budget is spent. Safe to call again after any failure: it resumes."""
        run = EpochRun(self.job, self._execute, batch_id,
                       run={"runner": "library", "host": self.holder.host, "pid": self.holder.pid})
        try:
            run.start(self.holder, take_over=self.take_over, lease_wait=self.lease_wait)
            self.job.lease.renew_every(LEASE_TTL_S / 3)  # other hosts cannot see this process live
            return self._run(run, max_epochs_in_batch)
        except BaseException:
            self.job.coordination.reset()  # a failure resets the coordinators to the checkpoint
            raise
        finally:
            run.end()

    def _await_input(self, state) -> bool:
        deadline = time.monotonic() + self.wait_for_input
        while not self.job.coordination.input_available(state):
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_interval)
        return True

    def _run(self, run: EpochRun, max_epochs_in_batch: int | None) -> RunResult:
        job, state = self.job, run.state
        warm_up_checks(job)  # Great Expectations' import overlaps with the first epoch's Spark job
        latest = state.latest.checkpoint_id if state.latest else None
        result = RunResult(self.config.job_id, state.status, latest, restored_from=latest)
        if state.latest is not None:
            log.info("job %s: restored checkpoint %d (%s, next epoch %d)", self.config.job_id,
                     state.latest.checkpoint_id, state.status.value, state.next_epoch)
            run.settle()  # a crash between a commit and its publication: publish now
        step = run.boundary()
        started: dict[int, float] = {}  # epoch -> when it was planned
        handed: dict[int, float] = {}  # epoch -> when the next could start (its commit behind it)

        def committed(done) -> None:
            decision = done.decision  # as committed (the end of the input may have ended the job)
            (result.epochs_adopted if done.plan.adopted else result.epochs_computed).append(done.plan.epoch)
            result.decisions.append(decision)
            log.info("job %s epoch %d: feedback=%d %s %.2fs %s%s", self.config.job_id, decision.epoch,
                     decision.feedback_count, metrics_text(decision),
                     handed.pop(done.plan.epoch, time.monotonic()) - started.pop(done.plan.epoch, time.monotonic()),
                     "adopted" if done.plan.adopted else "committed",
                     f" -> terminating ({decision.reason})" if decision.terminated else "")

        while step is Step.EPOCH:
            done = len(result.epochs_computed) + len(result.epochs_adopted) + (run.committing is not None)
            if max_epochs_in_batch is not None and done >= max_epochs_in_batch:
                break
            if self.wait_for_input is not None and not self._await_input(run.state):
                log.info("job %s: no new input for %.0fs: stopping before epoch %d (run again to go on)",
                         self.config.job_id, self.wait_for_input, run.state.next_epoch)
                break
            started[run.state.next_epoch] = time.monotonic()
            if self.overlap_commits:  # this epoch runs while the one before commits
                for outcome in run.epoch_behind(self.attempt_retries):
                    committed(outcome)
                if run.committing is not None:
                    handed[run.committing.epoch] = time.monotonic()
            else:
                committed(run.epoch(self.attempt_retries))
            step = run.boundary()
        run.land()
        for outcome in run.take_landed():
            committed(outcome)
        if step is Step.SUSPEND:
            result.suspended_at = run.suspend()
        elif step in (Step.FINISH, Step.DRAIN):
            if step is Step.DRAIN:
                log.info("job %s: drain requested: finishing at checkpoint %d", self.config.job_id,
                         run.state.latest.checkpoint_id)
            final = run.finish(drain=step is Step.DRAIN)
            log.info("job %s: final checkpoint %d committed%s", self.config.job_id, final.checkpoint_id,
                     " (drained)" if step is Step.DRAIN else "")
        run.conclude()
        state = run.state
        if state.status is HeadStatus.TERMINATED:
            result.final = state.latest
            result.outputs = self.read_outputs(state.latest)
            self.close()  # every operator is fully finished: release the cached data
        result.published = dict(run.published)
        result.status = HeadStatus.SUSPENDED if step is Step.SUSPEND else state.status
        result.checkpoint_id = state.latest.checkpoint_id if state.latest else None
        return result

    def read_outputs(self, manifest: Manifest) -> dict[str, Any]:
        from spark_jobs.storeio import read_dataset

        return {
            name: read_dataset(self.spark, self.job.store, ds, len(ds.partitions) or manifest.num_partitions)
            for name, ds in manifest.outputs.items()
        }

    def read_variables(self, checkpoint_id: int | None = None) -> dict[str, Any]:
        """The variables of a committed checkpoint (the latest by default), verified."""
        from spark_jobs.storeio import read_dataset

        manifest = self.job.log.load(checkpoint_id) if checkpoint_id is not None else self.job.log.latest()
        if manifest is None:
            return {}
        return {  # each in its own number of partitions (a head may have its own)
            name: read_dataset(self.spark, self.job.store, ds, len(ds.partitions) or manifest.num_partitions)
            for name, ds in manifest.variables.items()
        }

    def close(self) -> None:
        if self._executor is not None:
            self._executor.release()


__all__ = ["IterationRunner", "RunResult", "DataCheckFailed"]
