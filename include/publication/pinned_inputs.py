"""The input a job reads for good: the version of a published input, or the files of any other, pinned
at the log's first plan and checked before every plan (the asset events that told of it: include.publication.arrivals).

A job's input may be an output another job published (include.publication.outputs: Parquet files under
``<name>/v-<job>-<checkpoint>/``, made current by ``<name>/_PUBLISHED.json``). Reading that
directory would read every version kept there, so a job reads through the manifest, and reads one
version for its whole life: the version current when its checkpoint log first plans an epoch is
recorded once, create-if-absent, in ``jobs/<log>/input.json`` (``pin_input``); every later
epoch, task, retry and continuation batch of the log reads those same files, however often the
upstream publishes meanwhile. A recompute or a rewind is a new log: it reads the version current
when it starts. A batch of a scheduled job is a log of its own, so each batch reads the version
current when it started (the one the asset event that started it named, unless a newer one has
been published since: then the newer one, said in the log).

An input that is not a published output is pinned the same way, by its files: the log's first
plan records every file (object) it reads, with its size and a content identity (local files: the
SHA-256 of each, computed once, with the modification and change times as a cheap pre-check; S3:
the ETag), in the same record (``iterations.input-files/1``). Every later epoch, retry, resume and
continuation batch reads exactly those files; ``check_input`` compares them with what is there now,
cheaply before every plan and fully (every local file hashed again) when a run resumes a log that
has checkpoints, and refuses a change (a file added, gone or rewritten) with InputChanged, naming the
file and the ways out. S3 objects are read by a conditional GET on their ETag.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Iterable, Mapping, Sequence

from include.checkpoints.job_records import now_iso
from include.checkpoints.layout import JobLayout
from include.checkpoints.record_schemas import INPUT_FILES_PIN, INPUT_PIN
from include.contract.input_versions import MAX_PINNED_FILES, check_pinned, check_pinned_files
from include.contract.sizing import s3_input_objects
from include.errors import ConfigError, InputChanged, InputDataError, ObjectNotFound
from include.publication.arrivals import MAX_ARRIVALS, current_version, location_uri, newest_for
from include.store import Location, LocationError, open_store

log = logging.getLogger("iterations")

PIN_FORMAT = "iterations.input/1"
FILES_PIN_FORMAT = "iterations.input-files/1"
_HASH_CHUNK = 8 << 20


# --- asset events -------------------------------------------------------------------------------


# --- the pinned version of a published input ---------------------------------------------------


def pin_input(store, log_id: str, spec, *, store_options: Mapping[str, Any] | None = None,
              arrivals: Sequence[Mapping[str, Any]] = ()):
    """``spec`` (an include.contract.config.InputSpec) with what log ``log_id`` reads for good, recorded
    at the first call: the version of its published output (``published`` set), or, for any other
    input, its files as they are now (``files`` set: ``list_input_files``). Single-winner: tasks
    that pin at once all read what the first record names. ConfigError when the log pinned
    another input location."""
    options = dict(store_options or {})
    location = spec.location
    uri = location_uri(location)
    key = JobLayout(log_id).input_pin()
    record = _read_pin(store, key)
    if record is None:
        record = _new_pin(spec, log_id, uri, options, arrivals)
        if store.put_if_absent(key, json.dumps(record, indent=1).encode()):
            if record["format"] == FILES_PIN_FORMAT:
                log.info("job %s reads input %s as it is now, for every epoch of this log: %d file(s), %d bytes, "
                         "pinned with their content identity in %s", log_id, uri, len(record["files"]),
                         sum(f["size"] for f in record["files"]), store.location(key))
            else:
                log.info("job %s reads version %s of its input %s (job %s, checkpoint %s: %d files, %d rows), for "
                         "every epoch of this log", log_id, record["version"], uri, record["job_id"],
                         record["checkpoint_id"], len(record["files"]), record["rows"])
        else:  # another task of the log pinned it first: what it pinned is what the log reads
            record = _read_pin(store, key)
            if record is None:
                raise ObjectNotFound(f"{store.location(key)} was created and is gone")
    if record["uri"] != uri:
        raise ConfigError(f"job {log_id} reads input {record['uri']} (pinned at its first epoch, "
                          f"{store.location(key)}); this run names input {uri}: use another job_id")
    if record["format"] == FILES_PIN_FORMAT:
        return dataclasses.replace(spec, files=record["files"], pinned_at=record.get("pinned_at") or None)
    return dataclasses.replace(spec, published=record)  # InputSpec keeps the checked part (check_pinned)


def _new_pin(spec, log_id: str, uri: str, options: Mapping[str, Any],
             arrivals: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pin record of what the input is now."""
    location = spec.location
    current = current_version(location, options)
    if current is None:
        return {"format": FILES_PIN_FORMAT, "uri": uri, "files": list_input_files(location, options),
                "pinned_at": now_iso()}
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
    return record


def _read_pin(store, key: str) -> dict[str, Any] | None:
    try:
        data = store.get(key)
    except ObjectNotFound:
        return None
    try:
        kind = json.loads(data).get("format")
    except (ValueError, AttributeError):
        kind = None
    if kind == FILES_PIN_FORMAT:
        record = INPUT_FILES_PIN.load(data, store.location(key))
        check_pinned_files(record["files"], store.location(key))
        return record
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


# --- the pinned files of an input that is not a published output ------------------------------


def _data_name(name: str) -> bool:
    """A file or directory readers take as data: not hidden (``.``), not a marker (``_``), the
    rule Spark's file index applies (a ``_`` directory of a partition, ``_k=v``, is data)."""
    return not name.startswith(".") and (not name.startswith("_") or "=" in name)


_hashed: dict[tuple, str] = {}  # (path, device, inode, size, mtime_ns, ctime_ns) -> SHA-256, this process's


def forget_hashes() -> None:
    """Forget the files this process hashed: the next check of each reads it again (a new
    process's first check, for benchmarks)."""
    _hashed.clear()


def file_sha256(path: str) -> str:
    """The SHA-256 of a local file, read in chunks; a file this process hashed already, and
    whose inode, size, modification and change times are the same since (a change time no
    writer can set back), is not read again."""
    import hashlib

    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key in _hashed:
            return _hashed[key]
        h = hashlib.sha256()
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    if len(_hashed) > 100_000:
        _hashed.clear()
    if os.stat(path).st_ctime_ns == st.st_ctime_ns:  # not written while it was read
        _hashed[key] = h.hexdigest()
    return h.hexdigest()


def _local_files(location: Location) -> list[tuple[str, os.stat_result]]:
    """(key relative to the input, its stat) of every data file of a local input: the file
    itself (key ""), or the data files under the directory, in key order."""
    path = location.path
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputDataError(f"input path {path} does not exist") from None
    if not os.path.isdir(path):
        return [("", st)]
    out = []
    for d, dirs, names in os.walk(path):
        dirs[:] = [n for n in dirs if _data_name(n)]
        rel = os.path.relpath(d, path).replace(os.sep, "/")
        for n in names:
            if _data_name(n):
                key = n if rel == "." else f"{rel}/{n}"
                try:
                    out.append((key, os.stat(os.path.join(d, n))))
                except FileNotFoundError:
                    continue  # deleted while listing
    out.sort()
    return out


def _checked_key(location: Location, key: str) -> str:
    """``key`` if it names a file under the input in the location grammar (LocationError
    naming it otherwise: a file the data plane could not open literally)."""
    if key:
        try:
            location.child(key)
        except LocationError as e:
            raise InputDataError(f"input {location.url} holds a file the job cannot read literally: {e}") from None
    return key


def list_input_files(location: Location, store_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """What an input that is not a published output is now: its data files, each with its key
    (relative to the input; "" for an input that is one file), size and content identity (local:
    ``sha256``, with ``mtime_ns`` and ``ctime_ns`` for the cheap check; S3: ``etag``).
    InputDataError when there is no data file, or more than ``MAX_PINNED_FILES``."""
    if location.is_local:
        found = _local_files(location)
        if not found:
            raise InputDataError(f"input {location.path} is empty: the directory holds no data files")
        _check_count(location, len(found))
        return [{"key": _checked_key(location, key), "size": st.st_size,
                 "sha256": file_sha256(input_file_location(location, key).path), "mtime_ns": st.st_mtime_ns,
                 "ctime_ns": st.st_ctime_ns} for key, st in found]
    return [{"key": _checked_key(location, key), "size": size, "etag": etag}
            for key, size, etag in _s3_files(location, store_options or {})]


def _check_count(location: Location, n: int) -> None:
    if n > MAX_PINNED_FILES:
        raise InputDataError(f"input {location.url} holds {n} files, more than the {MAX_PINNED_FILES} a job pins: "
                             "compact it into fewer, larger files")


def _s3_files(location: Location, store_options: Mapping[str, Any]) -> list[tuple[str, int, str | None]]:
    """(key relative to the input, size, ETag) of the data objects of an S3 input."""
    _store, objects = s3_input_objects(location, store_options)
    base = location.path.rstrip("/")
    _check_count(location, len(objects))
    return [("" if o.key == location.path else o.key[len(base) + 1:] if base else o.key, o.size, o.etag)
            for o in objects]


def input_file_location(location: Location, key: str) -> Location:
    """Where a file of the input at ``location`` is (``key`` as ``InputSpec.files`` names it:
    "" for an input that is one file)."""
    return location if not key else location.child(key)


def _ways_out(log_id: str) -> str:
    return (f"Job {log_id} reads exactly the input its first plan pinned, so that a recovery computes what a run "
            "without failure computes. Put the input back as it was, or recompute on the new input (rewind_to=0, "
            "or on_input_change=restart: a new generation from epoch 0), or start a new job (another job_id)")


def input_changes(spec, store_options: Mapping[str, Any] | None = None, *, full: bool = False) -> list[str]:
    """What differs between the input ``spec`` pinned and what is there now, a line per file
    (first 10); [] when it is the same. Published inputs: each file of the pinned version there
    with its size (and, ``full``, local files with their SHA-256). Pinned files: the same keys,
    sizes and content identity: local files whose size, modification and change times are the
    pinned ones are taken as unchanged, unless ``full``, which hashes every file; S3 objects by
    their ETags."""
    options = dict(store_options or {})
    if spec.published:
        return _published_changes(spec, options, full)
    if spec.files is None:
        return []
    location = spec.location
    pinned = {f["key"]: f for f in spec.files}
    changes: list[str] = []
    try:
        if location.is_local:
            now = {key: (st.st_size, st.st_mtime_ns, st.st_ctime_ns) for key, st in _local_files(location)}
        else:
            now = {key: (size, etag, None) for key, size, etag in _s3_files(location, options)}
    except InputDataError:
        now = {}
    for key in sorted(set(pinned) | set(now)):
        where = input_file_location(location, key).url
        if key not in now:
            changes.append(f"{where} is gone")
        elif key not in pinned:
            changes.append(f"{where} was added")
        else:
            f = pinned[key]
            if now[key][0] != f["size"]:
                changes.append(f"{where} was rewritten: {now[key][0]} bytes, pinned with {f['size']}")
            elif location.is_s3:
                if f.get("etag") and now[key][1] != f["etag"]:
                    changes.append(f"{where} was rewritten (same size; ETag {now[key][1]}, pinned {f['etag']})")
            elif full or (now[key][1], now[key][2]) != (f.get("mtime_ns"), f.get("ctime_ns")):
                if f.get("sha256") and file_sha256(input_file_location(location, key).path) != f["sha256"]:
                    same = " (same size and modification time)" if now[key][1] == f.get("mtime_ns") else ""
                    changes.append(f"{where} was rewritten{same}: its SHA-256 is not the pinned one")
        if len(changes) >= 10:
            break
    return changes


def published_sizes(spec, store_options: Mapping[str, Any] | None = None) -> list[int | None]:
    """What the store says of each file of the pinned published version ``spec.published``: its
    size, None for a file that is gone (``check_still_there``'s ``sizes``)."""
    files = pinned_files(spec)
    if spec.location.is_local:
        return [os.path.getsize(f.path) if os.path.isfile(f.path) else None for f, _ in files]

    store = open_store(f"s3://{spec.location.bucket}", **dict(store_options or {}))
    return [None if (i := store.info(f.path)) is None else i.size for f, _ in files]


def _published_changes(spec, options: Mapping[str, Any], full: bool) -> list[str]:
    files = pinned_files(spec)
    sizes = published_sizes(spec, options)
    changes = [f"{where.url} is gone" if size is None else f"{where.url} has {size} bytes, pinned with {want}"
               for (where, want), size in zip(files, sizes) if size != want]
    if full and not changes and spec.location.is_local:
        changes = [f"{where.url}: its SHA-256 is not the one its publication recorded"
                   for (where, _), f in zip(files, spec.published["files"])
                   if f.get("sha256") and file_sha256(where.path) != f["sha256"]]
    return changes[:10]


def check_input(spec, log_id: str, store_options: Mapping[str, Any] | None = None, *, full: bool = False) -> None:
    """InputChanged unless the input is what log ``log_id`` pinned (``input_changes``)."""
    changes = input_changes(spec, store_options, full=full)
    if not changes:
        return
    if spec.published:
        raise InputDataError(
            f"input {spec.path}: version {spec.published['version']}, which job {log_id} reads since its first epoch, "
            f"is no longer whole ({'; '.join(changes)}): the upstream replaced it more than once since. Rewind the "
            "job (rewind_to) or recompute the batch to read the current version")
    raise InputChanged(f"input {spec.path} changed since job {log_id} pinned it"
                       f"{' at ' + spec.pinned_at if spec.pinned_at else ''}: {'; '.join(changes)}. {_ways_out(log_id)}")


def pinned_input_changes(store, log_id: str, spec, store_options: Mapping[str, Any] | None = None) -> list[str]:
    """How the input differs from what log ``log_id`` pinned (``input_changes``, full), or []
    when the log pinned nothing yet or the input is the same; read-only."""
    key = JobLayout(log_id).input_pin()
    record = _read_pin(store, key)
    if record is None:
        return []
    uri = location_uri(spec.location)
    if record["uri"] != uri:
        return []  # another input altogether: pin_input refuses it with its own message
    if record["format"] == FILES_PIN_FORMAT:
        pinned = dataclasses.replace(spec, files=record["files"], pinned_at=record.get("pinned_at") or None)
    else:
        pinned = dataclasses.replace(spec, published=record)
    return input_changes(pinned, store_options, full=True)


__all__ = ["FILES_PIN_FORMAT", "check_input", "check_still_there", "file_sha256", "forget_hashes", "input_changes",
           "input_file_location", "list_input_files", "pin_input", "pinned_files", "pinned_input_changes",
           "published_sizes"]
