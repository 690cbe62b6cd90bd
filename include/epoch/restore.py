"""A job's state at its latest checkpoint: restore, verification, the fall-back to an intact
checkpoint, and the determinism audit's scratch copy (``verification``)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import EpochReport, HeadStatus
from include.checkpoints.layout import JobLayout
from include.checkpoints.manifest import JobState, Manifest
from include.contract.body import resolve_body
from include.epoch.plan import EpochPlan
from include.errors import CheckpointCorrupted, CheckpointError, ConfigError, ObjectNotFound
from include.store import LocalStore
from include.store.transfer import copy_verified

if TYPE_CHECKING:
    from include.epoch.coordination import Coordination
    from include.epoch.job import IterationJob

log = logging.getLogger("iterations")


class Restorer:
    """A job's state at its latest checkpoint (``IterationJob.restorer``): restored and
    verified, or refused, or, when the job asks for it, rewound to an intact checkpoint (its
    ``coordination`` then forgets what it held); and the determinism audit, which recomputes a
    committed epoch from the one before."""

    def __init__(self, job: IterationJob, coordination: Coordination):
        self.job = job
        self.config = job.config
        self.log = job.log
        self.store = job.store
        self.coordination = coordination

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
            self.coordination.reset()
            return manifest
        raise CheckpointCorrupted(
            f"job {self.config.job_id}: {reason}; and no kept checkpoint before it is intact "
            f"(kept: {self.log.checkpoint_ids()}): nothing to fall back to")

    # --- the determinism audit (DESIGN invariant 9) ------------------------------------------

    def verification(self, epoch: int, scratch, **job_options: Any) -> tuple[Any, EpochPlan, Manifest]:
        """A scratch job that recomputes epoch ``epoch`` from checkpoint ``epoch - 1`` in
        ``scratch`` (an empty store of its own): (that job, its attempt's plan, the committed
        checkpoint ``epoch`` to compare with). Into the scratch store go copies of checkpoint
        ``epoch - 1``, its objects (each verified against its SHA-256 as it is read) and the
        log's input pin, under the same keys; this job's store is only read. The scratch job's
        attempt can never commit here: it is in another store, and nothing of it is copied back.
        ConfigError for an epoch that has no committed epoch checkpoint (or whose parent is gone)."""
        from include.epoch.job import IterationJob
        try:
            committed = self.log.load(epoch, verify="full")
        except CheckpointError as e:
            raise ConfigError(f"--verify-epoch {epoch}: job {self.config.job_id} has no committed checkpoint "
                              f"{epoch} to compare with ({e}); epochs it can verify (their checkpoint and the "
                              f"one before kept): {self.verifiable_epochs() or 'none'}") from None
        if committed.kind != "epoch":
            raise ConfigError(f"--verify-epoch {epoch}: checkpoint {epoch} of job {self.config.job_id} is its "
                              f"{committed.kind} checkpoint; verify an epoch up to {epoch - 1}")
        if committed.parent_id is None and self.job.warm_start is not None:
            raise ConfigError(f"--verify-epoch {epoch}: epoch 0 of job {self.config.job_id} warm-started from "
                              "another job's checkpoint; verify a later epoch")
        if list(scratch.list("")):
            raise ConfigError(f"the scratch store {scratch.location()} of a verification must be empty")
        pin = JobLayout(self.config.job_id).input_pin()
        try:
            scratch.put(pin, self.store.get(pin))
        except ObjectNotFound:
            pass  # a body without a static input pins nothing
        if committed.parent_id is not None:
            try:
                parent = self.log.load(committed.parent_id, verify="none")
            except CheckpointError as e:
                raise ConfigError(f"--verify-epoch {epoch}: checkpoint {committed.parent_id} of job "
                                  f"{self.config.job_id}, which epoch {epoch} was computed from, is not kept "
                                  f"({e}); epochs it can verify: {self.verifiable_epochs() or 'none'}") from None
            for ref in parent.state_objects:
                copy_verified(self.store, scratch, ref, ref.key)
            CheckpointLog(scratch, self.config.job_id).seed(parent)
        # nothing is published from the scratch copy: no output location
        config = dataclasses.replace(self.config, output_path=None)
        job = IterationJob(config, scratch, store_options=self.job.store_options, warm_start=self.job.warm_start,
                           **job_options)
        plan = job.attempts.plan_epoch(committed.batch_id, run={"runner": "verification"})
        if plan.epoch != epoch:
            raise CheckpointError(f"the scratch copy of job {self.config.job_id} planned epoch {plan.epoch}, not {epoch}")
        self._check_same_settings(plan, committed)
        return job, plan, committed

    def _check_same_settings(self, plan: EpochPlan, committed: Manifest) -> None:
        """ConfigError when the recomputation would not run what the committed epoch ran (the
        audit's settings are not the job's: another body parameter or partitioning): it would
        flag a deterministic body. Names each setting with both values (the committed ones are
        in checkpoint ``committed``'s manifest)."""
        differ = [] if plan.num_partitions == committed.num_partitions else \
            [f"num_partitions {committed.num_partitions} (committed) vs {plan.num_partitions} (now)"]
        defaults = {p.name: p.default for p in resolve_body(self.config.body).parameters}
        ran, now = ({**defaults, **params.get("params", {})} for params in (committed.body, plan.body))
        differ += [f"body param {k} {ran.get(k)!r} (committed) vs {now.get(k)!r} (now)"
                   for k in sorted(set(ran) | set(now)) if ran.get(k) != now.get(k)]
        if differ:
            raise ConfigError(f"verify epoch {committed.epoch}: job {self.config.job_id}'s epoch ran with other "
                              f"settings than this audit's: {'; '.join(differ)}; give the audit the job's own")

    def verifiable_epochs(self) -> list[int]:
        """The epochs ``verification`` can recompute: each epoch checkpoint kept with the one it
        was computed from (epoch 0: from the input), oldest first."""
        kept = {}
        for cid in self.log.checkpoint_ids():
            try:
                kept[cid] = self.log.load(cid, verify="none").kind
            except CheckpointError:
                continue  # retired or damaged: neither compared nor computed from
        return [c for c, kind in sorted(kept.items()) if kind == "epoch" and (c == 0 or c - 1 in kept)]

    def verify_epoch(self, epoch: int, execute: Callable[[EpochPlan, Any], None], *,
                     scratch_dir: str | None = None) -> "EpochVerification":
        """The determinism audit (docs/writing-a-body.md): recompute epoch ``epoch`` from
        checkpoint ``epoch - 1`` in a scratch store (a temporary directory under ``scratch_dir``,
        deleted after; the Spark executors must see it), an attempt that can never commit, and
        compare every variable's files, partition by partition, by SHA-256 with the committed
        checkpoint ``epoch``; for a partition that differs, its rows too
        (``partition_difference``). ``execute(plan, scratch)`` runs the attempt (the library's
        warm session, an Airflow task's hook); this job's store and outputs are only read."""
        import tempfile
        import time


        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="iterations-verify-", dir=scratch_dir) as tmp:
            scratch = LocalStore(tmp)
            job, plan, committed = self.verification(epoch, scratch)
            execute(plan, scratch)
            reports = job.log.reports(plan.epoch, plan.attempt_id)
            by_key = {(r.head, r.partition): r for r in reports}
            differences = [partition_difference(self.store, scratch, committed, by_key.get(hp), *hp)
                           for hp in differing_partitions(committed, reports)]
        files = sum(len(ds.files) for ds in committed.variables.values())
        log.info("job %s: epoch %d recomputed from checkpoint %d in %.1fs: %d of its partitions differ",
                 self.config.job_id, epoch, epoch - 1, time.monotonic() - started, len(differences))
        return EpochVerification(self.config.job_id, epoch, files, differences, time.monotonic() - started)


@dataclass
class PartitionDifference:
    """One partition of one variable whose recomputed bytes differ from the committed ones."""

    head: str
    partition: int
    committed_rows: int | None
    recomputed_rows: int | None
    # float column -> the largest absolute difference, where the rows matched by the other columns
    largest: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def describe(self) -> str:
        rows = "" if self.committed_rows == self.recomputed_rows else \
            f", {self.recomputed_rows} rows recomputed, {self.committed_rows} committed"
        largest = "".join(f", {c} differs by up to {d:.3g}" for c, d in sorted(self.largest.items()))
        return f"variable {self.head} partition {self.partition} differs{rows}{largest}{self.note}"


def differing_partitions(committed: Manifest, reports: Sequence[EpochReport]) -> list[tuple[str, int]]:
    """(head, partition) of every partition of every variable whose files' SHA-256 in
    ``reports`` (a recomputation of the checkpoint's epoch) are not the committed ones."""
    recomputed = {(r.head, r.partition): [f.sha256 for f in r.files] for r in reports}
    out = []
    for head, ds in sorted(committed.variables.items()):
        for p, files in enumerate(ds.partitions):
            if recomputed.get((head, p)) != [f.sha256 for f in files]:
                out.append((head, p))
    return out


@dataclass
class EpochVerification:
    """What a determinism audit (``Restorer.verify_epoch``) found."""

    job_id: str
    epoch: int
    files: int  # the committed checkpoint's variable files compared
    differences: list  # include.epoch.restore.PartitionDifference, one per partition that differs
    seconds: float

    @property
    def identical(self) -> bool:
        return not self.differences

    def describe(self) -> str:
        if self.identical:
            return f"verified: epoch {self.epoch} identical ({self.files} files of job {self.job_id}, {self.seconds:.1f}s)"
        lines = [f"not verified: epoch {self.epoch} of job {self.job_id} differs when recomputed from checkpoint "
                 f"{self.epoch - 1} in {len(self.differences)} partition(s): the body is not deterministic "
                 "(docs/writing-a-body.md#a-deterministic-body)"]
        return "\n".join(lines + [f"  {d.describe()}" for d in self.differences])


def partition_difference(store, scratch, committed: Manifest, report: EpochReport | None, head: str,
                         partition: int) -> PartitionDifference:
    """How one partition's recomputed rows (``report``'s files in ``scratch``) differ from the
    committed ones (``committed``'s in ``store``): rows, schema, the non-float columns, and the
    largest difference of each float column, rows matched by the other columns."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(s, files):
        parts = [pq.read_table(io.BytesIO(s.get(f.key))) for f in files]
        return pa.concat_tables(parts) if parts else None

    old = table(store, committed.variables[head].partitions[partition])
    new = table(scratch, report.files) if report is not None else None
    diff = PartitionDifference(head, partition, None if old is None else old.num_rows,
                               None if new is None else new.num_rows)
    if old is None or new is None or old.schema != new.schema or old.num_rows != new.num_rows:
        diff.note = "" if old is not None and new is not None and old.schema == new.schema else \
            ": its schema differs" if old is not None and new is not None else ": no recomputed files"
        return diff
    floats = [n for n, t in zip(old.schema.names, old.schema.types) if pa.types.is_floating(t)]
    keys = [n for n in old.schema.names if n not in floats and not pa.types.is_nested(old.schema.field(n).type)]
    if keys:
        old, new = old.sort_by([(k, "ascending") for k in keys]), new.sort_by([(k, "ascending") for k in keys])
        if not all(old.column(k).equals(new.column(k)) for k in keys):
            diff.note = f": its rows differ in {', '.join(k for k in keys if not old.column(k).equals(new.column(k)))}"
            return diff
    for name in floats:
        a = old.column(name).to_numpy(zero_copy_only=False).astype("float64")
        b = new.column(name).to_numpy(zero_copy_only=False).astype("float64")
        both = ~(np.isnan(a) & np.isnan(b))
        diff.largest[name] = float(np.max(np.abs(a[both] - b[both]), initial=0.0))
    if not floats:
        diff.note = ": the same rows, in another order or encoding"
    return diff
