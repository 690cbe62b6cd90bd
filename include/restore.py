"""A job's state at its latest checkpoint: restore, verification, and the fall-back to an
intact checkpoint."""

from __future__ import annotations

import logging

from include.errors import CheckpointCorrupted
from include.head import HeadStatus
from include.manifest import Manifest
from include.plan import JobState

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
