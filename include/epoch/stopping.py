"""Stop requests: drain or suspend a job at its next epoch boundary; savepoints."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from include.checkpoints.head_state import HeadStatus
from include.checkpoints.lifecycle import StopMode
from include.checkpoints.manifest import JobState

if TYPE_CHECKING:
    from include.checkpoints.checkpoint_log import CheckpointLog

log = logging.getLogger("iterations")


class Stopping:
    """A job's stop requests and savepoints (``IterationJob.stopping``), kept in its
    checkpoint log ``log``."""

    def __init__(self, log: CheckpointLog):
        self.log = log

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
        cid = state.latest.checkpoint_id if state.latest else None
        if state.status is HeadStatus.TERMINATING:  # every epoch done: only the finish is left
            log.info("job %s suspended at checkpoint %s, TERMINATING: its epochs are done and its finish (the final "
                     "checkpoint and the outputs' publication) runs when it resumes (%s)", self.log.job_id, cid,
                     reason)
        else:
            log.info("job %s suspended at checkpoint %s (epoch %d is next when it resumes; %s)", self.log.job_id,
                     cid, state.next_epoch, reason)
        return state.latest.checkpoint_id if state.latest else None

    def suspended_at(self, state: JobState) -> int | None:
        """The latest checkpoint, if the job was suspended there and has not moved on since (a
        running job, or a terminating one whose finish did not publish: its publication was
        not approved)."""
        if state.latest is None or state.status not in (HeadStatus.RUNNING, HeadStatus.TERMINATING):
            return None
        cid = state.latest.checkpoint_id
        return cid if self.log.store.exists(self.log.layout.savepoint(cid)) else None
