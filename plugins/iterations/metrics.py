"""Per-epoch metrics through Airflow's ``Stats`` (StatsD, DogStatsD or OpenTelemetry, as the
deployment's ``[metrics]`` section configures): a committed epoch's duration, its convergence
metrics, its feedback count and its checkpoint's bytes. Names and meaning: docs/airflow.md,
"Metrics".

Each figure goes out twice: under a fixed name with the DAG and the job as tags (for backends
that keep tags: OpenTelemetry, DogStatsD, StatsD with InfluxDB tags), and under a name that
carries them, ``iterations.<dag_id>.<job_id>.<figure>``, for plain StatsD, which drops tags
(the way Airflow's own legacy metric names carry the DAG and task ids)."""

from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "iterations"
#: Airflow refuses a metric name longer than this (and characters other than ``_UNSAFE`` leaves).
MAX_NAME = 250
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")


def _part(name: str) -> str:
    """One dot-separated part of a metric name: a DAG id, a job id, a body's metric name.
    Airflow's names allow letters, digits, ``_ . -``; a dot inside a part would add a level."""
    return _UNSAFE.sub("_", name)


def epoch_figures(decision: Any, manifest: Any, seconds: float | None) -> dict[str, tuple[str, float]]:
    """A committed epoch's figures: name -> (kind, value); kind is ``timing`` (milliseconds),
    ``gauge`` or ``count``. ``seconds``: the epoch's duration, when known."""
    figures: dict[str, tuple[str, float]] = {
        "epoch.committed": ("count", 1.0),
        "epoch.feedback": ("gauge", float(decision.feedback_count)),
        "epoch.checkpoint_bytes": ("gauge", float(sum(f.size for f in manifest.objects))),
        "epoch.number": ("gauge", float(decision.epoch)),
    }
    if seconds is not None:
        figures["epoch.duration"] = ("timing", seconds * 1000.0)
    for name, value in sorted((decision.metrics or {}).items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[f"epoch.metric.{_part(name)}"] = ("gauge", float(value))
    return figures


def emit_epoch(dag_id: str, job_id: str, decision: Any, manifest: Any, seconds: float | None) -> dict[str, float]:
    """Send a committed epoch's figures through Airflow's Stats; returns them (name -> value)."""
    stats = _stats()
    tags = {"dag_id": dag_id, "job_id": job_id}
    scope = f"{PREFIX}.{_part(dag_id)}.{_part(job_id)}"
    sent: dict[str, float] = {}
    for name, (kind, value) in epoch_figures(decision, manifest, seconds).items():
        for stat, stat_tags in ((f"{PREFIX}.{name}", tags), (f"{scope}.{name}", None)):
            if len(stat) > MAX_NAME:
                log.warning("metric %s is longer than %d characters: not sent", stat[:80] + "...", MAX_NAME)
                continue
            if kind == "timing":
                stats.timing(stat, value, tags=stat_tags)
            elif kind == "count":
                stats.incr(stat, int(value), tags=stat_tags)
            else:
                stats.gauge(stat, value, tags=stat_tags)
        sent[name] = value
    return sent


def _stats() -> Any:
    """Airflow's Stats, its backend made from ``[metrics]`` when this process has none yet. A
    task's own process gets one as it starts; ``airflow dags test`` runs the tasks in its own
    process, where nothing makes one, and Stats would drop everything."""
    from airflow.sdk._shared.observability.metrics import stats as backend  # where Stats keeps it
    from airflow.sdk.observability import stats

    if getattr(backend, "_factory", None) is None:
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability.metrics import stats_utils

        stats.initialize(factory=stats_utils.get_stats_factory(),
                         export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True))
    return stats
