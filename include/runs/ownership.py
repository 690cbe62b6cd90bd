"""Who a job belongs to: the owner record (the lease, which run may write, is include.runs.leases).

**Owner.** A job (one checkpoint log) belongs to the DAG, body, input and output path that
started it: ``jobs/<job_id>/owner.json``, created once (create-if-absent) by the first run that
claims the job. A later run that differs in any of them is refused with an error that names the
owner and the difference, unless it takes the job over explicitly (``take_over``: the record is
replaced, the earlier owners kept in its ``previous`` list). ``dag_id`` None is a run outside
Airflow (the library runner, ``spark_jobs.run_job``).

Nothing here imports Spark or Airflow. Everything read back from the store is checked before
use: a record of the wrong shape counts as damaged (``CheckpointCorrupted``).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping

from include.checkpoints.layout import JobLayout
from include.errors import CheckpointCorrupted, ConfigError, IterationError, ObjectNotFound
from include.store import Location, LocationError, ObjectStore

log = logging.getLogger("iterations")

OWNER_FORMAT = "iterations.owner/1"
# Airflow's DAG id pattern (letters, digits, '_', '-', '.'; at most 250 characters)
DAG_ID_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,250}")


class OwnershipError(ConfigError):
    """A run differs from the job's owner (another DAG, body, input or output path)."""


class JobBusy(IterationError):
    """Another live run holds the job's lease."""


class LeaseLost(IterationError):
    """This run's lease was taken over by another run: it may not write any more."""


# --- the owner ---------------------------------------------------------------------------------


def wall_clock() -> float:
    return time.time()


def iso_time(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class JobOwner:
    """What a job belongs to. ``body``: the body's reference (``package.module:Class``)."""

    dag_id: str | None
    body: str
    input: Mapping[str, Any]
    output_path: str | None

    def __post_init__(self) -> None:
        if self.dag_id is not None and (not isinstance(self.dag_id, str) or not DAG_ID_PATTERN.fullmatch(self.dag_id)):
            raise ConfigError(f"invalid DAG id {self.dag_id!r} for a job owner")
        if not isinstance(self.body, str) or not self.body:
            raise ConfigError(f"invalid body {self.body!r} for a job owner")
        if not isinstance(self.input, Mapping):
            raise ConfigError(f"invalid input {self.input!r} for a job owner")
        if self.output_path is not None and not isinstance(self.output_path, str):
            raise ConfigError(f"invalid output path {self.output_path!r} for a job owner")
        object.__setattr__(self, "input", dict(self.input))

    def describe(self) -> str:
        who = f"DAG {self.dag_id}" if self.dag_id else "a run outside Airflow (library runner or run_job)"
        return f"{who}, body {self.body}, input {self.input.get('path')!r}, output {self.output_path!r}"

    def differences(self, other: "JobOwner") -> list[str]:
        """``field: owner's value -> other's value`` for every field that differs (locations
        compared in their canonical forms: ``s3a://`` and ``s3://`` name one place)."""
        out = []
        for name in ("dag_id", "body", "input", "output_path"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if _comparable(name, mine) != _comparable(name, theirs):
                out.append(f"{name} {mine!r} -> {theirs!r}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "body": self.body, "input": dict(self.input), "output_path": self.output_path}

    @classmethod
    def from_dict(cls, d: Any) -> "JobOwner":
        if not isinstance(d, Mapping) or set(d) != {"dag_id", "body", "input", "output_path"}:
            raise ConfigError(f"not an owner: {d!r}"[:300])
        return cls(d["dag_id"], d["body"], d["input"], d["output_path"])


def _canonical(value: Any) -> Any:
    try:
        return Location.parse(value, resolve=False).url if isinstance(value, str) else value
    except LocationError:
        return value  # a record written before locations were canonical: compared as it is


def _comparable(name: str, value: Any) -> Any:
    if name == "output_path":
        return _canonical(value)
    if name == "input" and isinstance(value, Mapping):
        return {**value, "path": _canonical(value.get("path"))}
    return value


def owner_key(job_id: str) -> str:
    return JobLayout(job_id).owner()


def read_owner(store: ObjectStore, job_id: str) -> JobOwner | None:
    """The job's owner; None if no run has claimed the job (it does not exist, or it was made
    before owners were recorded). CheckpointCorrupted if the record is damaged."""
    key = owner_key(job_id)
    try:
        data = store.get(key)
    except ObjectNotFound:
        return None
    try:
        record = json.loads(data)
        if record.get("format") != OWNER_FORMAT or record.get("job_id") != job_id:
            raise ValueError(f"format {record.get('format')!r}, job {record.get('job_id')!r}")
        return JobOwner.from_dict(record["owner"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointCorrupted(f"the owner record {store.location(key)} of job {job_id} is damaged: {e}") from None


def check_take_over(job_id: str, current: JobOwner, owner: JobOwner) -> None:
    """OwnershipError if a DAG's run would take over a job another DAG owns: a DAG's author
    allows take-overs of the DAG's own jobs (another body, input or output) and of jobs run
    outside Airflow, never of another DAG's (its readers would see that job's whole history)."""
    if owner.dag_id is not None and current.dag_id is not None and current.dag_id != owner.dag_id:
        raise OwnershipError(
            f"job {job_id} belongs to DAG {current.dag_id} ({current.describe()}); a run of DAG {owner.dag_id} "
            f"cannot take it over, even where its author allows take-overs: a take-over stays within a DAG. "
            "Use another job_id")


def check_claim(store: ObjectStore, job_id: str, owner: JobOwner, *, take_over: bool = False) -> JobOwner | None:
    """Before a run takes the job's lease: OwnershipError if the job belongs to another owner and
    the run does not take it over (nothing written: a run of another owner never holds, nor
    delays, the job's lease). The current owner, None if the job has none yet."""
    current = read_owner(store, job_id)
    diff = current.differences(owner) if current is not None else []
    if diff and take_over:
        check_take_over(job_id, current, owner)
    if diff and not take_over:
        raise OwnershipError(
            f"job {job_id} belongs to {current.describe()}; this run differs: {'; '.join(diff)}. "
            "Use another job_id, or take the job over explicitly (the take_over param of a DAG that "
            "allows it; IterationRunner(take_over=True); run_job --take-over)")
    return current


def claim(store: ObjectStore, job_id: str, owner: JobOwner, *, take_over: bool = False,
          claimed_by: str = "") -> JobOwner:
    """Make ``owner`` the job's owner if nobody claimed it yet; check it is the owner otherwise.
    OwnershipError naming the owner and the difference, unless ``take_over`` (then the record
    is replaced, the earlier owner kept in ``previous``)."""
    key = owner_key(job_id)
    record = {"format": OWNER_FORMAT, "job_id": job_id, "owner": owner.to_dict(), "claimed_at": iso_time(wall_clock()),
              "claimed_by": claimed_by, "previous": []}
    if store.put_if_absent(key, json.dumps(record, indent=1, sort_keys=True).encode()):
        log.info("job %s: owner recorded: %s", job_id, owner.describe())
        return owner
    current = read_owner(store, job_id)
    if current is None:  # deleted between the two calls: claim again
        return claim(store, job_id, owner, take_over=take_over, claimed_by=claimed_by)
    diff = current.differences(owner)
    if not diff:
        return current
    if not take_over:
        raise OwnershipError(
            f"job {job_id} belongs to {current.describe()}; this run differs: {'; '.join(diff)}. "
            "Use another job_id, or take the job over explicitly (the take_over param of a DAG that "
            "allows it; IterationRunner(take_over=True); run_job --take-over)")
    check_take_over(job_id, current, owner)
    previous = json.loads(store.get(key))
    record["previous"] = [*(previous.get("previous") or []),
                          {k: previous.get(k) for k in ("owner", "claimed_at", "claimed_by")}]
    store.put(key, json.dumps(record, indent=1, sort_keys=True).encode())
    log.warning("job %s taken over by %s (was %s): %s", job_id, owner.describe(), current.describe(), "; ".join(diff))
    return owner


__all__ = ["JobBusy", "JobOwner", "LeaseLost", "OwnershipError", "check_claim", "check_take_over", "claim", "iso_time",
           "read_owner", "wall_clock"]
