"""Coordinators: per-job components that send events to the partitions of coming epochs, with
exactly-once delivery around checkpoints (FLINK-16986, translated to epochs).

A coordinator (``Coordinator``) keeps state of its own and sends events to one partition or to
all. Its events reach the epochs through a ``Valve``:

- At the **trigger** of checkpoint k (when epoch k is planned) the coordinator's state is
  snapshotted; the events sent before that point are epoch k's *inbox*, recorded in the epoch's
  plan. From then until checkpoint k commits, the valve is **shut**: what the coordinator sends
  meanwhile (while epoch k runs, while its reports are handled) is held back.
- When checkpoint k **commits**, the valve opens and releases the held events in the order they
  were sent; they (and whatever is sent while the valve is open) form epoch k+1's inbox.
- When checkpoint k **aborts**, or the job **resets** to a checkpoint (a restart, a retry of a
  task in another process), the held events are dropped and the coordinator is reset to the
  checkpoint's snapshot; it sends again from there.
- When one partition's attempt fails while the coordinator goes on (a retry in the same
  process), only that partition's held events are dropped and the coordinator is told
  (``partition_failed``); the rest is unaffected.

So checkpoint k is a consistent cut: its coordinator snapshot has sent exactly the events of the
inboxes of epochs <= k, and its variables have received exactly those. After any failure the
receiving side has seen exactly the events of the checkpoint it restored, plus those delivered
after.

The global alignment decision is itself a coordinator event: ``AlignmentCoordinator`` (always
present, named ``alignment``) receives every partition's epoch report and sends
``{"type": "globally_aligned", "epoch": k, "terminated": ...}`` to all partitions through its
valve, so epoch k+1 receives the decision on epoch k. On restore the partitions' state
re-reports what the checkpoint recorded, and the decision is sent again (flink-ml's head
re-reporting its alignment after a restore).

Nothing here imports Spark or Airflow. Snapshots are JSON and stored inline in the checkpoint
manifest and the epoch's plan: keep them small (split names, counters; not data).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Mapping

from include.checkpoints.head_state import AlignmentDecision, UnexpectedEpoch
from include.epoch.aligner import missing_reports
from include.epoch.valve import Delivery, Event, Valve
from include.errors import ConfigError, IterationError

log = logging.getLogger("iterations")


class CoordinatorError(IterationError):
    """A coordinator was misused or its snapshot cannot be restored."""


class CoordinatorContext:
    """What a coordinator sees of its job: partitions and the sending side of its valve."""

    def __init__(self, holder: "CoordinatorHolder"):
        self._holder = holder

    @property
    def num_partitions(self) -> int:
        return self._holder.num_partitions

    @property
    def lock(self):
        """Hold it to change state and send atomically from a coordinator's own thread: the
        snapshot at a checkpoint's trigger is taken under the same lock."""
        return self._holder._lock

    @property
    def epoch(self) -> int:
        """The epoch the next events go to (while the valve is shut: the one after the running one)."""
        return self._holder.next_epoch

    def send(self, partition: int, payload: Any) -> Delivery:
        return self._holder.send(partition, payload)

    def send_to_all(self, payload: Any) -> list[Delivery]:
        return [self._holder.send(p, payload) for p in range(self.num_partitions)]


class Coordinator(ABC):
    """Override ``snapshot`` and ``reset_to``, and the hooks you need; send with ``ctx.send``.

    Hooks run in the process orchestrating the job (the Airflow task of the phase, or the library
    runner's process), never in Spark. A coordinator must be a deterministic function of its
    snapshot and what it observes: after a reset it sends again what it sent after the snapshot.
    """

    def start(self, ctx: CoordinatorContext) -> None:
        """Called once the coordinator is created or reset (its state is set)."""

    def on_epoch_start(self, epoch: int, ctx: CoordinatorContext) -> None:
        """Epoch ``epoch`` is being planned: the last moment to send events into its inbox
        (a split enumerator discovers input and assigns splits here)."""

    def handle_report(self, epoch: int, partition: int, report: Mapping[str, Any], ctx: CoordinatorContext) -> None:
        """A partition's report of ``epoch`` (``head``, ``records``, ``metrics``, ``events``:
        the seqs of this coordinator's events it received), once the epoch is aligned."""

    def partition_failed(self, epoch: int, partition: int, dropped: list[Event], ctx: CoordinatorContext) -> None:
        """Partition ``partition``'s attempt of ``epoch`` failed and the job goes on without a
        reset: its held events ``dropped`` were not delivered (send again what it still needs);
        its inbox of ``epoch`` is delivered again to the retry."""

    def input_finished(self) -> bool:
        """For a coordinator that feeds the job's input (a source: it has ``input_available``,
        as a split enumerator): True once its input has ended and every split is assigned;
        asked when an epoch is planned. The job terminates after the epoch planned when every
        source of the job has finished (end of input); a finished source is never read again
        while the others go on (FLIP-147's partially finished job)."""
        return False

    @abstractmethod
    def snapshot(self) -> Any:
        """The state to store in the checkpoint (JSON-able)."""

    @abstractmethod
    def reset_to(self, state: Any | None) -> None:
        """Go back to a snapshot's state (None: the initial state, before any checkpoint)."""

    def rescale(self, state: Any, old_partitions: int, new_partitions: int) -> Any:
        """The job resumes with ``new_partitions`` partitions from a checkpoint whose snapshot
        ``state`` this coordinator took with ``old_partitions``: return the state to restore.
        Refused by default (``RescaleRefused``): a coordinator's state may name partitions (a
        split assigned to partition 3, a partition it feeds) that mean something else, or
        nothing, with another count. Override it to return the state, changed or not, when the
        coordinator can go on with the new count (the built-in alignment and
        ``include.epoch.splits.FileSplitEnumerator`` return it unchanged)."""
        raise RescaleRefused(f"{type(self).__name__} does not say how to rescale its state "
                             "(Coordinator.rescale)")

    def close(self) -> None:
        """Release what the coordinator holds (threads, clients)."""


def feeds_input(coordinator: Coordinator) -> bool:
    """Is ``coordinator`` a source of the job's input (it says when input is available)?"""
    return callable(getattr(coordinator, "input_available", None))


def end_of_input(snapshots: Mapping[str, Any] | None) -> bool:
    """Do a checkpoint's coordinator snapshots (taken when its epoch was planned) say the job's
    input has ended: it has sources, and every one of them has finished? One finished source
    among others that still produce is not the end (a snapshot of an older version without
    ``feeds_input`` counts as a source when it has finished)."""
    sources = [s for s in (snapshots or {}).values() if s.get("feeds_input", s.get("input_finished"))]
    return bool(sources) and all(s.get("input_finished") for s in sources)


class RescaleRefused(CoordinatorError):
    """A coordinator cannot carry its state over to another number of partitions."""


class CoordinatorHolder:
    """Runs one coordinator for the runtime: its valve, the next epoch's inbox, its checkpoints
    (Flink's OperatorCoordinatorHolder)."""

    def __init__(self, name: str, coordinator: Coordinator, num_partitions: int):
        if not name or not all(c.isalnum() or c in "_-" for c in name):
            raise ConfigError(f"invalid coordinator name {name!r}: letters, digits, '_' and '-'")
        self.name = name
        self.coordinator = coordinator
        self.num_partitions = num_partitions
        self.next_epoch = 0
        self._lock = threading.RLock()
        self._seq = 0
        self._inbox: list[Event] = []
        self._was_shut = False  # the valve's state when the last trigger shut it
        # the checkpoint triggered and not yet committed or aborted (None: none is)
        self.triggered: int | None = None
        self.valve = Valve(self._inbox.append)
        self.ctx = CoordinatorContext(self)

    def send(self, partition: int, payload: Any) -> Delivery:
        if not isinstance(partition, int) or not 0 <= partition < self.num_partitions:
            raise CoordinatorError(f"coordinator {self.name!r}: partition {partition!r} is not in "
                                   f"0..{self.num_partitions - 1}")
        try:
            json.dumps(payload)
        except (TypeError, ValueError) as e:
            raise CoordinatorError(f"coordinator {self.name!r}: event payload is not JSON-able: {e}") from None
        with self._lock:
            event = Event(self.name, partition, self._seq, copy.deepcopy(payload))
            self._seq += 1
            return self.valve.send(event)

    # --- the checkpoint protocol ------------------------------------------------------------

    def restore(self, snapshot: Mapping[str, Any] | None, next_epoch: int, *, shut: bool = False,
                partitions: int | None = None) -> None:
        """Reset to a checkpoint's snapshot (None: fresh): held events dropped, inbox emptied.
        ``shut``: the snapshot is a trigger's whose checkpoint has not committed yet (a commit in
        another process): the valve is shut before the coordinator starts, so what it sends
        from then on is held, as it would have been had it run on since the trigger.
        ``partitions``: the number of partitions the snapshot was taken with; another than this
        holder's is a rescale, which the coordinator accepts (``Coordinator.rescale``) or the
        restore refuses, as a ConfigError naming the coordinator and both numbers, before any
        of its state changes."""
        snapshot = self.rescaled(snapshot, partitions)
        with self._lock:
            self.valve.reset()
            if shut:
                self.valve.shut()
            self._inbox.clear()
            self.next_epoch = next_epoch
            self.triggered = next_epoch - 1 if shut else None
            self._seq = int(snapshot["seq"]) if snapshot else 0
            try:
                self.coordinator.reset_to(copy.deepcopy(snapshot["state"]) if snapshot else None)
            except Exception as e:
                raise CoordinatorError(f"coordinator {self.name!r} cannot restore its snapshot: {e}") from e
        self.coordinator.start(self.ctx)

    def rescaled(self, snapshot: Mapping[str, Any] | None, partitions: int | None) -> Mapping[str, Any] | None:
        """``snapshot`` (taken with ``partitions`` partitions) for this holder's number of
        partitions: as it is when the numbers are the same, else rescaled by the coordinator,
        or a ConfigError when it refuses."""
        if snapshot is None or partitions is None or partitions == self.num_partitions:
            return snapshot
        try:
            state = self.coordinator.rescale(copy.deepcopy(snapshot["state"]), partitions, self.num_partitions)
        except RescaleRefused as e:
            raise ConfigError(
                f"num_partitions={self.num_partitions} is refused: the checkpoint's state of coordinator "
                f"{self.name!r} was taken with {partitions} partitions and it cannot be rescaled ({e}); "
                f"resume with num_partitions={partitions}") from None
        return {**snapshot, "state": state}

    def trigger(self, epoch: int) -> tuple[list[Event], dict[str, Any]]:
        """Checkpoint ``epoch`` is triggered: last call for its inbox, snapshot, valve shut.
        Returns (the inbox of ``epoch``, the snapshot). A snapshot that raises or is not
        JSON-able is a CoordinatorError raised before the valve shuts or the inbox is handed
        out: a retry finds every event where it was. One checkpoint at a time (Flink's
        checkCheckpointAlreadyHappening): while checkpoint k is triggered and neither committed
        nor aborted, a trigger of another checkpoint is a CoordinatorError naming both, raised
        before anything changes (the events held for k would otherwise be released into the
        inbox after the new trigger's, out of the cut its snapshot records)."""
        if self.triggered is not None and self.triggered != epoch:
            raise CoordinatorError(
                f"coordinator {self.name!r}: checkpoint {epoch} triggered while checkpoint {self.triggered} "
                "is being taken (triggered, neither committed nor aborted): one checkpoint at a time")
        self.next_epoch = epoch
        self.coordinator.on_epoch_start(epoch, self.ctx)
        with self._lock:
            try:
                snapshot = {"seq": self._seq, "state": copy.deepcopy(self.coordinator.snapshot()),
                            "input_finished": bool(self.coordinator.input_finished()),
                            "feeds_input": feeds_input(self.coordinator)}
                json.dumps(snapshot)
            except (TypeError, ValueError) as e:
                raise CoordinatorError(f"coordinator {self.name!r}: snapshot is not JSON-able: {e}") from None
            except Exception as e:
                raise CoordinatorError(f"coordinator {self.name!r}: snapshot of epoch {epoch} failed: {e}") from e
            self._was_shut = self.valve.is_shut
            self.valve.shut()
            inbox = list(self._inbox)
            self._inbox.clear()
            self.next_epoch = epoch + 1
            self.triggered = epoch
        return inbox, snapshot

    def abort_trigger(self, epoch: int, inbox: list[Event]) -> None:
        """The checkpoint of ``epoch`` this holder was triggered for will not be taken (another
        coordinator's snapshot failed; Flink's abortCurrentTriggering): the inbox it handed out
        goes back in front of what came since, and the valve is as it was before the trigger
        (opened, releasing what it held since, in order)."""
        with self._lock:
            self._inbox[:0] = inbox
            if not self._was_shut:
                self.valve.open()
            self.next_epoch = epoch
            self.triggered = None

    def reports(self, epoch: int, reports: Iterable[tuple[int, Mapping[str, Any]]],
                inbox: Iterable[Mapping[str, Any]] = ()) -> None:
        """Hand the partitions' reports of ``epoch`` over, each with the seqs of this
        coordinator's events (of ``inbox``) its partition received."""
        received: dict[int, list[int]] = {}
        for e in inbox:
            received.setdefault(int(e["partition"]), []).append(int(e["seq"]))
        for partition, report in reports:
            self.coordinator.handle_report(epoch, partition, {**report, "events": received.get(partition, [])}, self.ctx)

    def committed(self) -> list[Event]:
        """The checkpoint committed: release the held events (into the next inbox)."""
        with self._lock:
            self.triggered = None
            return self.valve.open()

    def partition_failed(self, epoch: int, partition: int) -> list[Event]:
        dropped = self.valve.reset_partition(partition)
        self.coordinator.partition_failed(epoch, partition, dropped, self.ctx)
        return dropped

    def pending(self) -> list[Event]:
        """Events that will be in the next inbox so far (released or sent while open)."""
        with self._lock:
            return list(self._inbox)

    def close(self) -> None:
        self.coordinator.close()


class AlignmentCoordinator(Coordinator):
    """The global alignment as a coordinator (flink-ml's SharedProgressAligner): collects the
    epoch reports of every partition of every head; when all are in, sends the decision on the
    epoch to every partition. ``decide(epoch)`` gives (terminated, reason) for a complete epoch;
    ``decide_with`` gives it the decision the checkpoint recorded, for that epoch only.

    A report of the epoch decided last is a re-report (a retry, a restore) and sends nothing
    again; a report of an older epoch, or the reports of an epoch other than the one the given
    decision is on, is an UnexpectedEpoch naming both epochs (flink-ml's head refuses an
    unexpected epoch watermark): a stale decision is never sent."""

    def __init__(self, heads: Mapping[str, int], decide: Callable[[int], tuple[bool, str]] | None = None):
        self.heads = dict(heads)
        self.decide = decide or (lambda epoch: (False, ""))
        self.decision: AlignmentDecision | None = None  # decide_with's
        self.reported: dict[int, set[tuple[str, int]]] = {}
        self.latest_aligned = -1

    def decide_with(self, decision: AlignmentDecision) -> None:
        """The decision to send once epoch ``decision.epoch`` is aligned (the one its checkpoint
        records or is committing with); complete reports of any other epoch are refused."""
        self.decision = decision

    def handle_report(self, epoch, partition, report, ctx):
        if epoch == self.latest_aligned:
            return  # a re-report of the epoch already decided (a retry, a restore): sent once
        if epoch < self.latest_aligned:
            raise UnexpectedEpoch(
                f"alignment: unexpected report of epoch {epoch} from partition {partition}: epoch "
                f"{self.latest_aligned} is decided, so the reports expected are of epoch "
                f"{self.latest_aligned + 1} or later")
        got = self.reported.get(epoch, set()) | {(report.get("head", ""), partition)}
        if missing_reports(self.heads, got):
            self.reported[epoch] = got
            return
        if self.decision is not None and self.decision.epoch != epoch:
            raise UnexpectedEpoch(
                f"alignment: the reports of epoch {epoch} are complete, but the decision given is on "
                f"epoch {self.decision.epoch}: expected the reports of epoch {self.decision.epoch}")
        if self.decision is not None:
            terminated, reason = self.decision.terminated, self.decision.reason or ""
        else:
            terminated, reason = self.decide(epoch)
        self.latest_aligned = epoch
        self.reported.pop(epoch, None)
        ctx.send_to_all({"type": "globally_aligned", "epoch": epoch, "terminated": terminated,
                         "reason": reason})

    def snapshot(self):
        return {"latest_aligned": self.latest_aligned}

    def rescale(self, state, old_partitions, new_partitions):
        return state  # an epoch number: the decisions go to every partition, whatever their number

    def reset_to(self, state):
        self.reported = {}
        self.decision = None  # the decision of the state left behind
        self.latest_aligned = -1 if state is None else int(state["latest_aligned"])


class Coordinators:
    """The coordinators of one job, driven together by the runtime."""

    def __init__(self, holders: Mapping[str, CoordinatorHolder]):
        self.holders = dict(holders)
        self.at_checkpoint: int | None = None  # the checkpoint the in-memory state continues from
        self.pending_trigger: tuple[int, dict[str, list[Event]], dict[str, Any]] | None = None

    def __bool__(self) -> bool:
        return bool(self.holders)

    def restore(self, snapshots: Mapping[str, Any] | None, checkpoint_id: int | None, next_epoch: int, *,
                shut: bool = False, partitions: int | None = None) -> None:
        """Every holder reset to its snapshot (``CoordinatorHolder.restore``); a rescale that one
        coordinator refuses is refused before any holder changes."""
        snapshots = {name: holder.rescaled((snapshots or {}).get(name), partitions)
                     for name, holder in self.holders.items()}
        for name, holder in self.holders.items():
            holder.restore(snapshots[name], next_epoch, shut=shut)
        self.at_checkpoint = checkpoint_id
        self.pending_trigger = None

    def trigger(self, epoch: int) -> tuple[dict[str, list[Event]], dict[str, Any]]:
        """Trigger every coordinator for checkpoint ``epoch``, all or none: when one fails, the
        ones triggered before it are aborted (their inboxes back, valves as before) and the
        error raised, so a retry in this process loses no event."""
        inboxes, snapshots = {}, {}
        try:
            for name, holder in self.holders.items():
                inboxes[name], snapshots[name] = holder.trigger(epoch)
        except BaseException:
            for name, inbox in inboxes.items():
                self.holders[name].abort_trigger(epoch, inbox)
            raise
        self.pending_trigger = (epoch, inboxes, snapshots)
        return inboxes, snapshots

    def reports(self, epoch: int, reports: Iterable[tuple[int, Mapping[str, Any]]],
                inboxes: Mapping[str, Iterable[Mapping[str, Any]]] | None = None) -> None:
        reports = list(reports)
        for name, holder in self.holders.items():
            holder.reports(epoch, reports, (inboxes or {}).get(name, ()))

    def shut(self) -> None:
        for holder in self.holders.values():
            holder.valve.shut()

    def committed(self, checkpoint_id: int) -> None:
        for holder in self.holders.values():
            holder.committed()
        self.at_checkpoint = checkpoint_id
        self.pending_trigger = None

    def partition_failed(self, epoch: int, partition: int) -> dict[str, list[Event]]:
        return {name: h.partition_failed(epoch, partition) for name, h in self.holders.items()}

    def close(self) -> None:
        for holder in self.holders.values():
            holder.close()


__all__ = [
    "AlignmentCoordinator",
    "Coordinator",
    "CoordinatorContext",
    "CoordinatorError",
    "CoordinatorHolder",
    "Coordinators",
    "Delivery",
    "Event",
    "Valve",
]
