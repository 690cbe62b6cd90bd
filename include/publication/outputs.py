"""Published outputs, replaced atomically.

An output ``<output_path>/<name>`` is a set of Parquet files under a version prefix
``<name>/v-<job>-<checkpoint>/`` made visible all at once by replacing one object,
``<name>/_PUBLISHED.json``, which lists the files (size and SHA-256) and names the checkpoint
they come from. Readers follow that manifest (``published()``), so they see the old outputs or
the new ones, never a mix, and re-publishing (a recomputed batch) replaces the outputs in one
step. The version before the current one is kept for readers still on it; older ones are deleted,
but only those the publisher's own history lists (``PublicationHistory``: the versions its job, or
the jobs it replaces, wrote there): publishing never deletes a file it did not create. Every byte
copied is verified against the checkpoint's SHA-256 first, and nothing is written inside a
checkpoint store (``check_not_in_store``).

Publishing is idempotent: a manifest that already names the same job and checkpoint is left
alone; a publication that died half way is redone into the same version prefix.

A body's per-epoch outputs are appended instead (``publish_increment``): epoch k's files go under
``<name>/v-<job>-<k>/`` and become visible by one create-if-absent write of
``<name>/_increments/<job>-<k>.json``; readers (``published_increments()``) take the union of the
increments in checkpoint order. Create-if-absent makes the append single-winner: an increment is
never published twice, and none is lost to a concurrent publisher.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from include.checkpoints.manifest import DatasetRef
from include.checkpoints.record_schemas import INCREMENT, OUTPUT_MANIFEST, VERSION_PATTERN, DamagedOutputRecord, DamagedRecord
from include.errors import ConfigError, ObjectNotFound, OutputError
from include.store import STORE_MARKER, ObjectStore, open_store
from include.store.local import marker_at_or_above
from include.store.transfer import copy_verified, verified_file

log = logging.getLogger("iterations")

PUBLISHED = "_PUBLISHED.json"
FORMAT = "iterations.published/1"


@dataclass(frozen=True)
class Published:
    """What a reader of an output needs: the files of the current version, in order."""

    name: str
    job_id: str
    checkpoint_id: int
    rows: int
    locations: tuple[str, ...]  # local paths or s3:// URLs
    manifest: Mapping[str, Any]


def _manifest(out: ObjectStore, name: str) -> dict[str, Any] | None:
    """Output ``name``'s publication manifest, checked (include.checkpoints.record_schemas.OUTPUT_MANIFEST): of this
    output, its files under its own version's prefix; None if there is none."""
    key = f"{name}/{PUBLISHED}"
    try:
        raw = out.get(key)
    except ObjectNotFound:
        return None
    data = OUTPUT_MANIFEST.load(raw, out.location(key))
    _check_files(data, name, out.location(key))
    return data


def _check_files(record: Mapping[str, Any], name: str, where: str) -> None:
    """DamagedRecord unless ``record`` is of output ``name`` and names only files of its own
    version (``<name>/<version>/part-*.parquet``): a reader follows it to nothing else."""
    version = record.get("version") or version_of(record)
    if record["name"] != name:
        raise DamagedOutputRecord(f"{where} is not a record of output {name!r}: it names output {record['name']!r}")
    stray = [f["key"] for f in record["files"] if not _owned_key(name, version, f["key"])]
    if stray:
        raise DamagedOutputRecord(f"{where} names files outside its version {name}/{version}/: {stray[:3]}")


class PublicationHistory(Protocol):
    """Where a publisher records the versions it writes into an output, and finds the ones it
    may delete: its own, kept outside the output (a job's checkpoint log), so that what lies in
    the output location itself can never make it delete a file it did not write."""

    def wrote(self, location: str, name: str, version: str, keys: Sequence[str]) -> None:
        """Record, before writing them, the keys of ``version`` of output ``name`` at ``location``."""

    def written(self, location: str, name: str) -> dict[str, list[str]]:
        """The versions (and their keys) this publisher's history lists at ``location`` for
        output ``name`` and has not retired."""

    def retired(self, location: str, name: str, version: str) -> None:
        """``version``'s files were deleted."""


_VERSION = VERSION_PATTERN


def version_of(stamp: Mapping[str, Any]) -> str:
    return f"v-{stamp['job_id']}-{stamp['checkpoint_id']}"


def _version_keys(name: str, version: str, ds: DatasetRef) -> list[str]:
    return [f"{name}/{version}/part-{i:05d}.parquet" for i in range(len(ds.files))]


def _owned_key(name: str, version: str, key: Any) -> bool:
    """A key a version of output ``name`` can have (history read back from a store is checked
    before anything is deleted by it)."""
    return (isinstance(key, str) and bool(_VERSION.fullmatch(version))
            and re.fullmatch(re.escape(f"{name}/{version}/") + r"part-\d{5}\.parquet", key) is not None)


def _copy_version(source: ObjectStore, out: ObjectStore, name: str, ds: DatasetRef,
                  stamp: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``ds`` under ``<name>/v-<job>-<checkpoint>/``, each file verified against the
    checkpoint's size and SHA-256 first; the record that lists the copies."""
    version = version_of(stamp)
    files, how = [], set()
    for key, ref in zip(_version_keys(name, version, ds), ds.files):
        # never publish bytes the checkpoint does not vouch for; never a whole file in memory
        how.add(copy_verified(source, out, ref, key))
        files.append({"key": key, "size": ref.size, "sha256": ref.sha256})
    if files:
        log.info("output %s: %d files (%d bytes) copied %s", out.location(f"{name}/{version}"), len(files),
                 sum(f["size"] for f in files), " and ".join(sorted(how)))
    return {"format": FORMAT, "name": name, **{k: stamp[k] for k in ("job_id", "checkpoint_id", "attempt_id")},
            "version": version, "rows": ds.rows, "schema": ds.schema, "files": files}


def check_not_in_store(out: ObjectStore, name: str = "") -> None:
    """OutputError if output ``name`` of ``out`` would lie inside a checkpoint store (a store
    marks its root with ``_iterations/store.json``): publishing there could overwrite or shadow
    a job's state."""
    store_root = out.marker_above(name, STORE_MARKER)
    if store_root is not None:
        raise OutputError(f"output {out.location(name)} lies inside a checkpoint store ({store_root}): "
                          "outputs never overlap a checkpoint root; choose another output_path")


def check_output_path_outside_stores(output_path: str | None, **store_options: Any) -> None:
    """Before a job starts: OutputError if ``output_path`` lies inside a checkpoint store (as
    ``check_not_in_store``), without creating anything (the path need not exist yet)."""
    if not output_path:
        return
    if output_path.startswith(("s3://", "s3a://")):
        check_not_in_store(open_store(output_path, **store_options))
        return

    path = os.path.abspath(output_path[len("file://"):] if output_path.startswith("file://") else output_path)
    store_root = marker_at_or_above(path, STORE_MARKER)
    if store_root is not None:
        raise OutputError(f"output {output_path} lies inside a checkpoint store ({store_root}): outputs never "
                          "overlap a checkpoint root; choose another output_path")


def stage_version(source: ObjectStore, out: ObjectStore, name: str, ds: DatasetRef, stamp: Mapping[str, Any],
                  *, history: PublicationHistory | None = None) -> dict[str, Any]:
    """Copy ``ds`` (objects of ``source``) under a new version of output ``name``, recorded in
    ``history`` first (the keys it will write), every byte verified: a version no reader sees
    until ``switch_version`` names it. Returns its record (the manifest the switch writes)."""
    check_not_in_store(out, name)
    version = version_of(stamp)
    if history is not None:
        history.wrote(out.location(), name, version, _version_keys(name, version, ds))
    return _copy_version(source, out, name, ds, stamp)


def _current(out: ObjectStore, name: str) -> dict[str, Any] | None:
    try:
        return _manifest(out, name)
    except DamagedRecord as e:  # replaced by this publication; nothing it names is deleted (only history)
        log.warning("output %s: replacing a manifest that is not a valid one: %s", out.location(name), e)
        return None


def switch_version(out: ObjectStore, name: str, record: Mapping[str, Any], *,
                   history: PublicationHistory | None = None) -> bool:
    """Make the staged version ``record`` (``stage_version``'s) output ``name``'s current one:
    one write of ``_PUBLISHED.json``. The versions ``history`` lists, other than the new one
    and the one it replaces, are deleted afterwards (none without a history). True if this call
    switched, False if that checkpoint was already the current version."""
    current = _current(out, name)
    if current and (current["job_id"], current["checkpoint_id"]) == (record["job_id"], record["checkpoint_id"]):
        return False
    if current and current["job_id"] == record["job_id"] and int(current["checkpoint_id"]) > int(record["checkpoint_id"]):
        raise OutputError(f"output {out.location(name)} holds checkpoint {current['checkpoint_id']} of job "
                          f"{record['job_id']}: an older checkpoint ({record['checkpoint_id']}) never replaces it")
    manifest = {**record, "replaces": current["version"] if current else None}
    out.put(f"{name}/{PUBLISHED}", json.dumps(manifest, indent=1).encode())  # the switch
    if history is not None:
        location = out.location()
        keep = {manifest["version"], manifest["replaces"]}
        for old, keys in sorted(history.written(location, name).items()):
            if old in keep:
                continue
            owned = [k for k in keys if _owned_key(name, old, k)]
            out.delete(owned)
            history.retired(location, name, old)
            log.info("output %s: deleted version %s (%d files) of an earlier publication", out.location(name), old,
                     len(owned))
    log.info("published output %s of job %s checkpoint %s to %s (%d files, %d rows%s)",
             name, record["job_id"], record["checkpoint_id"], out.location(name), len(record["files"]),
             record["rows"], f", replacing {manifest['replaces']}" if manifest["replaces"] else "")
    return True


def discard_version(out: ObjectStore, name: str, record: Mapping[str, Any], *,
                    history: PublicationHistory | None = None) -> int:
    """Delete a staged version that will not be published (``stage_version``'s ``record``): its
    files only, never one the current manifest names; how many were deleted."""
    current = _current(out, name)
    if current is not None and current.get("version") == record["version"]:
        raise OutputError(f"output {out.location(name)}: version {record['version']} is the published one; "
                          "it is not discarded")
    owned = [f["key"] for f in record["files"] if _owned_key(name, record["version"], f["key"])]
    out.delete(owned)
    if history is not None:
        history.retired(out.location(), name, record["version"])
    return len(owned)


def publish_dataset(source: ObjectStore, out: ObjectStore, name: str, ds: DatasetRef, stamp: Mapping[str, Any],
                    *, history: PublicationHistory | None = None) -> bool:
    """Copy ``ds`` (objects of ``source``) under a new version of output ``name`` and switch the
    manifest to it (``stage_version``, then ``switch_version``). ``stamp`` names the checkpoint:
    job_id, checkpoint_id, attempt_id. ``history``: the publisher's record of what it wrote; the
    versions it lists, other than the new one and the one it replaces, are deleted (none without
    a history). True if this call published, False if the same checkpoint was already published."""
    check_not_in_store(out, name)
    current = _current(out, name)
    if current and (current["job_id"], current["checkpoint_id"]) == (stamp["job_id"], stamp["checkpoint_id"]):
        return False
    if current and current["job_id"] == stamp["job_id"] and int(current["checkpoint_id"]) > int(stamp["checkpoint_id"]):
        raise OutputError(f"output {out.location(name)} holds checkpoint {current['checkpoint_id']} of job "
                          f"{stamp['job_id']}: an older checkpoint ({stamp['checkpoint_id']}) never replaces it")
    return switch_version(out, name, stage_version(source, out, name, ds, stamp, history=history), history=history)


def output_uri(output_path: str, name: str) -> str:
    """Output ``name`` under ``output_path`` by the URI data tools name it by (an Airflow Asset's,
    an OpenLineage dataset's): ``s3://bucket/prefix/name`` (also for ``s3a://``), or
    ``file:///abs/path/name`` for a local output. Computed from the text alone (a DAG file may
    call it as it is parsed), the same address as ``open_store(output_path).url(name)``."""
    parsed = urlparse(output_path)
    if parsed.scheme in ("s3", "s3a"):
        prefix = parsed.path.strip("/")
        return f"s3://{parsed.netloc}/{prefix + '/' if prefix else ''}{name}"
    path = parsed.path if parsed.scheme == "file" else output_path
    return pathlib.Path(os.path.abspath(os.path.join(path, name))).as_uri()


def output_of_uri(uri: str) -> tuple[str, str]:
    """``(output_path, name)`` of an output's URI (``output_uri``'s inverse); ConfigError naming
    ``uri`` when it is not one."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "file") or not parsed.path.strip("/") or (parsed.scheme == "s3") != bool(parsed.netloc):
        raise ConfigError(f"{uri!r} is not the URI of an output: s3://bucket/prefix/<name> or file:///path/<name>")
    where, _, name = uri.rstrip("/").rpartition("/")
    if parsed.scheme == "file":
        where = url2pathname(urlparse(where).path) or "/"
    return where, unquote(name)


def published(output_path: str, name: str, **store_options: Any) -> Published:
    """The current version of output ``name`` under ``output_path``; OutputError if none."""
    out = open_store(output_path, **store_options)
    m = _manifest(out, name)
    if m is None:
        raise OutputError(f"no output {name!r} is published under {out.location()} (no {name}/{PUBLISHED})")
    return Published(name, m["job_id"], int(m["checkpoint_id"]), int(m["rows"]),
                     tuple(out.url(f["key"]) for f in m["files"]), m)


INCREMENTS = "_increments"
_INCREMENT_NAME = re.compile(r"(?P<job>[A-Za-z0-9][A-Za-z0-9_.\-]{0,127})-(?P<cid>[0-9]{10})\.json")


def increment_key(name: str, stamp: Mapping[str, Any]) -> str:
    """The record that makes checkpoint ``stamp``'s increment of per-epoch output ``name`` visible."""
    return f"{name}/{INCREMENTS}/{stamp['job_id']}-{int(stamp['checkpoint_id']):010d}.json"


def stage_increment(source: ObjectStore, out: ObjectStore, name: str, ds: DatasetRef,
                    stamp: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``ds`` (one epoch's output) under its version of output ``name``, verified: invisible
    until ``append_increment`` writes its record. Returns that record."""
    check_not_in_store(out, name)
    return _copy_version(source, out, name, ds, stamp)


def append_increment(out: ObjectStore, name: str, record: Mapping[str, Any]) -> bool:
    """The append: one create-if-absent write of the increment's record (``stage_increment``'s);
    True if this call appended it, False if it was there already."""
    if not out.put_if_absent(increment_key(name, record), json.dumps(dict(record), indent=1).encode()):
        return False
    log.info("appended epoch %s of job %s to output %s (%d rows)", record["checkpoint_id"], record["job_id"],
             out.location(name), record["rows"])
    return True


def publish_increment(source: ObjectStore, out: ObjectStore, name: str, ds: DatasetRef,
                      stamp: Mapping[str, Any]) -> bool:
    """Append ``ds`` (one epoch's output) to output ``name``; True if this call published it,
    False if that checkpoint's increment was already there."""
    check_not_in_store(out, name)
    if out.exists(increment_key(name, stamp)):
        return False
    return append_increment(out, name, stage_increment(source, out, name, ds, stamp))


@dataclass(frozen=True)
class Increments:
    """What a reader of a per-epoch output needs: every published increment's files, in order."""

    name: str
    checkpoints: tuple[tuple[str, int], ...]  # (job_id, checkpoint_id) of each increment
    rows: int
    locations: tuple[str, ...]


def published_increments(output_path: str, name: str, **store_options: Any) -> Increments:
    """The published increments of per-epoch output ``name``; OutputError if there are none."""
    out = open_store(output_path, **store_options)
    records = []
    prefix = f"{name}/{INCREMENTS}/"
    for o in out.list(prefix):
        m = _INCREMENT_NAME.fullmatch(o.key[len(prefix):])
        if m is None:
            log.warning("ignoring %s: not an increment record (<job>-<10-digit id>.json)", out.location(o.key))
            continue
        record = INCREMENT.load(out.get(o.key), out.location(o.key))
        if (record["job_id"], record["checkpoint_id"]) != (m["job"], int(m["cid"])):
            raise DamagedOutputRecord(f"{out.location(o.key)} is not the increment of job {m['job']} checkpoint "
                                f"{int(m['cid'])}: it names job {record['job_id']}, checkpoint {record['checkpoint_id']}")
        _check_files(record, name, out.location(o.key))
        records.append(record)
    if not records:
        raise OutputError(f"no increment of output {name!r} is published under {out.location()}")
    records.sort(key=lambda r: (int(r["checkpoint_id"]), r["job_id"]))
    return Increments(name, tuple((r["job_id"], int(r["checkpoint_id"])) for r in records),
                      sum(int(r["rows"]) for r in records),
                      tuple(out.url(f["key"]) for r in records for f in r["files"]))


def delta_storage_options(store_options: Mapping[str, Any]) -> dict[str, str]:
    """deltalake's storage options from ours (``include.store.open_store`` keyword arguments)."""
    names = {"endpoint_url": "AWS_ENDPOINT_URL", "access_key_id": "AWS_ACCESS_KEY_ID",
             "secret_access_key": "AWS_SECRET_ACCESS_KEY", "session_token": "AWS_SESSION_TOKEN",
             "region": "AWS_REGION"}
    out = {names[k]: str(v) for k, v in store_options.items() if k in names and v}
    if out.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        out["AWS_ALLOW_HTTP"] = "true"
    return out


#: rows per record batch a Delta publication streams from the checkpoint's files
DELTA_BATCH_ROWS = 65_536


def _record_batches(source: ObjectStore, ds: DatasetRef):
    """The rows of ``ds``'s Parquet files as a stream of record batches, each file verified
    (size, SHA-256) before any of its rows is given; and a one-element list that counts the rows
    as they pass."""
    import pyarrow as pa
    import pyarrow.parquet as pq


    with verified_file(source, ds.files[0]) as first:
        schema = pq.read_schema(first)
    rows = [0]

    def batches():
        for ref in ds.files:
            with verified_file(source, ref) as path:
                # read page by page (a 1 MiB buffer), not a whole row group's columns at once
                parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
                try:
                    for batch in parquet.iter_batches(batch_size=DELTA_BATCH_ROWS):
                        rows[0] += batch.num_rows
                        yield batch.cast(schema) if batch.schema != schema else batch
                finally:
                    parquet.close()

    return pa.RecordBatchReader.from_batches(schema, batches()), rows


def publish_delta(source: ObjectStore, table_uri: str, ds: DatasetRef, stamp: Mapping[str, Any],
                  *, store_options: Mapping[str, Any] | None = None, mode: str = "overwrite") -> bool:
    """Publish ``ds`` as one new version of the Delta Lake table at ``table_uri`` (a local path
    or s3://bucket/prefix), replacing its rows (``mode="append"``: adding them, for per-epoch
    outputs) in one atomic Delta commit. Exactly once per
    checkpoint: the commit carries a Delta app transaction (app id ``iterations/<job_id>``,
    version = checkpoint id), which survives Delta checkpoints, so publishing the same checkpoint
    again (a retry, a re-run batch) adds no version. True if this call committed a version."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    options = delta_storage_options(store_options or {})
    app_id = f"iterations/{stamp['job_id']}"
    try:
        done = DeltaTable(table_uri, storage_options=options).transaction_version(app_id)
    except TableNotFoundError:
        done = None
    if done is not None and done >= int(stamp["checkpoint_id"]):
        return False
    if mode not in ("overwrite", "append"):
        raise OutputError(f"Delta publication mode must be overwrite or append, got {mode!r}")
    if not ds.files and mode == "append":
        return False  # an epoch that emitted no rows: nothing to append
    if not ds.files:
        raise OutputError(f"output for {table_uri} has no files to publish (checkpoint {stamp['checkpoint_id']})")
    reader, rows = _record_batches(source, ds)
    write_deltalake(
        table_uri, reader, mode=mode, schema_mode="overwrite" if mode == "overwrite" else None,
        storage_options=options,
        commit_properties=CommitProperties(
            custom_metadata={"iterations.job_id": str(stamp["job_id"]),
                             "iterations.checkpoint_id": str(stamp["checkpoint_id"]),
                             "iterations.attempt_id": str(stamp.get("attempt_id", ""))},
            app_transactions=[Transaction(app_id, int(stamp["checkpoint_id"]))],
        ),
    )
    log.info("published %d rows of job %s checkpoint %s to Delta table %s",
             rows[0], stamp["job_id"], stamp["checkpoint_id"], table_uri)
    return True
