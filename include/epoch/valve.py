"""The valve between a coordinator and the epochs (FLINK-16986's OperatorEventValve): the events
a coordinator sends, what became of each, and the valve that holds them while a checkpoint is
pending (include.epoch.coordinators explains when it shuts, opens and drops)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Event:
    """An event from coordinator ``coordinator`` to partition ``partition`` of an epoch.
    ``seq`` orders a coordinator's events (it increases by one per event sent)."""

    coordinator: str
    partition: int
    seq: int
    payload: Any

    def to_dict(self) -> dict[str, Any]:
        return {"coordinator": self.coordinator, "partition": self.partition, "seq": self.seq,
                "payload": self.payload}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Event":
        return cls(d["coordinator"], int(d["partition"]), int(d["seq"]), d["payload"])


class Delivery:
    """What became of one sent event: ``sent`` (passed straight through an open valve),
    ``blocked`` (held by a shut valve), then ``released``, ``dropped``, or ``failed`` (released,
    but its delivery raised: ``error`` holds the exception, as Flink's send result completes
    exceptionally)."""

    __slots__ = ("event", "state", "error")

    def __init__(self, event: Event, state: str):
        self.event = event
        self.state = state
        self.error: BaseException | None = None

    @property
    def delivered(self) -> bool:
        return self.state in ("sent", "released")

    def __repr__(self) -> str:
        return f"Delivery({self.event.coordinator}#{self.event.seq}->p{self.event.partition}: {self.state})"


class Valve:
    """FLINK-16986's OperatorEventValve: passes events to ``deliver`` while open; while shut
    holds them, per partition, until ``open`` (released in the order they were sent) or a
    ``reset`` (all dropped) / ``reset_partition`` (one partition's dropped). Thread-safe: a
    coordinator may send from its own threads."""

    def __init__(self, deliver: Callable[[Event], None]):
        self._deliver = deliver
        self._lock = threading.Lock()
        self._shut = False
        self._blocked: list[Delivery] = []

    @property
    def is_shut(self) -> bool:
        with self._lock:
            return self._shut

    def send(self, event: Event) -> Delivery:
        with self._lock:
            if not self._shut:
                self._deliver(event)
                return Delivery(event, "sent")
            delivery = Delivery(event, "blocked")
            self._blocked.append(delivery)
            return delivery

    def shut(self) -> None:
        with self._lock:
            self._shut = True

    def open(self) -> list[Event]:
        """Open and release the held events, in send order (so in order per partition too);
        no event can slip in between (released under the lock). An event whose delivery raises
        is ``failed`` (its Delivery keeps the error; OperatorEventValveTest's
        releasedEventsForwardSendFailures): the others are still released, none twice, and
        the valve opens. Returns the events delivered."""
        with self._lock:
            if not self._shut:
                return []
            released = []
            held, self._blocked = self._blocked, []
            self._shut = False
            for d in held:
                try:
                    self._deliver(d.event)
                except Exception as e:  # the sender's to handle, as a failed send of an open valve is
                    d.state, d.error = "failed", e
                    continue
                d.state = "released"
                released.append(d.event)
            return released

    def reset(self) -> list[Event]:
        """Drop every held event and open (the checkpoint aborted, or the job reset)."""
        with self._lock:
            dropped = [d.event for d in self._blocked]
            for d in self._blocked:
                d.state = "dropped"
            self._blocked.clear()
            self._shut = False
            return dropped

    def reset_partition(self, partition: int) -> list[Event]:
        """Drop the held events of one partition (its attempt failed); the valve stays as it is."""
        with self._lock:
            dropped = [d for d in self._blocked if d.event.partition == partition]
            for d in dropped:
                d.state = "dropped"
            self._blocked = [d for d in self._blocked if d.event.partition != partition]
            return [d.event for d in dropped]

    def blocked(self) -> list[Event]:
        with self._lock:
            return [d.event for d in self._blocked]
