"""Alignment, the checks between rounds, and the single-winner commit of an epoch's or the
final checkpoint."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from include.checkpoints.head_state import AlignmentDecision, EpochReport, HeadStatus, JobHeadState
from include.checkpoints.lifecycle import Lifecycle, StopMode
from include.checkpoints.manifest import DatasetRef, Manifest
from include.checks import CheckReport, merge, profile_row, runtime_expectations, schema_string, validate
from include.epoch.coordinators import end_of_input
from include.epoch.plan import DEFAULT_CHECKS, Check, EpochPlan
from include.errors import CheckpointError, ForkRefused, InputChanged, IterationError
from include.process.failpoints import failpoint

if TYPE_CHECKING:
    from include.epoch.attempts import Attempts
    from include.epoch.coordination import Coordination
    from include.epoch.coordinators import Coordinators
    from include.epoch.job import IterationJob

log = logging.getLogger("iterations")


class DataCheckFailed(IterationError):
    """A check between rounds refused what an attempt wrote; the attempt was aborted.
    ``report``: the data checks' report (include.checks.CheckReport), when they refused it."""

    def __init__(self, message: str, report: Any = None):
        super().__init__(message)
        self.report = report


@dataclasses.dataclass
class PendingCommit:
    """An epoch's commit between ``Committer.prepare`` and ``Committer.complete``: the
    checkpoint the attempt's reports make (``manifest``, its history still empty), not yet
    checked or written; ``committed``: the checkpoint as it landed, when a retry of a commit
    found it committed already."""

    plan: EpochPlan
    decision: AlignmentDecision
    reports: list[EpochReport]
    output_reports: list[EpochReport]
    manifest: Manifest
    started: float
    committed: Manifest | None = None
    coordinators: Coordinators | None = None  # as prepared: the valves ``release`` opens
    released: bool = False  # ``release`` opened them
    written: bool = False  # ``complete`` wrote the manifest


class Committer:
    """A job's alignment, checks between rounds and commits (``IterationJob.committer``): an
    attempt its ``attempts`` recorded becomes checkpoint state only here, in one
    create-if-absent write, after the Python ``checks`` and the job's data checks; its
    ``coordination`` releases the epoch's held events once the checkpoint is committed."""

    def __init__(self, job: IterationJob, attempts: Attempts, coordination: Coordination,
                 checks: Sequence[Check] = DEFAULT_CHECKS):
        self.job = job
        self.config = job.config
        self.log = job.log
        self.store = job.store
        self.attempts = attempts
        self.coordination = coordination
        self.checks = tuple(checks)
        self.last_check_report: CheckReport | None = None  # of the latest check() in this process

    def align(self, plan: EpochPlan, reports: Sequence[EpochReport] | None = None) -> AlignmentDecision:
        """Global alignment; AlignmentIncomplete while a partition has not reported."""
        reports = self.attempts.reports(plan) if reports is None else reports
        failpoint("align.before_decide", job=self.config.job_id, epoch=plan.epoch)
        return plan.aligner().align(plan.epoch, plan.attempt_id, list(reports))

    def check(self, plan: EpochPlan, decision: AlignmentDecision | None, reports: Sequence[EpochReport],
              output_reports: Sequence[EpochReport] | None = None) -> None:
        """Run the checks between rounds: the Python checks, then the data checks; on a
        blocking failure abort the attempt (nothing of it is ever read) and raise
        DataCheckFailed with a readable summary. The data checks' results are kept in the
        store either way (``last_check_report.locations``)."""
        try:
            self.job.check_input()  # what the attempt read is still the pinned input (InputChanged otherwise)
            for check in self.checks if plan.kind == "epoch" else ():
                check(plan, decision, reports)
            report = self.data_checks(plan, decision, reports, output_reports)
            if report is not None and not report.success:
                raise DataCheckFailed(report.summary(), report)
        except (DataCheckFailed, InputChanged) as e:
            self.attempts.abort(plan, reason=str(e)[:2000])
            raise

    def data_checks(self, plan: EpochPlan, decision: AlignmentDecision | None, reports: Sequence[EpochReport],
                    output_reports: Sequence[EpochReport] | None = None) -> CheckReport | None:
        """Validate the attempt's profile with its suite (include.checks); keep the results
        (JSON and Great Expectations' Data Docs page) under ``checks/<epoch>/<attempt>/``."""
        self.last_check_report = None
        if not self.job.check_settings.enabled:
            return None
        datasets: dict[str, list[EpochReport]] = {}
        if output_reports is None:
            output_reports = self.attempts.output_reports(plan)
        for r in list(reports) + list(output_reports):
            datasets.setdefault(r.head, []).append(r)
        profile = profile_row(epoch=plan.checkpoint_id, kind=plan.kind, decision=decision, datasets=datasets)
        parameters: dict[str, Any] = {}
        if plan.kind == "epoch" and plan.parent_id is not None:
            metrics = plan.parent_metrics
            if metrics is None:  # a plan recorded before plans carried them
                parent = self.log.load(plan.parent_id, verify="none")
                metrics = parent.decision.metrics if parent.decision is not None else {}
            parameters = {f"previous__{k}": v for k, v in metrics.items()}
        restored = {h: schema_string(ds.schema) for h, ds in plan.restore_datasets().items()} \
            if plan.kind == "epoch" else {}
        specs = merge([
            *runtime_expectations(plan.heads if plan.kind == "epoch" else {},
                                  decision.metrics if decision is not None else (), restored),
            *plan.body.get("expectations", []),
            *self.job.check_settings.expectations,
        ])
        report, gx_json, html = validate(specs, profile, parameters, job_id=plan.job_id,
                                         checkpoint_id=plan.checkpoint_id, attempt_id=plan.attempt_id, kind=plan.kind)
        where = self.log.layout.checks(plan.checkpoint_id, plan.attempt_id)
        self.store.put(f"{where}/validation.json", json.dumps(
            {"report": report.to_dict(), "great_expectations": gx_json}, indent=1, sort_keys=True).encode())
        report.locations["json"] = self.store.url(f"{where}/validation.json")
        if html is not None:
            self.store.put(f"{where}/data_docs.html", html.encode())
            report.locations["html"] = self.store.url(f"{where}/data_docs.html")
        self.last_check_report = report
        if report.blocking:
            log.error("%s", report.summary())
        elif report.warnings:
            log.warning("%s", report.summary())
        else:
            log.info("%s", report.headline())
        return report

    def commit(
        self,
        plan: EpochPlan,
        decision: AlignmentDecision | None = None,
        reports: Sequence[EpochReport] | None = None,
    ) -> Manifest:
        """Check, then commit checkpoint ``plan.epoch``; idempotent for the same attempt
        (``prepare`` then ``complete``, the held events released once it committed)."""
        pending = self.prepare(plan, decision, reports)
        if pending.committed is not None:
            return pending.committed
        try:
            manifest = self.complete(pending)
        except BaseException:
            self.coordination.reset()  # the checkpoint is aborted: held events dropped
            raise
        self.release(pending)
        return manifest

    def prepare(
        self,
        plan: EpochPlan,
        decision: AlignmentDecision | None = None,
        reports: Sequence[EpochReport] | None = None,
    ) -> PendingCommit:
        """The first half of ``commit``: what checkpoint ``plan.epoch`` will be once committed
        (``PendingCommit.manifest``, from which the next epoch may already be planned and run),
        nothing written. Refuses an attempt that has not written its epoch outputs or whose
        reports name foreign files; a retry of a commit that landed gets ``committed``."""
        if plan.kind != "epoch":
            raise CheckpointError(f"commit() takes epoch plans; use commit_finish() for {plan.kind}")
        done = self._already_committed(plan)
        if done is not None:
            return PendingCommit(plan, done.decision, [], [], done, time.time(), committed=done)
        started = time.time()
        reports = list(self.attempts.reports(plan) if reports is None else reports)
        decision = decision or self.align(plan, reports)
        if end_of_input(plan.coordinators) and not decision.terminated:
            decision = dataclasses.replace(decision, terminated=True, reason="end of input")
        output_reports = self.attempts.output_reports(plan)
        missing = self.attempts.missing_outputs(plan, output_reports)
        if missing:
            raise CheckpointError(f"epoch {plan.epoch} attempt {plan.attempt_id} of job {plan.job_id} "
                                  f"has not written its epoch outputs {missing}")
        self.refuse_foreign_files(plan, reports, output_reports)
        if plan.first_of_fork:
            self.refuse_fork_schemas(plan, reports)
        coords = self.coordination.committing(plan)
        coords.holders["alignment"].coordinator.decide_with(decision)
        coords.reports(plan.epoch, [(r.partition, {"head": r.head, "records": r.feedback_count, "metrics": r.metrics})
                                    for r in reports], plan.events or {})
        manifest = self._manifest(
            plan,
            epoch=plan.epoch,
            head_state=JobHeadState.from_dict(plan.head_state).after(decision, reports),
            decision=decision,
            variables=_datasets(reports, plan.heads, plan.head_partitions()),
            outputs=_datasets(output_reports, self.attempts.output_names(plan), plan.num_partitions),
            lifecycle=Lifecycle.at_epoch(plan.body, terminating=decision.terminated),
            coordinators=plan.coordinators or {},
        )
        return PendingCommit(plan, decision, reports, output_reports, manifest, started, coordinators=coords)

    def complete(self, pending: PendingCommit) -> Manifest:
        """The second half of ``commit``: the checks between rounds (a refusal aborts the
        attempt: DataCheckFailed or InputChanged), then the single-winner write of the manifest
        ``prepare`` made, with its history, and garbage collection. Touches no coordinator: it
        may run in a thread of its own while the next epoch's attempt runs (``release`` and, on
        a failure, ``Coordination.reset`` are the caller's)."""
        if pending.committed is not None:
            return pending.committed
        plan = pending.plan
        checking = time.monotonic()
        self.check(plan, pending.decision, pending.reports, pending.output_reports)
        checks = time.monotonic() - checking
        failpoint("commit.before_write", job=plan.job_id, epoch=plan.epoch)
        manifest = dataclasses.replace(pending.manifest, history=self._history(plan, pending.started, checks))
        self._commit_manifest(manifest)
        failpoint("commit.after_write", job=plan.job_id, epoch=plan.epoch)
        pending.written = True
        if pending.released:  # released before (a commit behind the next epoch): both are done now
            failpoint("commit.after_release", job=plan.job_id, epoch=plan.epoch)
        return manifest

    def release(self, pending: PendingCommit) -> None:
        """Open the coordinators' valves: the events held while ``pending``'s checkpoint was
        taken go to the next epoch's inbox. After ``complete``, or before it when the next
        epoch is planned while this one commits (its attempt is aborted if the commit fails)."""
        if pending.committed is not None or pending.coordinators is None:
            return
        pending.coordinators.committed(pending.plan.checkpoint_id)
        pending.released = True
        if pending.written:  # the failure point after the commit and the release, whichever came last
            failpoint("commit.after_release", job=pending.plan.job_id, epoch=pending.plan.epoch)

    def refuse_foreign_files(self, plan: EpochPlan, reports: Sequence[EpochReport],
                             output_reports: Sequence[EpochReport]) -> None:
        """Abort the attempt and raise CheckpointError when a report names a file the attempt
        did not write under its own directory, other than the restored checkpoint's file of the
        same partition of the same variable (``EpochPlan.shareable``): a checkpoint never names
        what another attempt, job or epoch owns, so retention's rule (what a kept manifest
        references stays) is all that keeps a shared file."""
        layout = self.log.layout
        own = layout.attempt(plan.checkpoint_id, plan.attempt_id) + "/"
        shareable = plan.shareable()
        foreign = [f"{r.head} partition {r.partition}: {f.key}"
                   for r in reports for f in r.files
                   if not layout.holds(f.key, own) and shareable.get(r.head, {}).get(r.partition) != f]
        foreign += [f"output {r.head} partition {r.partition}: {f.key}" for r in output_reports for f in r.files
                    if not layout.holds(f.key, own)]
        if foreign:
            why = (f"its reports name files it did not write and the checkpoint it restores does not hold for "
                   f"that partition: {'; '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}")
            self.attempts.abort(plan, reason=why[:2000])
            raise CheckpointError(f"{plan.kind} {plan.checkpoint_id} attempt {plan.attempt_id} of job "
                                  f"{plan.job_id} is not committed: {why}")

    def refuse_fork_schemas(self, plan: EpochPlan, reports: Sequence[EpochReport]) -> None:
        """A fork's first epoch (``EpochPlan.first_of_fork``): abort the attempt and raise
        ForkRefused when the body gives a variable another schema than the parent's checkpoint
        has, naming the variable and both schemas; whether the data checks are on or not."""
        restored = {h: schema_string(ds.schema) for h, ds in plan.restore_datasets().items()}
        differ = []
        for head in sorted(plan.heads):
            new = schema_string(next((r.schema for r in reports if r.head == head and r.schema), ""))
            if head in restored and new and new != restored[head]:
                differ.append(f"variable {head}: ({restored[head]}) in the parent, ({new}) in the fork")
        if differ:
            parent = plan.forked_from or {}
            why = (f"a fork of job {parent.get('job_id')} at epoch {parent.get('epoch')} keeps its parent's variables' "
                   f"schemas, and this body changes them: {'; '.join(differ)}")
            self.attempts.abort(plan, reason=why[:2000])
            raise ForkRefused(f"epoch {plan.epoch} of job {plan.job_id} is not committed: {why}")

    @staticmethod
    def _manifest(plan: EpochPlan, **content: Any) -> Manifest:
        return Manifest(
            job_id=plan.job_id,
            checkpoint_id=plan.checkpoint_id,
            kind=plan.kind,
            parent_id=plan.parent_id,
            attempt_id=plan.attempt_id,
            batch_id=plan.batch_id,
            num_partitions=plan.num_partitions,
            body={"name": plan.body["name"], "params": plan.body.get("params", {})},
            pending_outputs=plan.pending_datasets(),
            **content,
        )

    def _commit_manifest(self, manifest: Manifest) -> Manifest:
        if self.job.lease is not None:
            self.job.lease.check()  # fenced: another run took the job over
        # fenced too: a retry took over, or a rewind rejected its epoch (decided once, with abort)
        self.log.claim_commit(manifest.checkpoint_id, manifest.attempt_id)
        self.log.commit(manifest)
        self.log.retention.collect_garbage(self.config.retain_last, retain_batches=self.config.retain_batches,
                                           retain_history=self.config.retain_history)
        return manifest

    def _history(self, plan: EpochPlan, started: float | None = None, checks: float | None = None,
                 ) -> dict[str, Any]:
        """What the checkpoint keeps of how its epoch was computed, for the job's history
        (include.runs.overview), which outlives the attempts' own records (garbage collection
        deletes them): who ran the committing attempt (``run``), how long each phase took
        (``phases``, seconds: restore, step and tail, alignment, checks, commit; those the
        attempt's Spark job did not record are missing), and every other attempt of the epoch
        with its fate (``attempts``: aborted with a reason, or ended without one)."""
        epoch = plan.checkpoint_id
        phases: dict[str, float] = {}
        ran = self.log.read_phases(epoch, plan.attempt_id)
        if started is not None:
            if {"input", "restore", "step"} <= set(ran):
                phases["restore"] = ran["input"] + ran["restore"]
                phases["step"] = ran["step"]
                if "ended_at" in ran:
                    phases["alignment"] = max(0.0, started - ran["ended_at"])
            phases["checks"] = checks or 0.0
            phases["commit"] = max(0.0, time.time() - started - phases["checks"])
        fates = self.log.fates(epoch)
        others = []
        for attempt_id in sorted((set(self.log.attempt_ids(epoch)) | set(fates)) - {plan.attempt_id}):
            fate = fates.get(attempt_id) or {}
            run, batch = fate.get("run"), fate.get("batch_id")
            if run is None or batch is None:
                recorded = self.log.read_plan(epoch, attempt_id) or {}
                run, batch = run or recorded.get("run"), batch or recorded.get("batch_id")
            aborted = fate.get("claim") != "commit" and bool(fate)
            others.append({"attempt_id": attempt_id, "reason": str(fate.get("reason") or "") if aborted else None,
                           "at": fate.get("at"), "run": run if isinstance(run, dict) else None,
                           "batch_id": batch if isinstance(batch, str) else None})
        return {"run": plan.run, "phases": {k: round(v, 3) for k, v in phases.items()}, "attempts": others}

    def _already_committed(self, plan: EpochPlan) -> Manifest | None:
        """A retry of a commit that landed (its reply was lost, its reports since collected)
        gets the committed manifest; an attempt that lost the race is told it was superseded."""
        if self.attempts.raise_if_superseded(plan.checkpoint_id, plan.attempt_id):
            return self.log.load(plan.checkpoint_id, verify="none")
        return None

    def commit_finish(self, plan: EpochPlan) -> Manifest:
        """The final checkpoint: the last variables plus the outputs, status TERMINATED, every
        operator FULLY_FINISHED. Covers a drain too (the input ended at the latest checkpoint)."""
        if plan.kind != "final":
            raise CheckpointError(f"commit_finish() takes final plans, not {plan.kind}")
        done = self._already_committed(plan)
        if done is not None:
            return done
        output_reports = self.attempts.output_reports(plan)
        missing = self.attempts.missing_outputs(plan, output_reports)
        if missing:
            raise CheckpointError(
                f"finish attempt {plan.attempt_id} of job {plan.job_id} has not written outputs {missing}"
            )
        self.refuse_foreign_files(plan, [], output_reports)
        self.check(plan, None, [], output_reports)
        failpoint("finish.before_final_checkpoint", job=plan.job_id)
        stop = StopMode(plan.stop) if plan.stop else None
        final = self._commit_manifest(self._manifest(
            plan,
            epoch=plan.checkpoint_id - 1,
            head_state=JobHeadState.from_dict(plan.head_state).with_status(HeadStatus.TERMINATED),
            decision=None,
            variables=plan.restore_datasets(),
            outputs=_datasets(output_reports, plan.body.get("outputs", []), plan.num_partitions),
            lifecycle=Lifecycle.at_final(plan.body, stop),
            coordinators=plan.coordinators or {},
            history=self._history(plan),
        ))
        self.log.control.clear_stop_request()  # the job is terminated: a request it did not honour is moot
        if stop is StopMode.DRAIN:
            log.info("job %s drained: final checkpoint %d taken at epoch %d", plan.job_id,
                     final.checkpoint_id, final.epoch)
        failpoint("finish.after_final_checkpoint", job=plan.job_id)
        return final


def _datasets(reports: Sequence[EpochReport], names: Sequence[str],
              num_partitions: int | Mapping[str, int]) -> dict[str, DatasetRef]:
    """The datasets ``names`` as the reports wrote them; ``num_partitions``: one count for every
    dataset, or each one's (a head's own)."""
    out = {}
    for name in names:
        count = num_partitions[name] if isinstance(num_partitions, Mapping) else num_partitions
        mine = {r.partition: r for r in reports if r.head == name}
        schema = next((r.schema for r in mine.values() if r.schema), "")
        out[name] = DatasetRef(schema, tuple(tuple(mine[p].files) if p in mine else () for p in range(count)))
    return out
