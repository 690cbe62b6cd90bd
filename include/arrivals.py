"""What arrived: the version of a published input a job reads, and the asset events that told of it.

A job's input may be an output another job published (include.outputs: Parquet files under
``<name>/v-<job>-<checkpoint>/``, made current by ``<name>/_PUBLISHED.json``). Reading that
directory would read every version kept there, so a job reads through the manifest, and reads one
version for its whole life: the version current when its checkpoint log first plans an epoch is
recorded once, create-if-absent, in ``jobs/<log>/input.json`` (``pin_input``); every later
epoch, task, retry and continuation batch of the log reads those same files, however often the
upstream publishes meanwhile. A recompute or a rewind is a new log: it reads the version current
when it starts. A batch of a scheduled job is a log of its own, so each batch reads the version
current when it started (the one the asset event that started it named, unless a newer one has
been published since: then the newer one, said in the log).

A DAG scheduled on its input's Asset is started by asset events whose ``extra`` anyone allowed to
post an asset event writes: ``arrival`` keeps only the fields this project's finish writes
(include.publication: job_id, checkpoint_id, version, rows, format, replaces), each shape-checked,
and names the other keys without using them. Arrivals are logged and recorded (in the pin and in a
scheduled batch's generation record); they never choose which files are read: the manifest does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from typing import Any, Iterable, Mapping, Sequence

from include.errors import ConfigError, InputDataError, ObjectNotFound
from include.layout import JOB_ID_PATTERN, JobLayout
from include.locations import Location
from include.records import now_iso
from include.schemas import INPUT_PIN, VERSION_PATTERN

log = logging.getLogger("iterations")

PIN_FORMAT = "iterations.input/1"
MAX_ARRIVALS = 50  # recorded per pin or generation: the newest ones
_SIMPLE = {
    "job_id": lambda v: isinstance(v, str) and bool(JOB_ID_PATTERN.fullmatch(v)),
    "checkpoint_id": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "version": lambda v: isinstance(v, str) and bool(VERSION_PATTERN.fullmatch(v)),
    "rows": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "format": lambda v: v in ("parquet", "delta"),
    "replaces": lambda v: v is None or (isinstance(v, str) and bool(VERSION_PATTERN.fullmatch(v))),
}


# --- asset events -------------------------------------------------------------------------------


def arrival(uri: Any, extra: Any, *, source: str | None = None, at: str | None = None) -> dict[str, Any]:
    """What one asset event says arrived, from its (untrusted) ``extra``: the fields a finish
    writes, those of the right shape only; ``ignored`` names the other keys (never used)."""
    extra = extra if isinstance(extra, Mapping) else {}
    out: dict[str, Any] = {"uri": str(uri)[:1024], "source": None if source is None else str(source)[:512],
                           "at": None if at is None else str(at)[:64]}
    for key, ok in _SIMPLE.items():
        if key in extra and ok(extra[key]):
            out[key] = extra[key]
    ignored = sorted(str(k)[:64] for k in extra if k not in _SIMPLE or not _SIMPLE[k](extra[k]))
    if ignored:
        out["ignored"] = ignored[:20]
    return out


def describe(a: Mapping[str, Any]) -> str:
    """One line of a log: where, which version of which job, from whom."""
    what = (f"version {a['version']} of job {a.get('job_id', '?')} (checkpoint {a.get('checkpoint_id', '?')}, "
            f"{a.get('rows', '?')} rows)") if a.get("version") else "no version named"
    return f"{a['uri']}: {what}, from {a.get('source') or 'an unnamed source'} at {a.get('at') or '?'}" + \
        (f"; keys not read: {', '.join(a['ignored'])}" if a.get("ignored") else "")


def newest_for(arrivals: Sequence[Mapping[str, Any]], uri: str) -> Mapping[str, Any] | None:
    """The last arrival of ``uri`` that names a version (arrivals come oldest first)."""
    return next((a for a in reversed(arrivals) if a.get("uri") == uri and a.get("version")), None)


def location_uri(location: Location) -> str:
    """A location as Airflow Assets and OpenLineage name it (include.outputs.output_uri's form)."""
    if location.is_s3:
        return location.url
    import pathlib

    return pathlib.Path(location.path).as_uri()


# --- the pinned version of a published input ---------------------------------------------------


def check_pinned(pinned: Any, where: str) -> dict[str, Any]:
    """The part of an input spec that names the files of one version (``InputSpec.published``),
    checked: a version, its rows, and files ``<version>/part-NNNNN.parquet`` under the input,
    nothing else (ConfigError naming ``where`` otherwise)."""
    if not isinstance(pinned, Mapping):
        raise ConfigError(f"{where}: the pinned input version must be an object, got {type(pinned).__name__}")
    version = pinned.get("version")
    if not _SIMPLE["version"](version):
        raise ConfigError(f"{where}: {version!r} is not an output version (v-<job>-<checkpoint>)")
    files = pinned.get("files")
    own = re.compile(re.escape(version) + r"/part-\d{5}\.parquet")
    if not isinstance(files, list) or not files or not all(
            isinstance(f, Mapping) and isinstance(f.get("key"), str) and own.fullmatch(f["key"])
            and isinstance(f.get("size"), int) and not isinstance(f.get("size"), bool) and f["size"] >= 0
            for f in files):
        raise ConfigError(f"{where}: the files of version {version} must be {version}/part-NNNNN.parquet "
                          "with their sizes")
    for key in ("job_id", "checkpoint_id", "rows"):
        if not _SIMPLE[key](pinned.get(key)):
            raise ConfigError(f"{where}: {key} {pinned.get(key)!r} of the pinned input is not valid")
    return {"version": version, "job_id": pinned["job_id"], "checkpoint_id": pinned["checkpoint_id"],
            "rows": pinned["rows"], "files": [{"key": f["key"], "size": f["size"], "sha256": f.get("sha256")}
                                              for f in files]}


def _current_version(location: Location, store_options: Mapping[str, Any]):
    """The current publication of the output at ``location`` (include.outputs.published), or
    None when it is not a published output (no ``_PUBLISHED.json`` in it)."""
    from include.outputs import PUBLISHED, published
    from include.store import open_store

    if not location.segments:
        return None
    if location.is_local:
        if not os.path.isfile(os.path.join(location.path, PUBLISHED)):
            return None  # asked of the file system: opening a local store would create its directory
    elif not open_store(location.parent.url, **store_options).exists(f"{location.name}/{PUBLISHED}"):
        return None
    return published(location.parent.url, location.name, **store_options)  # a damaged manifest: refused


def pin_input(store, log_id: str, spec, *, store_options: Mapping[str, Any] | None = None,
              arrivals: Sequence[Mapping[str, Any]] = ()):
    """``spec`` (an include.config.InputSpec) with the version of its published output that log
    ``log_id`` reads for good (``published`` set), recorded at the first call; ``spec`` itself
    when the input is not a published output. Single-winner: tasks that pin at once all read the
    version the first record names. ConfigError when the log pinned another input location."""
    options = dict(store_options or {})
    location = spec.location
    uri = location_uri(location)
    key = JobLayout(log_id).input_pin()
    record = _read_pin(store, key)
    if record is None:
        current = _current_version(location, options)
        if current is None:
            return spec
        if spec.format != "parquet":
            raise ConfigError(f"input {spec.path} is a published output (Parquet files behind "
                              f"{location.name}/_PUBLISHED.json): its format is parquet, not {spec.format!r}")
        prefix = f"{location.name}/"
        record = {"format": PIN_FORMAT, "uri": uri, "version": current.manifest["version"],
                  "job_id": current.job_id, "checkpoint_id": current.checkpoint_id, "rows": current.rows,
                  "files": [{"key": f["key"][len(prefix):], "size": f["size"], "sha256": f["sha256"]}
                            for f in current.manifest["files"]],
                  "pinned_at": now_iso(), "arrived": [dict(a) for a in arrivals][-MAX_ARRIVALS:]}
        newest = newest_for(arrivals, uri)
        if newest is not None and newest["version"] != record["version"]:
            log.warning("job %s: the asset event that started this run names version %s of %s; version %s has "
                        "been published since: reading %s", log_id, newest["version"], uri, record["version"],
                        record["version"])
        if store.put_if_absent(key, json.dumps(record, indent=1).encode()):
            log.info("job %s reads version %s of its input %s (job %s, checkpoint %s: %d files, %d rows), for every "
                     "epoch of this log", log_id, record["version"], uri, record["job_id"], record["checkpoint_id"],
                     len(record["files"]), record["rows"])
        else:  # another task of the log pinned it first: its version is the one
            record = _read_pin(store, key)
            if record is None:
                raise ObjectNotFound(f"{store.location(key)} was created and is gone")
    if record["uri"] != uri:
        raise ConfigError(f"job {log_id} reads version {record['version']} of input {record['uri']} (pinned at its "
                          f"first epoch, {store.location(key)}); this run names input {uri}: use another job_id")
    return dataclasses.replace(spec, published=record)  # InputSpec keeps the checked part (check_pinned)


def _read_pin(store, key: str) -> dict[str, Any] | None:
    try:
        data = store.get(key)
    except ObjectNotFound:
        return None
    record = INPUT_PIN.load(data, store.location(key))
    check_pinned(record, store.location(key))
    return record


def pinned_files(spec) -> list[tuple[Location, int]]:
    """Where the files of a pinned input spec are, with their sizes."""
    base = spec.location
    return [(base.child(f["key"]), int(f["size"])) for f in spec.published["files"]]


def check_still_there(spec, sizes: Iterable[int | None]) -> None:
    """InputDataError unless every file of the pinned version is there with its size (``sizes``:
    what the store says, None for a missing file, in ``spec.published['files']`` order)."""
    files = spec.published["files"]
    gone = [f["key"] for f, size in zip(files, sizes) if size != f["size"]]
    if gone:
        raise InputDataError(
            f"input {spec.path}: version {spec.published['version']}, which this job reads since its first epoch, "
            f"is no longer whole ({len(gone)} of {len(files)} files missing or changed, first {gone[0]}): the "
            "upstream replaced it more than once since. Rewind the job (rewind_to) or recompute the batch to read "
            "the current version")


__all__ = ["arrival", "check_pinned", "check_still_there", "describe", "location_uri", "newest_for", "pin_input",
           "pinned_files"]
