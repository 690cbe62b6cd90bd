"""Published outputs, replaced atomically.

An output ``<output_path>/<name>`` is a set of Parquet files under a version prefix
``<name>/v-<job>-<checkpoint>/`` made visible all at once by replacing one object,
``<name>/_PUBLISHED.json``, which lists the files (size and SHA-256) and names the checkpoint
they come from. Readers follow that manifest (``published()``), so they see the old outputs or
the new ones, never a mix, and re-publishing (a recomputed batch) replaces the outputs in one
step. The version before the current one is kept for readers still on it; older ones are deleted.

Publishing is idempotent: a manifest that already names the same job and checkpoint is left
alone; a publication that died half way is redone into the same version prefix.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Mapping

from include.checkpoint import DatasetRef
from include.errors import ObjectNotFound, OutputError
from include.store import ObjectStore, open_store

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
    try:
        data = json.loads(out.get(f"{name}/{PUBLISHED}"))
    except ObjectNotFound:
        return None
    if data.get("format") != FORMAT:
        raise OutputError(f"{out.location(name)}/{PUBLISHED} is not a publication manifest ({FORMAT})")
    return data


def publish_dataset(source: ObjectStore, out: ObjectStore, name: str, ds: DatasetRef, stamp: Mapping[str, Any]) -> bool:
    """Copy ``ds`` (objects of ``source``) under a new version of output ``name`` and switch the
    manifest to it. ``stamp`` names the checkpoint: job_id, checkpoint_id, attempt_id.
    True if this call published, False if the same checkpoint was already published."""
    current = _manifest(out, name)
    if current and (current["job_id"], current["checkpoint_id"]) == (stamp["job_id"], stamp["checkpoint_id"]):
        return False
    version = f"v-{stamp['job_id']}-{stamp['checkpoint_id']}"
    files = []
    for i, ref in enumerate(ds.files):
        key = f"{name}/{version}/part-{i:05d}.parquet"
        out.put(key, source.get(ref.key))
        files.append({"key": key, "size": ref.size, "sha256": ref.sha256})
    manifest = {
        "format": FORMAT,
        "name": name,
        **{k: stamp[k] for k in ("job_id", "checkpoint_id", "attempt_id")},
        "version": version,
        "rows": ds.rows,
        "schema": ds.schema,
        "files": files,
        "replaces": current["version"] if current else None,
    }
    out.put(f"{name}/{PUBLISHED}", json.dumps(manifest, indent=1).encode())  # the switch
    keep = {version, current["version"] if current else None}
    stale = [o.key for o in out.list(f"{name}/")
             if o.key != f"{name}/{PUBLISHED}" and o.key[len(name) + 1:].split("/", 1)[0] not in keep]
    out.delete(stale)
    log.info("published output %s of job %s checkpoint %s to %s (%d files, %d rows%s)",
             name, stamp["job_id"], stamp["checkpoint_id"], out.location(name), len(files), ds.rows,
             f", replacing {current['version']}" if current else "")
    return True


def published(output_path: str, name: str, **store_options: Any) -> Published:
    """The current version of output ``name`` under ``output_path``; OutputError if none."""
    out = open_store(output_path, **store_options)
    m = _manifest(out, name)
    if m is None:
        raise OutputError(f"no output {name!r} is published under {out.location()} (no {name}/{PUBLISHED})")
    return Published(name, m["job_id"], int(m["checkpoint_id"]), int(m["rows"]),
                     tuple(out.url(f["key"]) for f in m["files"]), m)
