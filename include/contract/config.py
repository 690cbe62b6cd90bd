"""Configuration of an iteration job, validated on construction with precise errors."""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping
from urllib.parse import urlparse

from include.checkpoints.layout import FORK_FROM_REGEX, check_job_id
from include.checks import CheckSettings
from include.contract.parameters import Parameter
from include.errors import ConfigError
from include.store import Location, check_output_outside_checkpoints

INPUT_FORMATS = ("csv", "parquet", "json")
OUTPUT_FORMATS = ("parquet", "delta")
ON_DAMAGED = ("fail", "previous")
# A job's bounded settings, declared once: JobConfig checks them, and the DAGs' params take
# their schemas from them (iterations.dag_factory.job_params).
SETTINGS: dict[str, Parameter] = {p.name: p for p in (
    Parameter("max_epochs", 50, "The job terminates after this many epochs; null: never by count (convergence, "
              "the end of its input or a stop ends it).",
              {"type": ["null", "integer"], "minimum": 1, "maximum": 1_000_000_000}),
    Parameter("num_partitions", None, "Partitions of the feedback datasets; may change between runs. null: "
              "derived from the input's size when the job's log starts (one per 64 MiB, at least 4; include.contract.sizing).",
              {"type": ["null", "integer"], "minimum": 1, "maximum": 100_000}),
    Parameter("retain_last", 3, "Committed checkpoints kept (besides each batch's final one and savepoints).",
              {"type": "integer", "minimum": 1, "maximum": 1_000_000}),
    Parameter("retain_batches", None, "Batches whose final checkpoint is kept for a recompute of the batch "
              "(the newest ones); null: every batch's. Bound it for a job that runs batch after batch.",
              {"type": ["null", "integer"], "minimum": 0, "maximum": 1_000_000}),
    Parameter("retain_history", None, "Retired checkpoints whose summary (metrics, decision) the job's history keeps "
              "(the newest ones; older ones are forgotten with their batch records); null: all.",
              {"type": ["null", "integer"], "minimum": 0, "maximum": 100_000_000}),
    Parameter("full_checkpoint_every", 10, "An epoch whose number is a multiple of this writes every partition of "
              "its variables; the others reference the previous checkpoint's file of each partition whose bytes are "
              "unchanged instead of writing it again. 1: every checkpoint is full.",
              {"type": "integer", "minimum": 1, "maximum": 1_000_000}),
    Parameter("output_format", "parquet", "parquet: files behind a _PUBLISHED.json manifest; delta: a Delta "
              "Lake table per output, one version per published batch.", {"type": "string", "enum": list(OUTPUT_FORMATS)}),
    Parameter("on_damaged_checkpoint", "fail", "If the latest checkpoint is found damaged: fail (refuse it, the "
              "default), or previous (verify restores in full and fall back to the newest intact checkpoint, "
              "recomputing the epochs after it).", {"type": "string", "enum": list(ON_DAMAGED)}),
)}
def canonical_location(value: Any, what: str) -> Location:
    """The canonical location of a trusted caller's ``value`` (the library's, a DAG author's):
    a relative local path is taken from the working directory. A run's untrusted values are
    admitted by include.store.AllowedRoots before they get here, and never relative."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and value and not value.startswith("/") and "://" not in value \
            and not value.lower().startswith("file:") and not value.startswith("-"):
        value = os.path.abspath(value)
    return Location.parse(value, what)


_EXTENSIONS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json"}


@dataclass(frozen=True)
class InputSpec:
    """A static input read by every epoch: a file or a directory/prefix of files."""

    path: str
    format: str | None = None  # inferred from the extension when None
    options: dict[str, str] = field(default_factory=dict)  # e.g. {"header": "true"} for CSV
    # a published output read as input: the one version (its files) the job reads, fixed at its
    # first epoch (include.publication.pinned_inputs.pin_input); None: the files at ``path``, as they are
    published: dict[str, Any] | None = None
    # any other input: its files as the log's first plan found them, each with its size and
    # content identity (include.publication.pinned_inputs.pin_input), and when; None: the files at ``path``, as
    # they are (a job's configuration, before its log pinned anything)
    files: list[dict[str, Any]] | None = None
    pinned_at: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise ConfigError(f"input path must be a non-empty string, got {self.path!r}")
        object.__setattr__(self, "path", canonical_location(self.path, "input path").url)
        if self.format is None:
            ext = os.path.splitext(urlparse(self.path).path.rstrip("/"))[1].lower()
            object.__setattr__(self, "format", _EXTENSIONS.get(ext, "parquet"))
        if self.format not in INPUT_FORMATS:
            raise ConfigError(f"input format {self.format!r} is not supported; accepted: {', '.join(INPUT_FORMATS)}")
        if self.published is not None:
            from include.contract.input_versions import check_pinned

            object.__setattr__(self, "published", check_pinned(self.published, f"input {self.path}"))
        if self.files is not None:
            from include.contract.input_versions import check_pinned_files

            if self.published is not None:
                raise ConfigError(f"input {self.path}: pinned either as a published version or by its files, not both")
            object.__setattr__(self, "files", check_pinned_files(self.files, f"input {self.path}"))
        if self.pinned_at is not None and (not isinstance(self.pinned_at, str) or len(self.pinned_at) > 64):
            raise ConfigError(f"input {self.path}: pinned_at {self.pinned_at!r} is not a time")

    @property
    def is_s3(self) -> bool:
        return self.location.is_s3

    @property
    def location(self) -> Location:
        """Where the input is, canonical (include.store): what the data plane opens."""
        return Location.parse(self.path, "input path")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("published", "files", "pinned_at"):
            if d[key] is None:  # the form every earlier record (a job's owner) has
                del d[key]
        return d

    @property
    def pinned(self) -> bool:
        """True once the log's pin is applied (a published version or the files)."""
        return self.published is not None or self.files is not None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "InputSpec":
        return cls(d["path"], d.get("format"), dict(d.get("options") or {}), d.get("published"), d.get("files"),
                   d.get("pinned_at"))


@dataclass(frozen=True)
class ForkFrom:
    """Where a fork starts (``JobConfig.fork_from``): job ``job_id``'s checkpoint of epoch
    ``epoch``, or, with no epoch, its newest kept epoch checkpoint."""

    job_id: str
    epoch: int | None = None

    @classmethod
    def parse(cls, value: Any) -> "ForkFrom":
        """``JOB`` or ``JOB:EPOCH``; ConfigError naming the value otherwise."""
        text = value if isinstance(value, str) else ""
        job, sep, epoch = text.partition(":")
        if not re.fullmatch(FORK_FROM_REGEX, text):
            raise ConfigError(f"fork_from must be JOB or JOB:EPOCH (a job id of this checkpoint store, then an "
                              f"epoch number: pagerank:3), got {str(value)[:200]!r}")
        return cls(job, int(epoch) if sep else None)

    def __str__(self) -> str:
        return self.job_id if self.epoch is None else f"{self.job_id}:{self.epoch}"


@dataclass(frozen=True)
class JobConfig:
    """Everything that defines one iteration job. ``job_id`` names its checkpoint log."""

    job_id: str
    body: str  # registered name ("pagerank", "kmeans") or "package.module:Class"
    input: InputSpec
    checkpoint_root: str  # local directory or s3://bucket/prefix
    output_path: str | None = None  # where finish publishes outputs; None: keep them in the checkpoint
    output_format: str = SETTINGS["output_format"].default  # "parquet" (files + _PUBLISHED.json) or "delta"
    body_params: dict[str, Any] = field(default_factory=dict)
    max_epochs: int | None = SETTINGS["max_epochs"].default  # None: no limit (HeadOperatorTest's unbounded iteration)
    tolerance: float | None = 1e-6
    num_partitions: int | None = SETTINGS["num_partitions"].default  # None: from the input's size (include.contract.sizing)
    retain_last: int = SETTINGS["retain_last"].default
    retain_batches: int | None = SETTINGS["retain_batches"].default
    retain_history: int | None = SETTINGS["retain_history"].default
    # epochs that are multiples of it write full checkpoints; the others share unchanged partitions
    full_checkpoint_every: int = SETTINGS["full_checkpoint_every"].default
    # the data checks: {"enabled": bool, "expectations": [...]} (include.checks), merged over
    # the runtime's and the body's expectations; None: those alone
    checks: dict[str, Any] | None = None
    # a damaged latest checkpoint: "fail" (refuse, the default) or "previous" (verify restores in
    # full and fall back to the newest intact checkpoint, recomputing the epochs after it)
    on_damaged_checkpoint: str = SETTINGS["on_damaged_checkpoint"].default
    # a new job started from another job's committed checkpoint, in the same checkpoint store:
    # "JOB" (its newest kept epoch checkpoint) or "JOB:EPOCH" (include.runs.forks); None: from epoch 0
    fork_from: str | None = None

    def __post_init__(self) -> None:
        check_job_id(self.job_id)
        if self.fork_from is not None:
            source = ForkFrom.parse(self.fork_from)
            if source.job_id == self.job_id:
                raise ConfigError(f"fork_from {self.fork_from!r} names job {self.job_id} itself: a fork is a new job "
                                  "(another job_id); to recompute a job from an epoch, rewind it (rewind_to)")
            object.__setattr__(self, "fork_from", str(source))
        if isinstance(self.input, (str, os.PathLike)):
            object.__setattr__(self, "input", InputSpec(os.fspath(self.input)))
        elif isinstance(self.input, Mapping):
            object.__setattr__(self, "input", InputSpec.from_dict(self.input))
        if not isinstance(self.body, str) or not self.body:
            raise ConfigError(f"body must be a registered body name or 'module:Class', got {self.body!r}")
        if isinstance(self.checkpoint_root, os.PathLike):
            object.__setattr__(self, "checkpoint_root", os.fspath(self.checkpoint_root))
        if not isinstance(self.checkpoint_root, str) or not self.checkpoint_root:
            raise ConfigError(f"checkpoint_root must be a local path or s3://bucket/prefix, got {self.checkpoint_root!r}")
        object.__setattr__(self, "checkpoint_root", canonical_location(self.checkpoint_root, "checkpoint_root").url)
        for name, setting in SETTINGS.items():  # checked, and as the check takes them (2.0 -> 2)
            object.__setattr__(self, name, setting.check(getattr(self, name)))
        if self.tolerance is not None and (
            isinstance(self.tolerance, bool)
            or not isinstance(self.tolerance, (int, float))
            or not math.isfinite(self.tolerance)
            or self.tolerance < 0
        ):
            raise ConfigError(f"tolerance must be a finite number >= 0 (or None), got {self.tolerance!r}")
        if isinstance(self.output_path, os.PathLike):
            object.__setattr__(self, "output_path", os.fspath(self.output_path))
        if self.output_path is not None:
            if not isinstance(self.output_path, str) or not self.output_path:
                raise ConfigError(f"output_path must be a local path or s3://bucket/prefix, got {self.output_path!r}")

            output = canonical_location(self.output_path, "output_path")
            object.__setattr__(self, "output_path", output.url)
            check_output_outside_checkpoints(output, [self.checkpoint_root])
        if not isinstance(self.body_params, Mapping):
            raise ConfigError(f"body_params must be a mapping, got {type(self.body_params).__name__}")

        if self.checks is not None:
            object.__setattr__(self, "checks", CheckSettings.parse(self.checks).to_dict())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["input"] = self.input.to_dict()
        return d

    @property
    def checkpoint_location(self) -> Location:
        return Location.parse(self.checkpoint_root, "checkpoint_root")

    @property
    def fork_source(self) -> ForkFrom | None:
        """``fork_from`` parsed; None for a job that does not fork another."""
        return ForkFrom.parse(self.fork_from) if self.fork_from is not None else None

    @property
    def output_location(self) -> Location | None:
        return Location.parse(self.output_path, "output_path") if self.output_path else None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "JobConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown job settings {sorted(unknown)}; accepted: {sorted(known)}")
        return cls(**dict(d))

