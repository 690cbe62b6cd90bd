"""What an attempt runs (``EpochPlan``, stored as its _PLAN.json) and a job's state at its
latest checkpoint (``JobState``)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from include.checkpoints.head_state import AlignmentDecision, EpochReport, FileRef
from include.checkpoints.layout import JobLayout
from include.checkpoints.manifest import DatasetRef
from include.contract.config import InputSpec
from include.epoch.aligner import Aligner, TerminationCriteria

log = logging.getLogger("iterations")


def head_partitions(body: Mapping[str, Any], num_partitions: int) -> dict[str, int]:
    """Every head's number of partitions, from the body's metadata (``IterationBody.describe``):
    its own (``head_partitions``), else the job's ``num_partitions``."""
    own = body.get("head_partitions", {})
    return {h: int(own.get(h, num_partitions)) for h in body["heads"]}


@dataclass(frozen=True)
class EpochPlan:
    """Everything the Spark side needs to run one attempt; stored as the attempt's _PLAN.json."""

    job_id: str
    kind: str  # "epoch" or "final"
    checkpoint_id: int  # the epoch number for epoch plans
    attempt_id: str
    batch_id: str | None
    parent_id: int | None
    body: dict[str, Any]  # IterationBody.describe() plus "params"
    input: dict[str, Any]
    num_partitions: int
    store: dict[str, Any]  # store spec, no secrets
    restore: dict[str, dict[str, Any]] | None  # parent's variables (DatasetRef dicts)
    head_state: dict[str, Any]  # parent's head state, redistributed to num_partitions
    max_epochs: int | None  # None: no limit
    tolerance: float | None
    # the checkpoint epoch 0 warm-starts from ({"job_id", "checkpoint_id"}), in another job's log
    warm_start: dict[str, Any] | None = None
    # the job is a fork of another's checkpoint ({"job_id", "checkpoint_id", "epoch"}: include.runs.forks)
    forked_from: dict[str, Any] | None = None
    # "drain" for a finish that a drain request started before the job terminated by itself
    stop: str | None = None
    # the epoch's inbox (coordinator -> its events, as dicts) and the coordinators' snapshots
    # taken when this checkpoint was triggered (include.epoch.coordinators)
    events: dict[str, list[dict[str, Any]]] | None = None
    coordinators: dict[str, Any] | None = None
    # the tail profiles what it writes for the data checks (off when the job's checks are)
    profile: bool = True
    # the parent checkpoint's convergence metrics (the data checks' ``previous__<metric>``)
    parent_metrics: dict[str, float] | None = None
    # who ran the attempt, for people reading the job's history (include.runs.overview): an Airflow
    # task's {"dag_id", "run_id", "task_id", "try_number"}, or the library runner's
    # {"runner": "library", "host", "pid"}; never part of what an adopted attempt must match
    run: dict[str, Any] | None = None
    # the tail references the restored checkpoint's file of a partition whose new bytes are the
    # same instead of writing it again (``shareable``; docs/design.md, rules of the store); off for
    # a full checkpoint (JobConfig.full_checkpoint_every) and for the finish
    share_unchanged: bool = False
    # a reviewed job's per-epoch outputs not published yet, carried into the checkpoint this
    # attempt commits (include.checkpoints.manifest.Manifest.pending_outputs, as dicts)
    pending_outputs: dict[str, dict[str, Any]] | None = None
    adopted: bool = False  # a complete earlier attempt is reused instead of running again

    @property
    def epoch(self) -> int:
        return self.checkpoint_id

    @property
    def first_of_fork(self) -> bool:
        """The plan is a fork's first epoch: it restores the copy of its parent's checkpoint,
        computed by the parent's params (include.runs.forks)."""
        return self.forked_from is not None and self.kind == "epoch" \
            and self.parent_id == self.forked_from.get("checkpoint_id")

    @property
    def heads(self) -> dict[str, list[str]]:
        return self.body["heads"]

    def identity(self) -> dict[str, Any]:
        """What must match for an earlier attempt to be adopted in place of a new one."""
        d = asdict(self)
        for k in ("attempt_id", "batch_id", "adopted", "store", "run"):
            d.pop(k)
        return d

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("adopted")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], adopted: bool = False) -> "EpochPlan":
        return cls(**{**d, "adopted": adopted})

    def partitions_of(self, head: str) -> int:
        """The number of partitions of head ``head``: its own (the body's ``head_partitions``),
        else the job's (outputs always have the job's)."""
        return head_partitions(self.body, self.num_partitions).get(head, self.num_partitions)

    def head_partitions(self) -> dict[str, int]:
        """Every head's number of partitions."""
        return head_partitions(self.body, self.num_partitions)

    def aligner(self) -> Aligner:
        criteria = TerminationCriteria(self.max_epochs, self.tolerance, self.body.get("convergence_metric"))
        return Aligner(self.head_partitions(), criteria, self.body.get("metric_aggregations"))

    def input_spec(self) -> InputSpec:
        return InputSpec.from_dict(self.input)

    def pending_datasets(self) -> dict[int, dict[str, DatasetRef]]:
        return {int(cid): {k: DatasetRef.from_dict(v) for k, v in outputs.items()}
                for cid, outputs in (self.pending_outputs or {}).items()}

    def restore_datasets(self) -> dict[str, DatasetRef]:
        return {k: DatasetRef.from_dict(v) for k, v in (self.restore or {}).items()}

    def shareable(self) -> dict[str, dict[int, FileRef]]:
        """head -> partition -> the one file of that partition in the checkpoint the plan
        restores, which the attempt's report may name instead of a file of its own when its
        bytes are the same (``share_unchanged``). Only files of this job's own attempts, in
        partitions the head still has: nothing of another job (a warm start's), and nothing
        when the partitioning changed. The tail writes by this rule and the commit checks by it."""
        if not self.share_unchanged or self.kind != "epoch":
            return {}
        layout = JobLayout(self.job_id)
        own = layout.attempts()
        out: dict[str, dict[int, FileRef]] = {}
        for head, ds in self.restore_datasets().items():
            if head not in self.heads or len(ds.partitions) != self.partitions_of(head):
                continue
            files = {p: part[0] for p, part in enumerate(ds.partitions)
                     if len(part) == 1 and layout.holds(part[0].key, own)}
            if files:
                out[head] = files
        return out


Check = Callable[[EpochPlan, AlignmentDecision, Sequence[EpochReport]], None]


# Python checks besides the data checks (include.checks), for tests and embedders: a callable
# that raises DataCheckFailed refuses the attempt. None by default.
DEFAULT_CHECKS: tuple[Check, ...] = ()
