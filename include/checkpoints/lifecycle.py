"""The finish lifecycle of a job's operators (FLIP-147, translated to batches of epochs).

A job's operators are its ``source`` (the input the epochs read), one ``head:<name>`` per
iteration variable, and one ``sink:<name>`` per output (``outputs`` computed by ``finish``, and
``epoch_outputs`` a body emits every epoch). Each goes through::

    RUNNING --end of input--> END_OF_INPUT --finish (flush)--> FINISHED
            --final checkpoint commits--> FULLY_FINISHED --outputs committed--> PUBLISHED
            --close (release resources)--> CLOSED

and ``close`` alone on failure or cancel (an attempt is aborted: nothing it staged is ever read
or published). End of input is the termination decision of an epoch (or a ``drain`` request);
finish is the finish attempt staging the outputs; the final checkpoint records every operator
FULLY_FINISHED; publication is the second phase of the two-phase commit of the outputs.

What a checkpoint records (``Manifest.lifecycle``) is the state every operator had when it
committed; publication records (``jobs/<job>/published/<checkpoint>/<sink>.json``) add the
PUBLISHED state per sink. After a restore, FULLY_FINISHED operators are skipped: a source that
has read all its input is never read again, a finished head is never stepped again, a published
sink is never published again; a partially finished job (some sinks published, others not)
resumes with what is left.

Stop modes (``StopMode``): ``drain`` ends the input now: finish, final checkpoint, publish
(stop-with-savepoint --drain); ``suspend`` stops at the next epoch boundary with the state
checkpointed and nothing flushed or published, to be resumed later by running the job again.

Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable, Mapping

from include.errors import ConfigError, IterationError


class LifecycleError(IterationError):
    """An operator was asked to make a transition its lifecycle does not allow."""


class OperatorState(str, Enum):
    RUNNING = "RUNNING"
    END_OF_INPUT = "END_OF_INPUT"  # no epoch will feed it again (termination decided, or drain)
    FINISHED = "FINISHED"  # flushed: what it buffered is staged under the finish attempt
    FULLY_FINISHED = "FULLY_FINISHED"  # finished, and a committed checkpoint covers that
    PUBLISHED = "PUBLISHED"  # sinks: the staged data is committed to the output (2PC phase two)
    CLOSED = "CLOSED"  # resources released; also the end of a failed or cancelled attempt


_ORDER = [OperatorState.RUNNING, OperatorState.END_OF_INPUT, OperatorState.FINISHED,
          OperatorState.FULLY_FINISHED, OperatorState.PUBLISHED, OperatorState.CLOSED]

# allowed transitions: forward one step; PUBLISHED is for sinks only (others go from
# FULLY_FINISHED to CLOSED); close is allowed from every state (failure, cancel).
_NEXT = {s: {_ORDER[i + 1]} if i + 1 < len(_ORDER) else set() for i, s in enumerate(_ORDER)}
_NEXT[OperatorState.FULLY_FINISHED] = {OperatorState.PUBLISHED, OperatorState.CLOSED}


class StopMode(str, Enum):
    DRAIN = "drain"
    SUSPEND = "suspend"

    @classmethod
    def parse(cls, value: Any) -> "StopMode":
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ConfigError(f"stop mode {value!r} is not one of: drain, suspend") from None


def operator_names(body_meta: Mapping[str, Any]) -> list[str]:
    """The operators of a job running ``body_meta`` (``IterationBody.describe()``)."""
    return (["source"] + [f"head:{h}" for h in body_meta.get("heads", {})]
            + [f"sink:{o}" for o in body_meta.get("outputs", [])]
            + [f"sink:{o}" for o in body_meta.get("epoch_outputs", [])])


def transition(operator: str, current: OperatorState | str, to: OperatorState | str) -> OperatorState:
    """The state after moving ``operator`` from ``current`` to ``to``; LifecycleError if the
    lifecycle does not allow it (naming the operator and both states)."""
    current, to = OperatorState(current), OperatorState(to)
    if to is OperatorState.PUBLISHED and not operator.startswith("sink:"):
        raise LifecycleError(f"operator {operator!r} is not a sink: only sinks are published")
    if to is current or to is OperatorState.CLOSED or to in _NEXT[current]:
        return to
    raise LifecycleError(
        f"operator {operator!r} cannot go from {current.value} to {to.value}: "
        + " -> ".join(s.value for s in _ORDER)
    )


class Lifecycle:
    """The operators' states at one point: what a checkpoint records, plus publications."""

    def __init__(self, states: Mapping[str, OperatorState | str], stop: StopMode | str | None = None):
        self.states = {k: OperatorState(v) for k, v in states.items()}
        self.stop = StopMode.parse(stop) if stop else None

    @classmethod
    def start(cls, body_meta: Mapping[str, Any]) -> "Lifecycle":
        return cls({name: OperatorState.RUNNING for name in operator_names(body_meta)})

    @classmethod
    def at_epoch(cls, body_meta: Mapping[str, Any], *, terminating: bool) -> "Lifecycle":
        """An epoch checkpoint's lifecycle: every operator RUNNING, or, when the epoch decided
        termination, the source and heads at END_OF_INPUT (no epoch will run again)."""
        lc = cls.start(body_meta)
        if terminating:
            lc = lc.advance(["source"] + [n for n in lc.states if n.startswith("head:")], OperatorState.END_OF_INPUT)
        return lc

    @classmethod
    def at_final(cls, body_meta: Mapping[str, Any], stop: StopMode | None = None) -> "Lifecycle":
        """The final checkpoint's lifecycle: finish flushed every operator and this checkpoint
        covers it, so all are FULLY_FINISHED (``stop``: drain when a drain ended the input)."""
        lc = cls.start(body_meta)
        for step in (OperatorState.END_OF_INPUT, OperatorState.FINISHED, OperatorState.FULLY_FINISHED):
            lc = lc.advance(lc.states, step)
        return cls(lc.states, stop)

    def advance(self, operators: Iterable[str], to: OperatorState) -> "Lifecycle":
        states = dict(self.states)
        for name in operators:
            if name not in states:
                raise LifecycleError(f"no operator {name!r} in this job; operators: {sorted(states)}")
            states[name] = transition(name, states[name], to)
        return Lifecycle(states, self.stop)

    def fully_finished(self, operator: str) -> bool:
        return _ORDER.index(self.states[operator]) >= _ORDER.index(OperatorState.FULLY_FINISHED)

    @property
    def all_fully_finished(self) -> bool:
        return bool(self.states) and all(self.fully_finished(n) for n in self.states)

    def to_dict(self) -> dict[str, Any]:
        return {"operators": {k: v.value for k, v in sorted(self.states.items())},
                "stop": self.stop.value if self.stop else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Lifecycle":
        d = d or {}
        return cls(d.get("operators", {}), d.get("stop"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lifecycle) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Lifecycle({self.to_dict()})"


__all__ = ["Lifecycle", "LifecycleError", "OperatorState", "StopMode", "operator_names", "transition"]
