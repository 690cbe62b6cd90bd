"""A job's coordinators (the global alignment, the body's, extra ones): restored from a
checkpoint, triggered with an epoch, reset after a failure."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Mapping

from include.checkpoints.manifest import JobState, Manifest
from include.contract.body import resolve_body
from include.epoch.coordinators import AlignmentCoordinator, CoordinatorHolder, Coordinators, feeds_input
from include.epoch.plan import EpochPlan, head_partitions
from include.errors import CheckpointError
from include.process.failpoints import failpoint

if TYPE_CHECKING:
    from include.epoch.coordinators import Coordinator
    from include.epoch.job import IterationJob

log = logging.getLogger("iterations")


class Coordination:
    """A job's coordinators (``IterationJob.coordination``), built from its body and ``extra``
    ones, and whether their in-memory state is the store's: after a failure it is not, and
    the next use restores it from the checkpoint."""

    def __init__(self, job: IterationJob, extra: Mapping[str, Coordinator] | None = None):
        self.job = job
        self.extra = dict(extra or {})
        self._coords: Coordinators | None = None
        self._valid = False  # False: restore from the store before the next use

    @property
    def coordinators(self) -> Coordinators:
        """The job's coordinators: the built-in ``alignment``, the body's, the extra ones."""
        if self._coords is None:
            job = self.job
            meta = job.body_meta
            body = resolve_body(job.config.body)
            found = dict(body.coordinators(body.parse_params(job.config.body_params), job.config.input,
                                           job.store_options))
            found.update(self.extra)
            if "alignment" in found:
                raise CheckpointError("coordinator name 'alignment' is reserved for the global alignment")
            P = job.num_partitions
            holders = {"alignment": CoordinatorHolder(
                "alignment", AlignmentCoordinator(head_partitions(meta, P)), P)}
            holders.update({name: CoordinatorHolder(name, c, P) for name, c in sorted(found.items())})
            self._coords = Coordinators(holders)
        return self._coords

    def reset(self) -> None:
        """Forget the coordinators' in-memory state: the next use restores it from the store
        (after a failure: held events dropped, coordinators reset to the checkpoint)."""
        self._valid = False

    def restored(self, latest: Manifest | None) -> Coordinators:
        """The coordinators as checkpoint ``latest`` left them (None: as a job starts)."""
        coords = self.coordinators
        at = latest.checkpoint_id if latest is not None else None
        if self._valid and coords.at_checkpoint == at:
            return coords  # this process committed ``latest``: its released events are the inbox
        coords.restore(latest.coordinators if latest is not None else None, at,
                       latest.epoch + 1 if latest is not None else 0,
                       partitions=latest.num_partitions if latest is not None else None)
        if latest is not None and latest.kind == "epoch" and latest.decision is not None:
            # the partitions re-report what the checkpoint recorded (flink-ml's heads after a
            # restore): the alignment decision on that epoch is sent again
            coords.holders["alignment"].coordinator.decide_with(latest.decision)
            coords.reports(latest.epoch, [(p, {"head": h, "restored": True})
                                          for h, head in latest.head_state.heads.items()
                                          for p in range(len(head.partitions))])
        self._valid = True
        return coords

    def trigger(self, latest: Manifest | None, epoch: int) -> tuple[dict, dict]:
        """Trigger epoch ``epoch``'s checkpoint on the coordinators restored at ``latest``: (each
        one's inbox of events for the epoch, as dicts; each one's snapshot)."""
        coords = self.restored(latest)
        if coords.pending_trigger is not None and coords.pending_trigger[0] == epoch:
            _, inboxes, snapshots = coords.pending_trigger  # a retry in this process: same inbox
        else:
            inboxes, snapshots = coords.trigger(epoch)
        failpoint("coordinator.triggered", job=self.job.config.job_id, epoch=epoch)
        return {name: [e.to_dict() for e in evs] for name, evs in inboxes.items()}, dict(snapshots)

    def committing(self, plan: EpochPlan) -> Coordinators:
        """The coordinators as they were when ``plan``'s checkpoint was triggered, valves shut."""
        coords = self.coordinators
        pending = coords.pending_trigger
        if self._valid and pending is not None and pending[0] == plan.epoch and pending[2] == plan.coordinators:
            return coords
        coords.restore(plan.coordinators, plan.parent_id, plan.epoch + 1, shut=True, partitions=plan.num_partitions)
        coords.pending_trigger = (plan.epoch, {}, plan.coordinators or {})
        self._valid = True
        return coords

    def input_available(self, state: JobState) -> bool:
        """Is there something for the next epoch: a source (a coordinator that feeds input) that
        has not finished has pending or new splits or has just seen its input end, or every
        source has finished? A finished source counts for nothing: one of several that ended
        does not make the others' epochs start without input. True for jobs without sources."""
        coords = self.restored(state.latest)
        sources = [h.coordinator for h in coords.holders.values() if feeds_input(h.coordinator)]
        live = [c for c in sources if not c.input_finished()]  # a finished source has nothing more
        return not live or any(c.input_available() for c in live)

    def partition_failed(self, plan: EpochPlan, partition: int) -> None:
        """Partition ``partition``'s attempt of ``plan`` failed and this process goes on (a
        retry): drop its held events and tell the coordinators; nothing else is reset."""
        if self._valid:
            dropped = self.coordinators.partition_failed(plan.epoch, partition)
            log.info("epoch %d: partition %d failed; held events dropped: %s", plan.epoch, partition,
                     {k: len(v) for k, v in dropped.items() if v} or "none")
