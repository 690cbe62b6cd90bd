"""Configuration of an iteration job, validated on construction with precise errors."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping
from urllib.parse import urlparse

from include.errors import ConfigError
from include.layout import check_job_id

INPUT_FORMATS = ("csv", "parquet", "json")
OUTPUT_FORMATS = ("parquet", "delta")
ON_DAMAGED = ("fail", "previous")
_EXTENSIONS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json"}


@dataclass(frozen=True)
class InputSpec:
    """A static input read by every epoch: a file or a directory/prefix of files."""

    path: str
    format: str | None = None  # inferred from the extension when None
    options: dict[str, str] = field(default_factory=dict)  # e.g. {"header": "true"} for CSV

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise ConfigError(f"input path must be a non-empty string, got {self.path!r}")
        if self.format is None:
            ext = os.path.splitext(urlparse(self.path).path.rstrip("/"))[1].lower()
            object.__setattr__(self, "format", _EXTENSIONS.get(ext, "parquet"))
        if self.format not in INPUT_FORMATS:
            raise ConfigError(f"input format {self.format!r} is not supported; accepted: {', '.join(INPUT_FORMATS)}")

    @property
    def is_s3(self) -> bool:
        return urlparse(self.path).scheme in ("s3", "s3a")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "InputSpec":
        return cls(d["path"], d.get("format"), dict(d.get("options") or {}))


@dataclass(frozen=True)
class JobConfig:
    """Everything that defines one iteration job. ``job_id`` names its checkpoint log."""

    job_id: str
    body: str  # registered name ("pagerank", "kmeans") or "package.module:Class"
    input: InputSpec
    checkpoint_root: str  # local directory or s3://bucket/prefix
    output_path: str | None = None  # where finish publishes outputs; None: keep them in the checkpoint
    output_format: str = "parquet"  # "parquet" (files + _PUBLISHED.json) or "delta" (a Delta Lake table per output)
    body_params: dict[str, Any] = field(default_factory=dict)
    max_epochs: int = 50
    tolerance: float | None = 1e-6
    num_partitions: int = 4
    retain_last: int = 3
    # the data checks: {"enabled": bool, "expectations": [...]} (include.checks), merged over
    # the runtime's and the body's expectations; None: those alone
    checks: dict[str, Any] | None = None
    # a damaged latest checkpoint: "fail" (refuse, the default) or "previous" (verify restores in
    # full and fall back to the newest intact checkpoint, recomputing the epochs after it)
    on_damaged_checkpoint: str = "fail"

    def __post_init__(self) -> None:
        check_job_id(self.job_id)
        if isinstance(self.input, (str, os.PathLike)):
            object.__setattr__(self, "input", InputSpec(os.fspath(self.input)))
        elif isinstance(self.input, Mapping):
            object.__setattr__(self, "input", InputSpec.from_dict(self.input))
        if not isinstance(self.body, str) or not self.body:
            raise ConfigError(f"body must be a registered body name or 'module:Class', got {self.body!r}")
        if not isinstance(self.checkpoint_root, str) or not self.checkpoint_root:
            raise ConfigError(f"checkpoint_root must be a local path or s3://bucket/prefix, got {self.checkpoint_root!r}")
        if self.output_format not in OUTPUT_FORMATS:
            raise ConfigError(f"output_format {self.output_format!r} is not supported; accepted: {', '.join(OUTPUT_FORMATS)}")
        if self.on_damaged_checkpoint not in ON_DAMAGED:
            raise ConfigError(f"on_damaged_checkpoint must be one of {', '.join(ON_DAMAGED)}, "
                              f"got {self.on_damaged_checkpoint!r}")
        _check_int("max_epochs", self.max_epochs, 1, 1_000_000)
        _check_int("num_partitions", self.num_partitions, 1, 100_000)
        _check_int("retain_last", self.retain_last, 1, 1_000_000)
        if self.tolerance is not None and (
            isinstance(self.tolerance, bool)
            or not isinstance(self.tolerance, (int, float))
            or not math.isfinite(self.tolerance)
            or self.tolerance < 0
        ):
            raise ConfigError(f"tolerance must be a finite number >= 0 (or None), got {self.tolerance!r}")
        if self.output_path is not None:
            if not isinstance(self.output_path, str) or not self.output_path:
                raise ConfigError(f"output_path must be a local path or s3://bucket/prefix, got {self.output_path!r}")
            from include.paths import check_output_path

            check_output_path(self.output_path, [self.checkpoint_root])
        if not isinstance(self.body_params, Mapping):
            raise ConfigError(f"body_params must be a mapping, got {type(self.body_params).__name__}")
        from include.checks import CheckSettings

        if self.checks is not None:
            object.__setattr__(self, "checks", CheckSettings.parse(self.checks).to_dict())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["input"] = self.input.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "JobConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown job settings {sorted(unknown)}; accepted: {sorted(known)}")
        return cls(**dict(d))


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
