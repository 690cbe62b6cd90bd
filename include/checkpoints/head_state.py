"""Head state and the per-partition epoch reports an aligner turns into a decision (include.epoch.aligner).

Translated from flink-ml's iteration head (``HeadOperatorState``, ``SubtaskAlignedEvent``,
``SharedProgressAligner``): every partition of every head reports, for one attempt of an
epoch, how many feedback records it wrote and its partial metrics; once every partition has
reported, the aligner turns the reports into one ``(epoch, terminated)`` decision.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any, Iterable, Mapping, Sequence

from include.errors import CheckpointCorrupted, CheckpointError, ConfigError

# How partial metrics of partitions combine into the epoch's value.
METRIC_AGGREGATIONS = ("sum", "max", "min")


class UnexpectedEpoch(CheckpointError):
    """A report or a global alignment decision arrived for an epoch the receiving side does not
    expect (flink-ml's head refuses an unexpected epoch watermark or globally aligned event):
    an epoch already decided, or another epoch than the one being aligned. The message names
    the epoch expected and the epoch received."""


class HeadStatus(str, Enum):
    RUNNING = "RUNNING"  # epochs go on
    TERMINATING = "TERMINATING"  # termination decided; only the finish step remains
    TERMINATED = "TERMINATED"  # finished: outputs committed
    SUSPENDED = "SUSPENDED"  # a run's result only: stopped at a savepoint, resumes when run again


@dataclass(frozen=True)
class FileRef:
    """An object written by an attempt, as a manifest lists it."""

    key: str
    size: int
    sha256: str
    rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"key": self.key, "size": self.size, "sha256": self.sha256}
        if self.rows is not None:
            d["rows"] = self.rows
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileRef":
        return cls(d["key"], int(d["size"]), d["sha256"], d.get("rows"))


@dataclass(frozen=True)
class EpochReport:
    """What one partition of one head reports at the end of an epoch attempt (the tail's
    counterpart of Flink's SubtaskAlignedEvent)."""

    head: str
    partition: int
    epoch: int
    attempt_id: str
    feedback_count: int
    metrics: dict[str, float] = field(default_factory=dict)
    files: tuple[FileRef, ...] = ()
    schema: str = ""  # Spark StructType JSON of the written records
    # the partition's profile for the data checks (spark_jobs.storeio.Profile); None: not profiled
    profile: dict[str, Any] | None = None

    def to_json(self) -> str:
        d = asdict(self)
        d["files"] = [f.to_dict() for f in self.files]
        if d["profile"] is None:
            d.pop("profile")
        return json.dumps(d, sort_keys=True, allow_nan=True)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "an epoch report") -> "EpochReport":
        """The report in ``text``; CheckpointCorrupted naming ``where`` if it is not one."""
        try:
            d = json.loads(text)
            return cls(
                head=d["head"],
                partition=int(d["partition"]),
                epoch=int(d["epoch"]),
                attempt_id=d["attempt_id"],
                feedback_count=int(d["feedback_count"]),
                metrics={k: float(v) for k, v in d.get("metrics", {}).items()},
                files=tuple(FileRef.from_dict(f) for f in d.get("files", [])),
                schema=d.get("schema", ""),
                profile=d.get("profile"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointCorrupted(f"{where} is not an epoch report: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class PartitionState:
    """Per-partition head state: where this partition stands and what it has in flight."""

    latest_aligned: int = -1
    latest_globally_aligned: int = -1
    # Feedback records this partition holds in the log for the next epoch.
    in_flight: int = 0


@dataclass(frozen=True)
class HeadState:
    """One head (one variable dataset): feedback record totals per epoch and its partitions."""

    feedback_counts: dict[int, int] = field(default_factory=dict)
    partitions: tuple[PartitionState, ...] = ()

    @property
    def latest_aligned(self) -> int:
        return max((p.latest_aligned for p in self.partitions), default=-1)

    @property
    def latest_globally_aligned(self) -> int:
        return max((p.latest_globally_aligned for p in self.partitions), default=-1)


def _counts(heads: Sequence[str], num_partitions: int | Mapping[str, int]) -> dict[str, int]:
    """Each head's number of partitions: ``num_partitions`` for all, or by head."""
    counts = dict(num_partitions) if isinstance(num_partitions, Mapping) else {h: num_partitions for h in heads}
    for h in heads:
        n = counts.get(h)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"num_partitions of head {h!r} must be an integer >= 1, got {n!r}")
    return counts


@dataclass(frozen=True)
class JobHeadState:
    """The head state of a job, stored in every checkpoint and restored exactly."""

    status: HeadStatus = HeadStatus.RUNNING
    heads: dict[str, HeadState] = field(default_factory=dict)

    @classmethod
    def initial(cls, heads: Sequence[str], num_partitions: int | Mapping[str, int]) -> "JobHeadState":
        """Fresh state; ``num_partitions``: one count for every head, or each head's."""
        counts = _counts(heads, num_partitions)
        return cls(
            HeadStatus.RUNNING,
            {h: HeadState({}, tuple(PartitionState() for _ in range(counts[h]))) for h in heads},
        )

    @property
    def latest_globally_aligned(self) -> int:
        return min((h.latest_globally_aligned for h in self.heads.values()), default=-1)

    @property
    def num_partitions(self) -> int:
        sizes = {len(h.partitions) for h in self.heads.values()}
        return sizes.pop() if len(sizes) == 1 else 0

    def feedback_counts(self) -> dict[int, int]:
        """Total feedback records per epoch, over all heads."""
        total: dict[int, int] = {}
        for h in self.heads.values():
            for epoch, n in h.feedback_counts.items():
                total[epoch] = total.get(epoch, 0) + n
        return dict(sorted(total.items()))

    def after(self, decision: "AlignmentDecision", reports: Iterable[EpochReport]) -> "JobHeadState":
        """The state once ``decision`` is committed: epoch counted, partitions aligned.
        UnexpectedEpoch, naming both epochs, for a decision on an epoch a head is already
        globally aligned on (a stale decision: it would move the state back), or a report of
        another epoch than the decision's."""
        for name, head in sorted(self.heads.items()):
            if decision.epoch <= head.latest_globally_aligned:
                raise UnexpectedEpoch(
                    f"unexpected global alignment: head {name!r} is globally aligned up to epoch "
                    f"{head.latest_globally_aligned}, so the next decision is on epoch "
                    f"{head.latest_globally_aligned + 1} or later; received a decision on epoch {decision.epoch}"
                )
        by_head: dict[str, dict[int, EpochReport]] = {}
        for r in reports:
            if r.epoch != decision.epoch:
                raise UnexpectedEpoch(
                    f"unexpected epoch report: the decision is on epoch {decision.epoch}, the report of "
                    f"{r.head}/{r.partition} is of epoch {r.epoch}"
                )
            by_head.setdefault(r.head, {})[r.partition] = r
        heads = {}
        for name, head in self.heads.items():
            got = by_head.get(name, {})
            parts = tuple(
                PartitionState(
                    latest_aligned=decision.epoch,
                    latest_globally_aligned=decision.epoch,
                    in_flight=got[i].feedback_count if i in got else 0,
                )
                for i in range(len(head.partitions))
            )
            counts = dict(head.feedback_counts)
            counts[decision.epoch] = sum(p.in_flight for p in parts)
            heads[name] = HeadState(counts, parts)
        status = HeadStatus.TERMINATING if decision.terminated else HeadStatus.RUNNING
        return JobHeadState(status, heads)

    def with_status(self, status: HeadStatus) -> "JobHeadState":
        return replace(self, status=status)

    def redistribute(self, num_partitions: int | Mapping[str, int]) -> "JobHeadState":
        """Map the state of P partitions onto P' partitions: old partition i goes to new
        partition i mod P'. The replay reads the feedback log with the same mapping, so each
        new partition's ``in_flight`` is exactly the number of records it replays.
        ``num_partitions``: one count for every head, or each head's."""
        counts = _counts(list(self.heads), num_partitions)
        heads = {}
        for name, head in self.heads.items():
            num_partitions = counts[name]
            if len(head.partitions) == num_partitions:
                heads[name] = head
                continue
            aligned = head.latest_aligned
            globally = head.latest_globally_aligned
            in_flight = [0] * num_partitions
            for i, p in enumerate(head.partitions):
                in_flight[i % num_partitions] += p.in_flight
            heads[name] = HeadState(
                dict(head.feedback_counts),
                tuple(PartitionState(aligned, globally, n) for n in in_flight),
            )
        return JobHeadState(self.status, heads)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "heads": {
                name: {
                    "feedback_counts": {str(k): v for k, v in sorted(h.feedback_counts.items())},
                    "partitions": [asdict(p) for p in h.partitions],
                }
                for name, h in sorted(self.heads.items())
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "JobHeadState":
        return cls(
            HeadStatus(d["status"]),
            {
                name: HeadState(
                    {int(k): int(v) for k, v in h["feedback_counts"].items()},
                    tuple(PartitionState(**p) for p in h["partitions"]),
                )
                for name, h in d["heads"].items()
            },
        )


@dataclass(frozen=True)
class AlignmentDecision:
    """The global alignment of one epoch attempt (Flink's GloballyAlignedEvent)."""

    epoch: int
    attempt_id: str
    terminated: bool
    reason: str | None
    feedback_count: int
    metrics: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AlignmentDecision":
        return cls(
            epoch=int(d["epoch"]),
            attempt_id=d["attempt_id"],
            terminated=bool(d["terminated"]),
            reason=d.get("reason"),
            feedback_count=int(d["feedback_count"]),
            metrics={k: float(v) for k, v in d.get("metrics", {}).items()},
        )


