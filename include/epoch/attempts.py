"""Planning an epoch or the finish: the attempts recorded for a checkpoint, adopting a
complete earlier one, aborting a failed one."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from include.checkpoints.head_state import EpochReport, HeadStatus, JobHeadState
from include.checkpoints.lifecycle import StopMode
from include.checkpoints.manifest import JobState, Manifest
from include.checks import check_columns, merge
from include.epoch.plan import EpochPlan, head_partitions
from include.errors import CheckpointError, CheckpointSuperseded
from include.process.failpoints import failpoint

if TYPE_CHECKING:
    from include.epoch.coordination import Coordination
    from include.epoch.job import IterationJob
    from include.epoch.restore import Restorer
    from include.publication.publish import Publisher

log = logging.getLogger("iterations")


class Attempts:
    """A job's attempts (``IterationJob.attempts``): planning an epoch or the finish from the
    state its ``restorer`` finds (once its ``publisher`` has settled that checkpoint's outputs,
    with the events its ``coordination`` triggers), recording the attempt, adopting a complete
    earlier one, and what each attempt reported or left missing."""

    def __init__(self, job: IterationJob, restorer: Restorer, coordination: Coordination, publisher: Publisher):
        self.job = job
        self.config = job.config
        self.log = job.log
        self.store = job.store
        self.restorer = restorer
        self.coordination = coordination
        self.publisher = publisher
        self._expectations_checked = False

    def check_expectations(self) -> None:
        """ConfigError, before any Spark work, if the body is unknown, its parameters bad, or the
        job's data checks name a column no checkpoint of its body can have
        (include.checks.check_columns; once per job object)."""
        meta = self.job.body_meta  # an unknown body or bad parameters: ConfigError
        settings = self.job.check_settings
        if self._expectations_checked or not settings.enabled:
            return
        check_columns(merge([*meta.get("expectations", []), *settings.expectations]), meta)
        self._expectations_checked = True

    def _base_plan(self, kind: str, checkpoint_id: int, latest: Manifest | None, batch_id: str | None) -> EpochPlan:
        job = self.job
        self.check_expectations()
        job.check_input()  # the pinned input, unchanged: refused before any Spark work
        meta = job.body_meta
        P = job.num_partitions
        source = latest if latest is not None else job.warm_start
        # a fork's first epoch restores its parent's checkpoint, computed by the parent's params
        forked = job.forked_from is not None and latest is not None \
            and latest.checkpoint_id == job.forked_from["checkpoint_id"]
        if source is not None:
            if source.body.get("name") != meta["name"]:
                raise CheckpointError(
                    f"job {source.job_id} was checkpointed with body {source.body.get('name')!r}; "
                    f"it cannot continue as {meta['name']!r}: use another job_id"
                )
            if source.body.get("params", {}) != meta["params"]:
                (log.info if forked else log.warning)(
                    "job %s: body parameters changed from %s to %s%s; epochs from %d use the new ones",
                    self.config.job_id, source.body.get("params"), meta["params"],
                    f" (a fork of job {job.forked_from['job_id']})" if forked else "", checkpoint_id)
            if sorted(source.head_state.heads) != sorted(meta["heads"]):
                raise CheckpointError(
                    f"checkpoint {source.checkpoint_id} of job {source.job_id} has heads "
                    f"{sorted(source.head_state.heads)}, body {meta['name']!r} has {sorted(meta['heads'])}"
                )
        counts = head_partitions(meta, P)
        head_state = JobHeadState.initial(list(meta["heads"]), counts) if latest is None \
            else latest.head_state.redistribute(counts)
        return EpochPlan(
            job_id=self.config.job_id,
            kind=kind,
            checkpoint_id=checkpoint_id,
            attempt_id="",
            batch_id=batch_id,
            parent_id=None if latest is None else latest.checkpoint_id,
            body=meta,
            input=job.input_spec().to_dict(),
            num_partitions=P,
            store=self.store.spec(),
            restore=None if source is None else {k: v.to_dict() for k, v in source.variables.items()},
            head_state=head_state.to_dict(),
            max_epochs=self.config.max_epochs,
            tolerance=self.config.tolerance,
            warm_start=None if latest is not None or source is None
            else {"job_id": source.job_id, "checkpoint_id": source.checkpoint_id},
            profile=job.check_settings.enabled,
            share_unchanged=kind == "epoch" and latest is not None
            and checkpoint_id % self.config.full_checkpoint_every != 0,
            # the checks' previous__<metric> compare epochs of one set of params: none for a fork's first
            parent_metrics={} if forked else dict(latest.decision.metrics) if latest is not None and latest.decision
            else None,
            forked_from=job.forked_from,
            pending_outputs=self._pending_outputs(latest),
        )

    def _pending_outputs(self, latest: Manifest | None) -> dict[str, dict[str, Any]] | None:
        """A reviewed job's per-epoch outputs still to publish once its publication is approved:
        the latest checkpoint's pending ones and its own (include.publication.publish); None for
        a job that publishes them as each epoch commits."""
        if not self.job.reviewed or latest is None:
            return None
        pending = dict(latest.pending_outputs)
        if latest.kind == "epoch" and latest.outputs:
            done = self.log.publications.of(latest.checkpoint_id)
            left = {k: v for k, v in latest.outputs.items() if k not in done}
            if left:
                pending[latest.checkpoint_id] = left
        return {str(cid): {k: v.to_dict() for k, v in sorted(outputs.items())}
                for cid, outputs in sorted(pending.items())} or None

    def plan_epoch(self, batch_id: str | None = None, state: JobState | None = None, *,
                   run: Mapping[str, Any] | None = None,
                   settle: bool | Callable[[JobState], Any] = True) -> EpochPlan:
        """Plan the next epoch from the latest committed checkpoint and record its attempt.

        A complete earlier attempt with the same plan (every partition reported; for example
        its process died after the Spark job, before the commit) is adopted, not recomputed.
        ``settle`` False: ``state`` is a checkpoint still being committed (the next epoch runs
        while it commits, include.runs.epoch_run): its outputs are published by that commit,
        not here. A callable: it settles ``state`` instead of the publisher (include.runs.epoch_run
        keeps what it published).
        """
        state = state or self.restorer.state()
        if state.status is not HeadStatus.RUNNING:
            raise CheckpointError(
                f"job {self.config.job_id} is {state.status.value} at checkpoint "
                f"{state.latest.checkpoint_id if state.latest else None}: no epoch left to plan"
            )
        if settle:
            (settle if callable(settle) else self.publisher.settle)(state)
        epoch = state.next_epoch
        failpoint("head.before_plan", job=self.config.job_id, epoch=epoch)
        base = self._base_plan("epoch", epoch, state.latest, batch_id)
        events, snapshots = self.coordination.trigger(state.latest, epoch)
        base = dataclasses.replace(base, events=events, coordinators=snapshots, run=dict(run) if run else None)
        plan = self._adoptable(base) or self._record(base)
        failpoint("head.after_plan", job=self.config.job_id, epoch=epoch)
        return plan

    def plan_finish(self, batch_id: str | None = None, state: JobState | None = None, *,
                    drain: bool = False, run: Mapping[str, Any] | None = None,
                    settle: Callable[[JobState], Any] | None = None) -> EpochPlan:
        """Plan the finish step: once an epoch decided termination, or, with ``drain``, now
        (the input ends at the latest checkpoint: a drain request). What a crash left of the
        latest checkpoint's outputs is published first (``settle(state)``, by default the
        publisher's)."""
        state = state or self.restorer.state()
        drainable = drain and state.status is HeadStatus.RUNNING and state.latest is not None
        if not drainable and (state.status is not HeadStatus.TERMINATING or state.latest is None):
            raise CheckpointError(
                f"job {self.config.job_id} is {state.status.value}"
                f"{'' if state.latest else ' with no checkpoint'}: finish runs once termination is "
                "decided (or a drain is requested after at least one epoch) and before the job is terminated"
            )
        (settle or self.publisher.settle)(state)
        failpoint("finish.before_plan", job=self.config.job_id)
        base = self._base_plan("final", state.latest.checkpoint_id + 1, state.latest, batch_id)
        # the coordinators stay as the latest checkpoint left them
        base = dataclasses.replace(base, coordinators=state.latest.coordinators,
                                   stop=StopMode.DRAIN.value if drainable else None, run=dict(run) if run else None)
        plan = self._adoptable(base) or self._record(base)
        failpoint("finish.after_plan", job=self.config.job_id)
        return plan

    def _record(self, base: EpochPlan) -> EpochPlan:
        attempt_id = f"a{base.checkpoint_id}-{uuid.uuid4().hex[:12]}"
        plan = EpochPlan.from_dict({**base.to_dict(), "attempt_id": attempt_id})
        self.log.start_attempt(plan.checkpoint_id, attempt_id, plan.to_dict())
        return plan

    def live_attempts(self, checkpoint_id: int) -> tuple[list[EpochPlan], list[EpochPlan]]:
        """The attempts recorded for a checkpoint and not aborted, newest first, split into
        (complete: every report / output is in, unfinished: an earlier try's, whose Spark job
        may still be running)."""
        complete, unfinished = [], []
        for attempt_id in reversed(self.log.attempt_ids(checkpoint_id)):
            if self.log.is_aborted(checkpoint_id, attempt_id):
                continue
            recorded = self.log.read_plan(checkpoint_id, attempt_id)
            if recorded is None:
                continue
            plan = EpochPlan.from_dict(recorded)
            (complete if self._complete(plan) else unfinished).append(plan)
        return complete, unfinished

    def _adoptable(self, base: EpochPlan) -> EpochPlan | None:
        complete, _ = self.live_attempts(base.checkpoint_id)
        for candidate in complete:
            if candidate.identity() == base.identity():
                log.info("epoch %d: adopting complete attempt %s (its reports are all in)",
                         candidate.epoch, candidate.attempt_id)
                return dataclasses.replace(candidate, adopted=True)
        return None

    def unfinished_attempts(self, checkpoint_id: int) -> list[EpochPlan]:
        """Attempts recorded for a checkpoint that are neither aborted nor complete: an earlier
        try's, whose Spark job may still be running."""
        return self.live_attempts(checkpoint_id)[1]

    def _complete(self, plan: EpochPlan) -> bool:
        if self.missing_outputs(plan):
            return False
        return plan.kind == "final" or not plan.aligner().missing(self.log.reports(plan.checkpoint_id, plan.attempt_id))

    def reports(self, plan: EpochPlan) -> list[EpochReport]:
        """What ``plan``'s partitions reported so far (its tail's records)."""
        return self.log.reports(plan.checkpoint_id, plan.attempt_id)

    def output_reports(self, plan: EpochPlan) -> list[EpochReport]:
        """What ``plan``'s attempt staged of its outputs, one report per output and partition."""
        prefix = f"{self.log.layout.attempt(plan.checkpoint_id, plan.attempt_id)}/_outputs/"
        return [EpochReport.from_json(self.store.get(o.key)) for o in self.store.list(prefix) if o.key.endswith(".json")]

    @staticmethod
    def output_names(plan: EpochPlan) -> list[str]:
        """The outputs ``plan`` writes: the body's per-epoch ones, or for the finish its final ones."""
        return list(plan.body.get("outputs" if plan.kind == "final" else "epoch_outputs", []))

    def missing_outputs(self, plan: EpochPlan, output_reports: Sequence[EpochReport] | None = None) -> list[str]:
        """``<output>/<partition>`` of every output partition ``plan``'s attempt has not staged."""
        names = self.output_names(plan)
        if not names:
            return []
        if output_reports is None:
            output_reports = self.output_reports(plan)
        got = {(r.head, r.partition) for r in output_reports}
        return [
            f"{name}/{p}"
            for name in names
            for p in range(plan.num_partitions)
            if (name, p) not in got
        ]

    def raise_if_superseded(self, checkpoint_id: int, attempt_id: str) -> bool:
        """CheckpointSuperseded if another attempt committed checkpoint ``checkpoint_id``; True
        if ``attempt_id`` itself did, False if it is not committed yet."""
        committed, winner = self.log.committed_attempt(checkpoint_id)
        if not committed:
            return False
        if winner == attempt_id:
            return True
        raise CheckpointSuperseded(
            f"checkpoint {checkpoint_id} of job {self.config.job_id} was committed by "
            f"{winner or 'an attempt whose checkpoint was since retired'}; attempt "
            f"{attempt_id} is superseded and its files are garbage"
        )

    def abort(self, plan: EpochPlan, reason: str = "") -> bool:
        """Abort ``plan``'s attempt (nothing of it is ever read); the record keeps who ran it."""
        return self.log.abort(plan.checkpoint_id, plan.attempt_id, reason, run=plan.run, batch_id=plan.batch_id)
