"""Who an output location belongs to: the job that first published there.

The first publication to an output location records its owner in ``<output>/_OWNER.json``
(one create-if-absent write): the checkpoint store and job that publish there (the job's
generations and a scheduled job's dates are one job), the DAG and the body. A publication by
anyone else is refused with an error naming the owner, before any file is written, unless the
run takes the location over explicitly (``take_over``: the DAG's author allows it, the run asks
for it); the record then names the new owner and keeps the earlier ones in ``previous``.

An output location also keeps to its borders: it may not lie inside another owner's output
location, nor, when it is claimed first, hold one.

Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping

from include.checkpoints.layout import JOB_ID_PATTERN
from include.errors import ConfigError, ObjectNotFound, OutputError
from include.store import open_store
from include.store.base import ObjectStore
from include.store.local import marker_at_or_above
from include.store.location import Location

log = logging.getLogger("iterations")

OUTPUT_OWNER = "_OWNER.json"
FORMAT = "iterations.output-owner/1"
_FIELDS = ("store", "job_id", "dag_id", "body")


class OutputOwned(OutputError, ConfigError):
    """The output location belongs to another job."""


@dataclass(frozen=True)
class OutputOwner:
    """Who publishes into an output location."""

    store: str  # the job's checkpoint root, canonical
    job_id: str  # the job as configured (its generations and dates publish as it)
    dag_id: str | None
    body: str

    def describe(self) -> str:
        who = f"DAG {self.dag_id}" if self.dag_id else "a run outside Airflow"
        return f"job {self.job_id} of the store {self.store} ({who}, body {self.body})"

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "job_id": self.job_id, "dag_id": self.dag_id, "body": self.body}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> "OutputOwner":
        ok = (isinstance(d, Mapping) and all(k in d for k in _FIELDS)
              and isinstance(d["store"], str) and d["store"]
              and isinstance(d["job_id"], str) and JOB_ID_PATTERN.match(d["job_id"]) is not None
              and (d["dag_id"] is None or isinstance(d["dag_id"], str))
              and isinstance(d["body"], str) and d["body"])
        if not ok:
            raise OutputError(f"{where} is not an output owner record ({FORMAT}: store, job_id, dag_id, body): "
                              f"{json.dumps(d, default=str)[:300]}")
        return cls(d["store"], d["job_id"], d["dag_id"], d["body"])


def read_output_owner(out: ObjectStore, key: str = OUTPUT_OWNER) -> OutputOwner | None:
    """The owner recorded at ``out`` (None if none is); OutputError naming the record when it
    is damaged or of another kind."""
    try:
        data = out.get(key)
    except ObjectNotFound:
        return None
    where = out.location(key)
    try:
        record = json.loads(data)
    except ValueError:
        raise OutputError(f"{where} is not an output owner record: not JSON") from None
    if not isinstance(record, Mapping) or record.get("format") != FORMAT:
        raise OutputError(f"{where} is not an output owner record ({FORMAT})")
    return OutputOwner.from_dict(record.get("owner"), where)


def _borders(out: ObjectStore, owner: OutputOwner, first: bool) -> None:
    above = out.marker_in_ancestors(OUTPUT_OWNER)
    if above is not None:
        raise OutputOwned(f"output {out.location()} lies inside the output location {above}, which another job "
                          "published to: an output location holds no other; choose an output_path beside it")
    if first:
        inner = [k for k in out.markers_below(OUTPUT_OWNER)]
        if inner:
            raise OutputOwned(f"output {out.location()} holds the output location(s) "
                              f"{', '.join(out.location(k.rsplit('/', 1)[0]) for k in inner)} of other jobs: choose "
                              "an output_path that holds no other job's outputs")


def check_output_owner(out: ObjectStore, owner: OutputOwner, *, take_over: bool = False) -> OutputOwner | None:
    """Before a run does any work: OutputOwned if the location at ``out`` is another's (and the
    run does not take it over) or crosses another owner's border. Reads only; the owner found."""
    current = read_output_owner(out)
    _borders(out, owner, first=current is None)
    if current is not None and current != owner and not take_over:
        raise _owned(out, current, owner)
    return current


def check_output_location(location: Location, owner: OutputOwner, *, take_over: bool = False,
                          store_options: Mapping[str, Any] | None = None) -> None:
    """``check_output_owner`` for an output location that may not exist yet (a local directory
    nothing was published to: only what lies above it is checked). Creates nothing."""
    if location.is_local and not os.path.isdir(location.path):
        here = marker_at_or_above(os.path.dirname(location.path), OUTPUT_OWNER)
        if here is not None:
            raise OutputOwned(f"output {location.url} lies inside the output location {here}, which another job "
                              "published to: an output location holds no other; choose an output_path beside it")
        return
    check_output_owner(open_store(location.url, create=False, **dict(store_options or {})), owner,
                       take_over=take_over)


def claim_output(out: ObjectStore, owner: OutputOwner, *, take_over: bool = False) -> None:
    """Before a publication writes into ``out``: record ``owner`` if the location has none, go
    on if it is ``owner``'s, replace it if the run takes it over, refuse otherwise."""
    current = check_output_owner(out, owner, take_over=take_over)
    if current == owner:
        return
    record = {"format": FORMAT, "owner": owner.to_dict()}
    if current is None:
        if out.put_if_absent(OUTPUT_OWNER, json.dumps(record, sort_keys=True).encode()):
            log.info("output %s: owned by %s from now on", out.location(), owner.describe())
            return
        current = read_output_owner(out)  # another publisher claimed it at the same moment
        if current == owner:
            return
        if not take_over:
            raise _owned(out, current, owner)
    previous = []
    try:
        previous = list(json.loads(out.get(OUTPUT_OWNER)).get("previous") or [])
    except (ObjectNotFound, ValueError, AttributeError):
        pass
    record["previous"] = [*previous, current.to_dict()] if current is not None else previous
    out.put(OUTPUT_OWNER, json.dumps(record, sort_keys=True).encode())
    log.warning("output %s: taken over from %s by %s", out.location(), current.describe() if current else "nobody",
                owner.describe())


def _owned(out: ObjectStore, current: OutputOwner | None, owner: OutputOwner) -> OutputOwned:
    return OutputOwned(f"output {out.location()} belongs to {current.describe() if current else 'another job'}; "
                       f"this run publishes as {owner.describe()}: choose another output_path (or, if the DAG's "
                       "author allows it, take the location over with take_over)")


__all__ = ["OUTPUT_OWNER", "OutputOwned", "OutputOwner", "check_output_location", "check_output_owner", "claim_output",
           "read_output_owner"]
