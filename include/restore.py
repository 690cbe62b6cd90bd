"""A job's state at its latest checkpoint: restore, verification, the fall-back to an intact
checkpoint, and the determinism audit's scratch copy (``verification``)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from include.checkpoint import CheckpointLog
from include.errors import CheckpointCorrupted, CheckpointError, ConfigError, ObjectNotFound
from include.head import EpochReport, HeadStatus
from include.layout import JobLayout
from include.manifest import Manifest
from include.plan import EpochPlan, JobState

log = logging.getLogger("iterations")


class Restore:
    """The restore part of ``include.runtime.IterationJob`` (a mixin over its ``config``,
    ``store`` and ``log``)."""

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

    # --- the determinism audit (DESIGN invariant 9) ------------------------------------------

    def verification(self, epoch: int, scratch, **job_options: Any) -> tuple[Any, EpochPlan, Manifest]:
        """A scratch job that recomputes epoch ``epoch`` from checkpoint ``epoch - 1`` in
        ``scratch`` (an empty store of its own): (that job, its attempt's plan, the committed
        checkpoint ``epoch`` to compare with). Into the scratch store go copies of checkpoint
        ``epoch - 1``, its objects (each verified against its SHA-256 as it is read) and the
        log's input pin, under the same keys; this job's store is only read. The scratch job's
        attempt can never commit here: it is in another store, and nothing of it is copied back.
        ConfigError for an epoch that has no committed epoch checkpoint (or whose parent is gone)."""
        from include.runtime import IterationJob
        from include.store.transfer import copy_verified

        try:
            committed = self.log.load(epoch, verify="full")
        except CheckpointError as e:
            raise ConfigError(f"--verify-epoch {epoch}: job {self.config.job_id} has no committed checkpoint "
                              f"{epoch} to compare with ({e}); epochs it can verify (their checkpoint and the "
                              f"one before kept): {self.verifiable_epochs() or 'none'}") from None
        if committed.kind != "epoch":
            raise ConfigError(f"--verify-epoch {epoch}: checkpoint {epoch} of job {self.config.job_id} is its "
                              f"{committed.kind} checkpoint; verify an epoch up to {epoch - 1}")
        if committed.parent_id is None and self.warm_start is not None:
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
        job = IterationJob(config, scratch, store_options=self.store_options, warm_start=self.warm_start,
                           **job_options)
        plan = job.plan_epoch(committed.batch_id, run={"runner": "verification"})
        if plan.epoch != epoch:
            raise CheckpointError(f"the scratch copy of job {self.config.job_id} planned epoch {plan.epoch}, not {epoch}")
        return job, plan, committed

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
