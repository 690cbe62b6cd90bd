"""The views of a job the overview returns: epochs, attempts, data checks, coordinator events,
batches, outputs and the finish (dataclasses, JSON-able with ``JobOverview.to_dict``), and the
error for a job that is not there."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from include.checkpoints.layout import JobLayout, check_job_id
from include.checks.report_view import CheckView
from include.errors import ConfigError
from include.store import ObjectStore


class JobNotFound(ConfigError):
    """No job of that id in the store."""


def job_not_found(store: ObjectStore, job_id: str) -> JobNotFound:
    """The error for job ``job_id`` having nothing in ``store``; the Iterations view answers
    the same for a job the user may not see, so that the two cannot be told apart."""
    return JobNotFound(f"job {job_id!r} has no checkpoint log in {store.location()} "
                       f"(nothing under {store.location(JobLayout(check_job_id(job_id)).root)})")


@dataclass
class AttemptView:
    attempt_id: str
    status: str  # committed | aborted | running | superseded
    reason: str | None = None  # why it was aborted, as recorded
    batch_id: str | None = None  # from its plan, while the plan is kept
    run: dict[str, Any] | None = None  # who ran it (include.epoch.plan.EpochPlan.run)
    ran_by: str | None = None  # the same in words (include.checkpoints.checkpoint_log.describe_run)
    why: str | None = None  # what became of it, in a few words (None: committed or running)
    superseded_by: str | None = None  # the attempt that committed its epoch instead
    at: str | None = None  # when it was aborted


@dataclass
class EventsView:
    """What one coordinator released to one epoch: seqs [first_seq, end_seq)."""

    coordinator: str
    first_seq: int
    end_seq: int
    events: list[dict[str, Any]] | None = None  # the events, when the attempt's plan is kept

    @property
    def count(self) -> int:
        return self.end_seq - self.first_seq


@dataclass
class EpochView:
    epoch: int
    status: str
    attempts: list[AttemptView] = field(default_factory=list)
    checks: list[CheckView] = field(default_factory=list)
    events: list[EventsView] = field(default_factory=list)
    # from the committed checkpoint (None while it is not committed, or once retired)
    attempt_id: str | None = None
    batch_id: str | None = None
    committed_at: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    feedback: int | None = None
    feedback_by_head: dict[str, int] = field(default_factory=dict)
    terminated: bool = False
    reason: str | None = None
    size_bytes: int | None = None  # the manifest plus every object it references
    objects: int | None = None
    retention: str | None = None  # kept (why) | retired
    damage: str | None = None  # status damaged: why the checkpoint log refuses its manifest
    restored_by: list[str] = field(default_factory=list)  # batches that resumed from it
    # seconds per phase of the committed attempt: restore, step, alignment, checks, commit
    phases: dict[str, float] = field(default_factory=dict)
    publications: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-epoch outputs


@dataclass
class BatchView:
    batch_id: str
    epochs: list[int]  # the epochs it committed
    start_epoch: int | None  # its first epoch (recorded by a DAG run's first head)
    restored_from: int | None  # the checkpoint it resumed from (None: it started the job)
    final_checkpoint: int | None  # recorded when the batch ended
    run_id: str | None = None  # the DAG run's id as Airflow has it (the batch id is made from it)
    dag_id: str | None = None


@dataclass
class OutputView:
    name: str
    checkpoint_id: int
    rows: int
    size_bytes: int
    state: str  # lifecycle state of its sink: FULLY_FINISHED (committed, not published) | PUBLISHED
    location: str | None = None
    format: str | None = None
    published_at: str | None = None


@dataclass
class FinishView:
    checkpoint_id: int
    epoch: int  # the epoch whose variables it finished from
    attempt_id: str
    batch_id: str | None
    committed_at: str
    drained: bool
    size_bytes: int
    lifecycle: dict[str, str]
    outputs: list[OutputView]
    checks: list[CheckView]


@dataclass
class GenerationView:
    """One generation of the job (include.runs.generations): a checkpoint log of its own."""

    job_id: str
    rewound_from: dict[str, Any] | None  # {"job_id", "epoch"}: recomputes that log from that epoch
    newest: bool  # the one that publishes; the others are superseded
    retired: bool = False  # its log was deleted (include.runs.generations.retire)
    # why it began (on_input_change=restart): "input changed: <what changed, first lines>"; None: a rewind
    restarted: str | None = None


@dataclass
class JobOverview:
    job_id: str
    store: str
    status: str  # RUNNING | TERMINATING | TERMINATED | SUSPENDED | NOT STARTED
    body: dict[str, Any]
    metric: str | None  # the metric charted per epoch
    metric_names: list[str]
    latest_checkpoint: int | None
    kept_checkpoints: list[int]
    retired_checkpoints: list[int]
    savepoints: list[int]
    stop_request: str | None
    epochs: list[EpochView]
    batches: list[BatchView]
    finish: FinishView | None
    rejected: list[int]
    generations: list[GenerationView] = field(default_factory=list)  # none: the job was never rewound
    # committed checkpoints whose manifest is refused (its epoch's ``damage`` says why): neither kept nor retired
    damaged_checkpoints: list[int] = field(default_factory=list)
    # the job is a fork (include.runs.forks): {"job_id", "checkpoint_id", "epoch"} of its parent; None: not one
    forked_from: dict[str, Any] | None = None
    # the forks of this job in the same store: {"job_id", "checkpoint_id", "epoch"} each, by job id
    forks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for e, view in zip(d["epochs"], self.epochs):
            for ev, src in zip(e["events"], view.events):
                ev["count"] = src.count
        return d
