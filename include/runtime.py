"""The phases of an epoch, each callable on its own (from a separate process if need be):

    plan   -> restore the latest checkpoint, decide what runs next, record an attempt
    run    -> (Spark side, spark_jobs.epoch) compute the step, the tail writes log and reports
    align  -> all partitions of all heads reported? -> (epoch, terminated)
    check  -> validate what the attempt wrote before it can become state
    commit -> one create-if-absent write of the manifest
    finish -> final checkpoint with the outputs, then publication

Nothing here imports Spark or Airflow: operators and the library runner both call it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from include.body import resolve_body
from include.checkpoint import CheckpointLog
from include.checks import (
    CheckReport,
    CheckSettings,
    check_columns,
    merge,
    profile_row,
    runtime_expectations,
    schema_string,
    validate,
)
from include.config import InputSpec, JobConfig
from include.coordinator import (
    AlignmentCoordinator,
    Coordinator,
    CoordinatorHolder,
    Coordinators,
)
from include.errors import (
    CheckpointCorrupted,
    CheckpointError,
    CheckpointSuperseded,
    IterationError,
)
from include.failpoints import failpoint, trace
from include.head import (
    Aligner,
    AlignmentDecision,
    EpochReport,
    FileRef,
    HeadStatus,
    JobHeadState,
    TerminationCriteria,
)
from include.lifecycle import Lifecycle, OperatorState, StopMode
from include.manifest import DatasetRef, Manifest
from include.outputs import (
    check_not_in_store,
    publish_dataset,
    publish_delta,
    publish_increment,
)
from include.ownership import Lease
from include.store import ObjectStore, open_store

log = logging.getLogger("iterations")


class DataCheckFailed(IterationError):
    """A check between rounds refused what an attempt wrote; the attempt was aborted.
    ``report``: the data checks' report (include.checks.CheckReport), when they refused it."""

    def __init__(self, message: str, report: Any = None):
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class EpochPlan:
    """Everything the Spark side needs to run one attempt; stored as the attempt's _PLAN.json."""

    job_id: str
    kind: str  # "epoch" or "final"
    checkpoint_id: int  # the epoch number for epoch plans
    attempt_id: str
    batch_id: str | None
    parent_id: int | None
    body: dict[str, Any]  # IterationBody.describe() plus "params"
    input: dict[str, Any]
    num_partitions: int
    store: dict[str, Any]  # store spec, no secrets
    restore: dict[str, dict[str, Any]] | None  # parent's variables (DatasetRef dicts)
    head_state: dict[str, Any]  # parent's head state, redistributed to num_partitions
    max_epochs: int
    tolerance: float | None
    # the checkpoint epoch 0 warm-starts from ({"job_id", "checkpoint_id"}), in another job's log
    warm_start: dict[str, Any] | None = None
    # "drain" for a finish that a drain request started before the job terminated by itself
    stop: str | None = None
    # the epoch's inbox (coordinator -> its events, as dicts) and the coordinators' snapshots
    # taken when this checkpoint was triggered (include.coordinator)
    events: dict[str, list[dict[str, Any]]] | None = None
    coordinators: dict[str, Any] | None = None
    # the tail profiles what it writes for the data checks (off when the job's checks are)
    profile: bool = True
    # the parent checkpoint's convergence metrics (the data checks' ``previous__<metric>``)
    parent_metrics: dict[str, float] | None = None
    adopted: bool = False  # a complete earlier attempt is reused instead of running again

    @property
    def epoch(self) -> int:
        return self.checkpoint_id

    @property
    def heads(self) -> dict[str, list[str]]:
        return self.body["heads"]

    def identity(self) -> dict[str, Any]:
        """What must match for an earlier attempt to be adopted in place of a new one."""
        d = asdict(self)
        for k in ("attempt_id", "batch_id", "adopted", "store"):
            d.pop(k)
        return d

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("adopted")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], adopted: bool = False) -> "EpochPlan":
        return cls(**{**d, "adopted": adopted})

    def aligner(self) -> Aligner:
        criteria = TerminationCriteria(self.max_epochs, self.tolerance, self.body.get("convergence_metric"))
        return Aligner(
            {h: self.num_partitions for h in self.heads}, criteria, self.body.get("metric_aggregations")
        )

    def input_spec(self) -> InputSpec:
        return InputSpec.from_dict(self.input)

    def restore_datasets(self) -> dict[str, DatasetRef]:
        return {k: DatasetRef.from_dict(v) for k, v in (self.restore or {}).items()}


@dataclass(frozen=True)
class JobState:
    latest: Manifest | None
    status: HeadStatus
    next_epoch: int


Check = Callable[[EpochPlan, AlignmentDecision, Sequence[EpochReport]], None]


# Python checks besides the data checks (include.checks), for tests and embedders: a callable
# that raises DataCheckFailed refuses the attempt. None by default.
DEFAULT_CHECKS: tuple[Check, ...] = ()


class IterationJob:
    """One job's checkpoint log seen through the phases of an epoch."""

    def __init__(
        self,
        config: JobConfig,
        store: ObjectStore | None = None,
        *,
        checks: Sequence[Check] = DEFAULT_CHECKS,
        store_options: Mapping[str, Any] | None = None,
        warm_start: Manifest | None = None,
        coordinators: Mapping[str, Coordinator] | None = None,
        publication_family: Sequence[str] = (),
    ):
        """``warm_start``: the final checkpoint (of another job in the same store) whose
        variables epoch 0 starts from, through the body's ``warm_start``; used only while this
        job has no checkpoint of its own. ``coordinators``: extra coordinators by name, besides
        the body's and the built-in ``alignment``. ``publication_family``: other jobs (in the
        same store) whose published versions this job's publications replace and may delete (a
        scheduled batch's earlier generations)."""
        if warm_start is not None and warm_start.kind != "final":
            raise CheckpointError(
                f"a job warm-starts from a final checkpoint; checkpoint {warm_start.checkpoint_id} "
                f"of job {warm_start.job_id} is an {warm_start.kind} checkpoint"
            )
        self.config = config
        self.warm_start = warm_start
        self.store_options = dict(store_options or {})
        self.store = store or open_store(config.checkpoint_root, **self.store_options)
        self.log = CheckpointLog(self.store, config.job_id)
        self.checks = tuple(checks)
        self.check_settings = CheckSettings.parse(config.checks)
        self.last_check_report: CheckReport | None = None  # of the latest check() in this process
        self._body_meta: dict[str, Any] | None = None
        self._expectations_checked = False
        self._extra_coordinators = dict(coordinators or {})
        self._coords: Coordinators | None = None
        self._coords_valid = False  # False: restore from the store before the next use
        # this run's hold on the job (include.ownership; include.protocol.start_run): checked
        # before every commit and publication; None: not leased (a test driving phases by hand)
        self.lease: Lease | None = None
        self.publication_history = _History(self.log, [CheckpointLog(self.store, j) for j in publication_family])

    @property
    def body_meta(self) -> dict[str, Any]:
        if self._body_meta is None:
            body = resolve_body(self.config.body)
            meta = body.describe()
            if self.config.body != meta["name"]:
                meta["ref"] = self.config.body  # how to load it ("package.module:Class")
            meta["params"] = dict(self.config.body_params)
            body.parse_params(self.config.body_params)  # refuse bad parameters before any work
            self._body_meta = meta
        return self._body_meta

    # --- plan -----------------------------------------------------------------------------

    def state(self, *, verify: str = "sizes") -> JobState:
        """The job's state at its latest checkpoint, verified (``sizes`` by default: every object
        there with its size). A damaged checkpoint is refused (CheckpointCorrupted), or, when
        the job says ``on_damaged_checkpoint="previous"``, verified in full (SHA-256 of every
        byte) and replaced by the newest intact checkpoint (``fall_back``)."""
        fall_back = self.config.on_damaged_checkpoint == "previous" and verify != "none"
        try:
            latest = self.log.latest(verify="full" if fall_back else verify)
        except CheckpointCorrupted as e:
            if not fall_back:
                raise self.refuse_damaged(e) from e
            latest = self.fall_back(str(e))
        if latest is None:
            return JobState(None, HeadStatus.RUNNING, 0)
        return JobState(latest, latest.head_state.status, latest.epoch + 1)

    @staticmethod
    def refuse_damaged(error: Exception) -> CheckpointCorrupted:
        """The error for a damaged checkpoint found while restoring (by the restore's checks, or
        by an epoch's Spark tasks verifying each file's SHA-256 as they read it)."""
        return CheckpointCorrupted(
            f"{error}. Nothing was computed from it. To restart from the newest intact checkpoint "
            "before it (recomputing the epochs after that one), run the job with "
            "on_damaged_checkpoint='previous' (run_job --on-damaged-checkpoint previous; the DAG's "
            "on_damaged_checkpoint param)")

    def fall_back(self, reason: str) -> Manifest:
        """Rewind the job to its newest checkpoint that verifies in full (the user asked for it:
        ``on_damaged_checkpoint="previous"``); the checkpoints after it are rejected, their
        epochs computed again. CheckpointCorrupted if no kept checkpoint is intact."""
        latest = self.log.latest_id()
        for cid in reversed(self.log.checkpoint_ids()):
            if latest is not None and cid >= latest:
                continue
            try:
                manifest = self.log.load(cid, verify="full")
            except CheckpointCorrupted as e:
                log.warning("job %s: checkpoint %d is damaged too: %s", self.config.job_id, cid, e)
                continue
            rejected = self.log.retention.rewind(cid, reason)
            log.warning("job %s: falling back to checkpoint %d (epoch %d): %s; checkpoints %s rejected, "
                        "their epochs are computed again", self.config.job_id, cid, manifest.epoch, reason, rejected)
            self.reset_coordinators()
            return manifest
        raise CheckpointCorrupted(
            f"job {self.config.job_id}: {reason}; and no kept checkpoint before it is intact "
            f"(kept: {self.log.checkpoint_ids()}): nothing to fall back to")

    def check_expectations(self) -> None:
        """ConfigError, before any Spark work, if the body is unknown, its parameters bad, or the
        job's data checks name a column no checkpoint of its body can have
        (include.checks.check_columns; once per job object)."""
        meta = self.body_meta  # an unknown body or bad parameters: ConfigError
        if self._expectations_checked or not self.check_settings.enabled:
            return
        check_columns(merge([*meta.get("expectations", []), *self.check_settings.expectations]), meta)
        self._expectations_checked = True

    def _base_plan(self, kind: str, checkpoint_id: int, latest: Manifest | None, batch_id: str | None) -> EpochPlan:
        self.check_expectations()
        meta = self.body_meta
        P = self.config.num_partitions
        source = latest if latest is not None else self.warm_start
        if source is not None:
            if source.body.get("name") != meta["name"]:
                raise CheckpointError(
                    f"job {source.job_id} was checkpointed with body {source.body.get('name')!r}; "
                    f"it cannot continue as {meta['name']!r}: use another job_id"
                )
            if source.body.get("params", {}) != meta["params"]:
                log.warning("job %s: body parameters changed from %s to %s; epochs from %d use the new ones",
                            self.config.job_id, source.body.get("params"), meta["params"], checkpoint_id)
            if sorted(source.head_state.heads) != sorted(meta["heads"]):
                raise CheckpointError(
                    f"checkpoint {source.checkpoint_id} of job {source.job_id} has heads "
                    f"{sorted(source.head_state.heads)}, body {meta['name']!r} has {sorted(meta['heads'])}"
                )
        head_state = JobHeadState.initial(list(meta["heads"]), P) if latest is None else latest.head_state.redistribute(P)
        return EpochPlan(
            job_id=self.config.job_id,
            kind=kind,
            checkpoint_id=checkpoint_id,
            attempt_id="",
            batch_id=batch_id,
            parent_id=None if latest is None else latest.checkpoint_id,
            body=meta,
            input=self.config.input.to_dict(),
            num_partitions=P,
            store=self.store.spec(),
            restore=None if source is None else {k: v.to_dict() for k, v in source.variables.items()},
            head_state=head_state.to_dict(),
            max_epochs=self.config.max_epochs,
            tolerance=self.config.tolerance,
            warm_start=None if latest is not None or source is None
            else {"job_id": source.job_id, "checkpoint_id": source.checkpoint_id},
            profile=self.check_settings.enabled,
            parent_metrics=dict(latest.decision.metrics) if latest is not None and latest.decision else None,
        )

    def plan_epoch(self, batch_id: str | None = None, state: JobState | None = None) -> EpochPlan:
        """Plan the next epoch from the latest committed checkpoint and record its attempt.

        A complete earlier attempt with the same plan (every partition reported; for example
        its process died after the Spark job, before the commit) is adopted, not recomputed.
        """
        state = state or self.state()
        if state.status is not HeadStatus.RUNNING:
            raise CheckpointError(
                f"job {self.config.job_id} is {state.status.value} at checkpoint "
                f"{state.latest.checkpoint_id if state.latest else None}: no epoch left to plan"
            )
        self.settle(state)
        epoch = state.next_epoch
        failpoint("head.before_plan", job=self.config.job_id, epoch=epoch)
        base = self._base_plan("epoch", epoch, state.latest, batch_id)
        events, snapshots = self._trigger_coordinators(state.latest, epoch)
        base = dataclasses.replace(base, events=events, coordinators=snapshots)
        plan = self._adoptable(base) or self._record(base)
        failpoint("head.after_plan", job=self.config.job_id, epoch=epoch)
        return plan

    # --- coordinators -----------------------------------------------------------------------

    @property
    def coordinators(self) -> Coordinators:
        """The job's coordinators: the built-in ``alignment``, the body's, the extra ones."""
        if self._coords is None:
            meta = self.body_meta
            body = resolve_body(self.config.body)
            found = dict(body.coordinators(body.parse_params(self.config.body_params), self.config.input,
                                           self.store_options))
            found.update(self._extra_coordinators)
            if "alignment" in found:
                raise CheckpointError("coordinator name 'alignment' is reserved for the global alignment")
            P = self.config.num_partitions
            holders = {"alignment": CoordinatorHolder(
                "alignment", AlignmentCoordinator({h: P for h in meta["heads"]}), P)}
            holders.update({name: CoordinatorHolder(name, c, P) for name, c in sorted(found.items())})
            self._coords = Coordinators(holders)
        return self._coords

    def reset_coordinators(self) -> None:
        """Forget the coordinators' in-memory state: the next use restores it from the store
        (after a failure: held events dropped, coordinators reset to the checkpoint)."""
        self._coords_valid = False

    def _restored_coordinators(self, latest: Manifest | None) -> Coordinators:
        coords = self.coordinators
        at = latest.checkpoint_id if latest is not None else None
        if self._coords_valid and coords.at_checkpoint == at:
            return coords  # this process committed ``latest``: its released events are the inbox
        coords.restore(latest.coordinators if latest is not None else None, at,
                       latest.epoch + 1 if latest is not None else 0)
        if latest is not None and latest.kind == "epoch" and latest.decision is not None:
            # the partitions re-report what the checkpoint recorded (flink-ml's heads after a
            # restore): the alignment decision on that epoch is sent again
            d = latest.decision
            coords.holders["alignment"].coordinator.decide = lambda epoch: (d.terminated, d.reason or "")
            coords.reports(latest.epoch, [(p, {"head": h, "restored": True})
                                          for h, head in latest.head_state.heads.items()
                                          for p in range(len(head.partitions))])
        self._coords_valid = True
        return coords

    def _trigger_coordinators(self, latest: Manifest | None, epoch: int) -> tuple[dict, dict]:
        coords = self._restored_coordinators(latest)
        if coords.pending_trigger is not None and coords.pending_trigger[0] == epoch:
            _, inboxes, snapshots = coords.pending_trigger  # a retry in this process: same inbox
        else:
            inboxes, snapshots = coords.trigger(epoch)
        failpoint("coordinator.triggered", job=self.config.job_id, epoch=epoch)
        return {name: [e.to_dict() for e in evs] for name, evs in inboxes.items()}, dict(snapshots)

    def _committing_coordinators(self, plan: EpochPlan) -> Coordinators:
        """The coordinators as they were when ``plan``'s checkpoint was triggered, valves shut."""
        coords = self.coordinators
        pending = coords.pending_trigger
        if self._coords_valid and pending is not None and pending[0] == plan.epoch and pending[2] == plan.coordinators:
            return coords
        coords.restore(plan.coordinators, plan.parent_id, plan.epoch + 1)
        coords.shut()
        coords.pending_trigger = (plan.epoch, {}, plan.coordinators or {})
        self._coords_valid = True
        return coords

    def input_available(self, state: JobState | None = None) -> bool:
        """Has every coordinator that feeds input something for the next epoch (pending or new
        files, or the end of its input)? True for jobs without such coordinators."""
        state = state or self.state(verify="none")
        coords = self._restored_coordinators(state.latest)
        return all(h.coordinator.input_available() for h in coords.holders.values()
                   if hasattr(h.coordinator, "input_available"))

    def partition_failed(self, plan: EpochPlan, partition: int) -> None:
        """Partition ``partition``'s attempt of ``plan`` failed and this process goes on (a
        retry): drop its held events and tell the coordinators; nothing else is reset."""
        if self._coords_valid:
            dropped = self.coordinators.partition_failed(plan.epoch, partition)
            log.info("epoch %d: partition %d failed; held events dropped: %s", plan.epoch, partition,
                     {k: len(v) for k, v in dropped.items() if v} or "none")

    def plan_finish(self, batch_id: str | None = None, state: JobState | None = None, *,
                    drain: bool = False) -> EpochPlan:
        """Plan the finish step: once an epoch decided termination, or, with ``drain``, now
        (the input ends at the latest checkpoint: a drain request)."""
        state = state or self.state()
        drainable = drain and state.status is HeadStatus.RUNNING and state.latest is not None
        if not drainable and (state.status is not HeadStatus.TERMINATING or state.latest is None):
            raise CheckpointError(
                f"job {self.config.job_id} is {state.status.value}"
                f"{'' if state.latest else ' with no checkpoint'}: finish runs once termination is "
                "decided (or a drain is requested after at least one epoch) and before the job is terminated"
            )
        self.settle(state)
        failpoint("finish.before_plan", job=self.config.job_id)
        base = self._base_plan("final", state.latest.checkpoint_id + 1, state.latest, batch_id)
        # the coordinators stay as the latest checkpoint left them
        base = dataclasses.replace(base, coordinators=state.latest.coordinators,
                                   stop=StopMode.DRAIN.value if drainable else None)
        plan = self._adoptable(base) or self._record(base)
        failpoint("finish.after_plan", job=self.config.job_id)
        return plan

    def settle(self, state: JobState) -> dict[str, str]:
        """Nothing is planned on a checkpoint whose outputs are not published: publish what a
        crash between its commit and its publication left (a no-op when all are published)."""
        return self.notify_checkpoint_complete(state.latest) if state.latest is not None else {}

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
        if self._missing_outputs(plan):
            return False
        return plan.kind == "final" or not plan.aligner().missing(self.log.reports(plan.checkpoint_id, plan.attempt_id))

    # --- align, check, commit ---------------------------------------------------------------

    def reports(self, plan: EpochPlan) -> list[EpochReport]:
        return self.log.reports(plan.checkpoint_id, plan.attempt_id)

    def align(self, plan: EpochPlan, reports: Sequence[EpochReport] | None = None) -> AlignmentDecision:
        """Global alignment; AlignmentIncomplete while a partition has not reported."""
        reports = self.reports(plan) if reports is None else reports
        failpoint("align.before_decide", job=self.config.job_id, epoch=plan.epoch)
        return plan.aligner().align(plan.epoch, plan.attempt_id, list(reports))

    def check(self, plan: EpochPlan, decision: AlignmentDecision | None, reports: Sequence[EpochReport],
              output_reports: Sequence[EpochReport] | None = None) -> None:
        """Run the checks between rounds: the Python checks, then the data checks; on a
        blocking failure abort the attempt (nothing of it is ever read) and raise
        DataCheckFailed with a readable summary. The data checks' results are kept in the
        store either way (``last_check_report.locations``)."""
        try:
            for check in self.checks if plan.kind == "epoch" else ():
                check(plan, decision, reports)
            report = self.data_checks(plan, decision, reports, output_reports)
            if report is not None and not report.success:
                raise DataCheckFailed(report.summary(), report)
        except DataCheckFailed as e:
            self.log.abort(plan.checkpoint_id, plan.attempt_id, reason=str(e))
            raise

    def data_checks(self, plan: EpochPlan, decision: AlignmentDecision | None, reports: Sequence[EpochReport],
                    output_reports: Sequence[EpochReport] | None = None) -> CheckReport | None:
        """Validate the attempt's profile with its suite (include.checks); keep the results
        (JSON and Great Expectations' Data Docs page) under ``checks/<epoch>/<attempt>/``."""
        self.last_check_report = None
        if not self.check_settings.enabled:
            return None
        datasets: dict[str, list[EpochReport]] = {}
        if output_reports is None:
            output_reports = self._output_reports(plan)
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
            *self.check_settings.expectations,
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
        """Check, then commit checkpoint ``plan.epoch``; idempotent for the same attempt."""
        if plan.kind != "epoch":
            raise CheckpointError(f"commit() takes epoch plans; use commit_finish() for {plan.kind}")
        done = self._already_committed(plan)
        if done is not None:
            return done
        reports = list(self.reports(plan) if reports is None else reports)
        decision = decision or self.align(plan, reports)
        if any(s.get("input_finished") for s in (plan.coordinators or {}).values()) and not decision.terminated:
            decision = dataclasses.replace(decision, terminated=True, reason="end of input")
        output_reports = self._output_reports(plan)
        missing = self._missing_outputs(plan, output_reports)
        if missing:
            raise CheckpointError(f"epoch {plan.epoch} attempt {plan.attempt_id} of job {plan.job_id} "
                                  f"has not written its epoch outputs {missing}")
        try:
            self.check(plan, decision, reports, output_reports)
        except DataCheckFailed:
            self.reset_coordinators()  # the checkpoint is aborted: held events dropped
            raise
        coords = self._committing_coordinators(plan)
        coords.holders["alignment"].coordinator.decide = lambda epoch: (decision.terminated, decision.reason or "")
        coords.reports(plan.epoch, [(r.partition, {"head": r.head, "records": r.feedback_count, "metrics": r.metrics})
                                    for r in reports], plan.events or {})
        failpoint("commit.before_write", job=plan.job_id, epoch=plan.epoch)
        try:
            manifest = self._commit_manifest(
                plan,
                epoch=plan.epoch,
                head_state=JobHeadState.from_dict(plan.head_state).after(decision, reports),
                decision=decision,
                variables=_datasets(reports, plan.heads, plan.num_partitions),
                outputs=_datasets(output_reports, self._output_names(plan), plan.num_partitions),
                lifecycle=Lifecycle.at_epoch(plan.body, terminating=decision.terminated),
                coordinators=plan.coordinators or {},
            )
        except BaseException:
            self.reset_coordinators()
            raise
        failpoint("commit.after_write", job=plan.job_id, epoch=plan.epoch)
        coords.committed(manifest.checkpoint_id)  # the valves open: held events go to the next inbox
        failpoint("commit.after_release", job=plan.job_id, epoch=plan.epoch)
        return manifest

    def _commit_manifest(self, plan: EpochPlan, **content: Any) -> Manifest:
        if self.lease is not None:
            self.lease.check()  # fenced: another run took the job over
        # fenced too: a retry took over, or a rewind rejected its epoch (decided once, with abort)
        self.log.claim_commit(plan.checkpoint_id, plan.attempt_id)
        manifest = Manifest(
            job_id=plan.job_id,
            checkpoint_id=plan.checkpoint_id,
            kind=plan.kind,
            parent_id=plan.parent_id,
            attempt_id=plan.attempt_id,
            batch_id=plan.batch_id,
            num_partitions=plan.num_partitions,
            body={"name": plan.body["name"], "params": plan.body.get("params", {})},
            **content,
        )
        self.log.commit(manifest)
        self.log.retention.collect_garbage(self.config.retain_last)
        return manifest

    def _already_committed(self, plan: EpochPlan) -> Manifest | None:
        """A retry of a commit that landed (its reply was lost, its reports since collected)
        gets the committed manifest; an attempt that lost the race is told it was superseded."""
        if self.raise_if_superseded(plan.checkpoint_id, plan.attempt_id):
            return self.log.load(plan.checkpoint_id, verify="none")
        return None

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
        return self.log.abort(plan.checkpoint_id, plan.attempt_id, reason)

    # --- finish ---------------------------------------------------------------------------

    def _output_reports(self, plan: EpochPlan) -> list[EpochReport]:
        prefix = f"{self.log.layout.attempt(plan.checkpoint_id, plan.attempt_id)}/_outputs/"
        return [EpochReport.from_json(self.store.get(o.key)) for o in self.store.list(prefix) if o.key.endswith(".json")]

    @staticmethod
    def _output_names(plan: EpochPlan) -> list[str]:
        return list(plan.body.get("outputs" if plan.kind == "final" else "epoch_outputs", []))

    def _missing_outputs(self, plan: EpochPlan, output_reports: Sequence[EpochReport] | None = None) -> list[str]:
        names = self._output_names(plan)
        if not names:
            return []
        if output_reports is None:
            output_reports = self._output_reports(plan)
        got = {(r.head, r.partition) for r in output_reports}
        return [
            f"{name}/{p}"
            for name in names
            for p in range(plan.num_partitions)
            if (name, p) not in got
        ]

    def commit_finish(self, plan: EpochPlan) -> Manifest:
        """The final checkpoint: the last variables plus the outputs, status TERMINATED, every
        operator FULLY_FINISHED. Covers a drain too (the input ended at the latest checkpoint)."""
        if plan.kind != "final":
            raise CheckpointError(f"commit_finish() takes final plans, not {plan.kind}")
        done = self._already_committed(plan)
        if done is not None:
            return done
        output_reports = self._output_reports(plan)
        missing = self._missing_outputs(plan, output_reports)
        if missing:
            raise CheckpointError(
                f"finish attempt {plan.attempt_id} of job {plan.job_id} has not written outputs {missing}"
            )
        self.check(plan, None, [], output_reports)
        failpoint("finish.before_final_checkpoint", job=plan.job_id)
        stop = StopMode(plan.stop) if plan.stop else None
        final = self._commit_manifest(
            plan,
            epoch=plan.checkpoint_id - 1,
            head_state=JobHeadState.from_dict(plan.head_state).with_status(HeadStatus.TERMINATED),
            decision=None,
            variables=plan.restore_datasets(),
            outputs=_datasets(output_reports, plan.body.get("outputs", []), plan.num_partitions),
            lifecycle=Lifecycle.at_final(plan.body, stop),
            coordinators=plan.coordinators or {},
        )
        self.log.control.clear_stop_request()  # the job is terminated: a request it did not honour is moot
        if stop is StopMode.DRAIN:
            log.info("job %s drained: final checkpoint %d taken at epoch %d", plan.job_id,
                     final.checkpoint_id, final.epoch)
        failpoint("finish.after_final_checkpoint", job=plan.job_id)
        return final

    # --- publication: phase two of the outputs' two-phase commit ---------------------------

    def lifecycle(self, manifest: Manifest) -> Lifecycle:
        """The operators' states at ``manifest``: what it recorded, with the fully finished sinks
        that have published its outputs PUBLISHED. (A per-epoch sink keeps RUNNING in epoch
        checkpoints; each epoch's publication is in ``log.publications.of(checkpoint_id)``.)"""
        lc = manifest.lifecycle
        done = [f"sink:{s}" for s in self.log.publications.of(manifest.checkpoint_id)]
        done = [s for s in done if s in lc.states and lc.states[s] is OperatorState.FULLY_FINISHED]
        return lc.advance(done, OperatorState.PUBLISHED) if done else lc

    def notify_checkpoint_complete(self, manifest: Manifest) -> dict[str, str]:
        """Commit the outputs a committed checkpoint covers (FLIP-147's notifyCheckpointComplete
        for two-phase-commit sinks): an epoch checkpoint's per-epoch outputs are appended to their
        output, a final checkpoint's outputs replace theirs. Called after every commit and again on
        every restore (the latest checkpoint's outputs may be the ones a crash left unpublished).

        Exactly once per sink and checkpoint: a sink whose publication is recorded is skipped
        (it is fully finished); the others are published, each idempotently, then recorded. Once
        every sink of an epoch checkpoint is published its staged files are deleted, so no later
        checkpoint leaves staged data behind. Returns output name -> where it was published."""
        if not manifest.outputs or not self.config.output_path:
            return {}
        done = self.log.publications.of(manifest.checkpoint_id)
        if all(name in done for name in manifest.outputs):
            return {name: done[name]["location"] for name in sorted(manifest.outputs)}
        if self.lease is not None:
            self.lease.check()  # a run that lost the job publishes nothing
        out = open_store(self.config.output_path, **self.store_options)
        stamp = {"job_id": manifest.job_id, "checkpoint_id": manifest.checkpoint_id, "attempt_id": manifest.attempt_id}
        published = {}
        for name, ds in sorted(manifest.outputs.items()):
            if name in done:
                published[name] = done[name]["location"]
                continue
            failpoint("publish.before_output", job=manifest.job_id, checkpoint=manifest.checkpoint_id, output=name)
            if self.config.output_format == "delta":
                check_not_in_store(out, name)
                where = out.url(name)
                mode = "overwrite" if manifest.kind == "final" else "append"
                publish_delta(self.store, where, ds, stamp, store_options=self.store_options, mode=mode)
            elif manifest.kind == "final":
                publish_dataset(self.store, out, name, ds, stamp, history=self.publication_history)
                where = out.location(name)
            else:
                publish_increment(self.store, out, name, ds, stamp)
                where = out.location(name)
            failpoint("publish.after_output", job=manifest.job_id, checkpoint=manifest.checkpoint_id, output=name)
            trace("output.published", job=manifest.job_id, checkpoint=manifest.checkpoint_id, output=name,
                  kind=manifest.kind, rows=ds.rows)
            self.log.publications.record(manifest.checkpoint_id, name, {
                "location": where, "format": self.config.output_format, "rows": ds.rows,
                "attempt_id": manifest.attempt_id})
            published[name] = where
            log.info("job %s checkpoint %d: sink %s PUBLISHED to %s", manifest.job_id, manifest.checkpoint_id, name, where)
        if manifest.kind == "epoch":
            self._release_staged(manifest)
        return published

    def _release_staged(self, manifest: Manifest) -> None:
        """close() of an epoch's sinks: their staged files were published; delete them."""
        keys = [f.key for ds in manifest.outputs.values() for f in ds.files]
        if keys:
            self.store.delete(keys)

    def publish(self, manifest: Manifest) -> dict[str, str]:
        """Publish the outputs of the final checkpoint under ``output_path`` (see
        ``notify_checkpoint_complete``): each output replaced atomically, as Parquet files behind
        a manifest or as a Delta Lake table version (``output_format``); idempotent."""
        if manifest.kind != "final":
            raise CheckpointError(f"only a final checkpoint has outputs to publish, not checkpoint {manifest.checkpoint_id}")
        return self.notify_checkpoint_complete(manifest)

    # --- stop requests ----------------------------------------------------------------------

    def request_stop(self, mode: StopMode | str, *, requested_by: str = "") -> dict[str, Any]:
        """Ask the job, running or not, to stop at its next epoch boundary (see ``StopMode``)."""
        return self.log.control.request_stop(mode, requested_by=requested_by)

    def stop_requested(self, state: JobState) -> StopMode | None:
        """The pending stop request, honoured once the job has a checkpoint (before that, epoch 0
        runs first: there is nothing to drain from or suspend at)."""
        return self.log.control.stop_request() if state.latest is not None else None

    def suspend(self, state: JobState, reason: str = "suspend requested") -> int | None:
        """Suspend at the latest checkpoint: mark it a savepoint (kept by retention), consume
        the request. Nothing is flushed or published; running the job again resumes from it.
        Returns the savepoint's checkpoint id (None when no epoch has committed yet)."""
        if state.latest is not None:
            self.log.control.record_savepoint(state.latest.checkpoint_id, reason)
        self.log.control.clear_stop_request()
        log.info("job %s suspended at checkpoint %s (epoch %d is next when it resumes)", self.config.job_id,
                 state.latest.checkpoint_id if state.latest else None, state.next_epoch)
        return state.latest.checkpoint_id if state.latest else None

    def suspended_at(self, state: JobState) -> int | None:
        """The latest checkpoint, if the job was suspended there and has not moved on since."""
        if state.latest is None or state.status is not HeadStatus.RUNNING:
            return None
        cid = state.latest.checkpoint_id
        return cid if self.store.exists(self.log.layout.savepoint(cid)) else None


class _History:
    """The job's record of the versions it wrote into its outputs (include.outputs), read over
    the job and the jobs it replaces; retired in the log that recorded them."""

    def __init__(self, own: CheckpointLog, family: Sequence[CheckpointLog] = ()):
        self.own = own
        self.family = list(family)

    def wrote(self, location: str, name: str, version: str, keys: Sequence[str]) -> None:
        self.own.publications.record_written(location, name, version, list(keys))

    def written(self, location: str, name: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for log_ in [*self.family, self.own]:
            out.update(log_.publications.written(location, name))
        return out

    def retired(self, location: str, name: str, version: str) -> None:
        for log_ in [self.own, *self.family]:
            log_.publications.mark_retired(location, name, version)


def _datasets(reports: Sequence[EpochReport], names: Sequence[str], num_partitions: int) -> dict[str, DatasetRef]:
    out = {}
    for name in names:
        mine = {r.partition: r for r in reports if r.head == name}
        schema = next((r.schema for r in mine.values() if r.schema), "")
        out[name] = DatasetRef(schema, tuple(tuple(mine[p].files) if p in mine else () for p in range(num_partitions)))
    return out


__all__ = [
    "Check",
    "DataCheckFailed",
    "DEFAULT_CHECKS",
    "EpochPlan",
    "FileRef",
    "IterationJob",
    "JobState",
]
