"""The global aligner: an epoch is aligned once every partition of every head has reported, and
then decides (epoch, terminated) by the termination criteria."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from include.checkpoints.head_state import METRIC_AGGREGATIONS, AlignmentDecision, EpochReport, UnexpectedEpoch
from include.errors import AlignmentIncomplete, CheckpointError, ConfigError


@dataclass(frozen=True)
class TerminationCriteria:
    """Flink's TerminateOnMaxIterOrTol, plus termination on an empty feedback round."""

    max_epochs: int | None  # None: no limit
    tolerance: float | None = None
    convergence_metric: str | None = None

    def __post_init__(self) -> None:
        if self.max_epochs is not None and (isinstance(self.max_epochs, bool) or not isinstance(self.max_epochs, int)
                                            or self.max_epochs < 1):
            raise ConfigError(f"max_epochs must be an integer >= 1 or None, got {self.max_epochs!r}")
        if self.tolerance is not None and not (
            isinstance(self.tolerance, (int, float)) and math.isfinite(self.tolerance) and self.tolerance >= 0
        ):
            raise ConfigError(f"tolerance must be a finite number >= 0, got {self.tolerance!r}")

    def reason(self, epoch: int, feedback: int, metrics: Mapping[str, float]) -> str | None:
        """Why the job terminates after epoch ``epoch`` (its total feedback count and combined
        metrics), None if it goes on: the one rule the aligner decides by, and a fork re-decides
        its starting checkpoint by (include.runs.forks)."""
        if feedback == 0:
            return "no feedback records"
        if (self.convergence_metric is not None and self.tolerance is not None
                and metrics.get(self.convergence_metric, math.inf) < self.tolerance):
            return (f"converged: {self.convergence_metric}={metrics[self.convergence_metric]:.3e} "
                    f"< tolerance {self.tolerance:g}")
        if self.max_epochs is not None and epoch + 1 >= self.max_epochs:
            return f"max epochs reached ({self.max_epochs})"
        return None


def missing_reports(expected: Mapping[str, int], seen: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Which reports an epoch still waits for: (head, partition) of every partition of every
    head in ``expected`` (head -> partitions) that is not in ``seen``, in order. The one rule the
    aligner, the alignment coordinator and the Airflow trigger wait on."""
    got = set(seen)
    return [(head, p) for head, n in sorted(expected.items()) for p in range(n) if (head, p) not in got]


class Aligner:
    """Turns a complete set of per-partition reports into one decision. Moves no data."""

    def __init__(
        self,
        heads: Mapping[str, int],
        criteria: TerminationCriteria,
        metric_aggregations: Mapping[str, str] | None = None,
    ):
        self.heads = dict(heads)
        self.criteria = criteria
        self.metric_aggregations = dict(metric_aggregations or {})
        for name, agg in self.metric_aggregations.items():
            if agg not in METRIC_AGGREGATIONS:
                raise ConfigError(
                    f"metric {name!r} has aggregation {agg!r}; accepted: {', '.join(METRIC_AGGREGATIONS)}"
                )
        metric = criteria.convergence_metric
        if metric is not None and metric not in self.metric_aggregations:
            raise ConfigError(
                f"convergence metric {metric!r} is not reported; reported metrics: "
                f"{sorted(self.metric_aggregations) or 'none'}"
            )

    def missing(self, reports: Iterable[EpochReport]) -> list[tuple[str, int]]:
        return missing_reports(self.heads, ((r.head, r.partition) for r in reports))

    def align(self, epoch: int, attempt_id: str, reports: Sequence[EpochReport]) -> AlignmentDecision:
        for r in reports:
            if r.epoch != epoch or r.attempt_id != attempt_id:
                # another epoch's report (an unexpected epoch watermark), or another attempt's
                raise (UnexpectedEpoch if r.epoch != epoch else CheckpointError)(
                    f"report of {r.head}/{r.partition} belongs to epoch {r.epoch} attempt "
                    f"{r.attempt_id}, not to epoch {epoch} attempt {attempt_id}"
                )
            if r.head not in self.heads or not 0 <= r.partition < self.heads[r.head]:
                raise CheckpointError(
                    f"unexpected report for head {r.head!r} partition {r.partition}; "
                    f"expected heads {self.heads}"
                )
        missing = self.missing(reports)
        if missing:
            shown = ", ".join(f"{h}/{p}" for h, p in missing[:8])
            more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
            raise AlignmentIncomplete(
                f"epoch {epoch} attempt {attempt_id}: no report yet from {shown}{more}"
            )
        feedback = sum(r.feedback_count for r in reports)
        metrics = self.combine_metrics(reports)
        reason = self.criteria.reason(epoch, feedback, metrics)
        return AlignmentDecision(epoch, attempt_id, reason is not None, reason, feedback, metrics)

    def combine_metrics(self, reports: Iterable[EpochReport]) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, agg in self.metric_aggregations.items():
            values = [r.metrics[name] for r in reports if name in r.metrics]
            if not values:
                continue
            if any(math.isnan(v) for v in values):
                out[name] = math.nan  # the check phase refuses it with the metric's name
            elif agg == "sum":
                out[name] = math.fsum(values)
            elif agg == "max":
                out[name] = max(values)
            else:
                out[name] = min(values)
        return out
