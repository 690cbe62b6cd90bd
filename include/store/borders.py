"""The borders of what a store owns: no store inside another, no input or output inside one.

A checkpoint store owns its tree: its root is marked (``_iterations/store.json``) the first time
a run uses it, and from then on no other store, and no job directory of another store, may lie
inside it or above it; an input may not name anything inside a store (another job's state) nor
a directory that holds one; an output is never published inside one. Each check looks for the
store marker (and for the owner records of job directories, ``jobs/<id>/owner.json``, which a
store written before markers existed has too) above and below the location, through the store
interface (local directories and S3 prefixes alike), and refuses with a message that names the
store it found.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

from include.store.base import STORE_MARKER, ObjectStore
from include.store.location import Location, LocationError

#: a job directory's owner record, as a store's layout has it (include.checkpoints.layout.JobLayout.owner)
OWNER_RECORD = "owner.json"
_JOB_OWNER = re.compile(r"(?:^|/)jobs/[A-Za-z0-9][A-Za-z0-9_.\-]*/owner\.json$")


def _job_dir_above(store: ObjectStore) -> str | None:
    where = store.marker_in_ancestors(OWNER_RECORD)
    if where is None:
        return None
    parts = where.rstrip("/").split("/")
    return where if len(parts) >= 2 and parts[-2] == "jobs" else None


def check_store_borders(store: ObjectStore, what: str = "checkpoint_root") -> None:
    """LocationError if ``store``'s root lies inside another store or another job's directory,
    or, for a store not marked yet (a new one), if one lies inside it. Reads only."""
    above = store.marker_in_ancestors(STORE_MARKER)
    if above is not None:
        raise LocationError(f"{what} {store.location()} lies inside the checkpoint store {above}: a store owns its "
                            "tree; choose a checkpoint_root outside every other store (or that store's root itself)")
    job_dir = _job_dir_above(store)
    if job_dir is not None:
        raise LocationError(f"{what} {store.location()} lies inside the directory of job {job_dir.rsplit('/', 1)[-1]} "
                            f"({job_dir}): choose a checkpoint_root outside every job's directory")
    if store.exists(STORE_MARKER):
        return  # an existing store: what lies inside it was refused when it was made
    nested = store.markers_below(STORE_MARKER)
    if nested:
        raise LocationError(f"{what} {store.location()} contains the checkpoint store(s) "
                            f"{', '.join(store.location(k.rsplit('/', 2)[0]) for k in nested)}: a store may not hold "
                            "another; choose that store's root, or a directory beside it")
    jobs = [o.key for o in store.list("") if _JOB_OWNER.search(o.key) and not o.key.startswith("jobs/")][:5]
    if jobs:
        raise LocationError(f"{what} {store.location()} contains the directories of jobs of another store "
                            f"({', '.join(store.location(k.rsplit('/', 1)[0]) for k in jobs)}): choose another "
                            "checkpoint_root")


def check_not_inside_store(store: ObjectStore, location: Location, what: str) -> None:
    """LocationError if ``location`` (opened as ``store``) lies inside a checkpoint store or a job's
    directory, or is the root of one."""
    if store.exists(STORE_MARKER):
        raise LocationError(f"{what} {location.url} is a checkpoint store: a run never reads or writes another "
                            "job's state as data")
    above = store.marker_in_ancestors(STORE_MARKER)
    if above is not None:
        raise LocationError(f"{what} {location.url} lies inside the checkpoint store {above}: a run never reads or "
                            "writes another job's state as data")
    job_dir = _job_dir_above(store)
    if job_dir is not None:
        raise LocationError(f"{what} {location.url} lies inside the directory of job {job_dir.rsplit('/', 1)[-1]} "
                            f"({job_dir}): a run never reads or writes another job's state as data")


def check_keys_hold_no_store(keys: Iterable[str], location: Location, what: str) -> None:
    """LocationError if a listing of ``location`` (its keys, relative to it) shows a checkpoint
    store or a job's directory inside it."""
    for key in keys:
        if key == STORE_MARKER or key.endswith("/" + STORE_MARKER) or _JOB_OWNER.search(key):
            inner = key[:-len(STORE_MARKER)].rstrip("/") if key.endswith(STORE_MARKER) else key.rsplit("/", 1)[0]
            raise LocationError(f"{what} {location.url} holds checkpoint data ({location.url.rstrip('/')}/{inner}): "
                                "a run never reads another job's state as data; name the input's files, not a "
                                "directory around a store")


def check_local_tree(location: Location, allows, what: str) -> None:
    """For a local directory read as a whole (Spark lists every file under it, following
    symbolic links): every link in it must lead to a place ``allows`` (a Location predicate)
    accepts, and nothing under it may be a checkpoint store or a job's directory."""
    if not os.path.isdir(location.path):
        return
    keys: list[str] = []
    seen: set[str] = set()
    for dirpath, dirs, files in os.walk(location.path, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a link back up the tree: walked already
            dirs[:] = []
            continue
        seen.add(real)
        for name in [*dirs, *files]:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                target = os.path.realpath(full)
                try:
                    resolved = Location.parse(target, f"{what} {location.url!r}: the link {full!r}")
                except LocationError as e:
                    raise LocationError(str(e)) from None
                if not allows(resolved):
                    raise LocationError(f"{what} {location.url!r}: the link {full!r} leads to {target!r}, outside the "
                                        "allowed roots; Spark would read it as part of the input")
        rel = os.path.relpath(dirpath, location.path).replace(os.sep, "/")
        keys.extend(f"{rel}/{f}" if rel != "." else f for f in files)
    check_keys_hold_no_store(keys, location, what)


def _local_marker_above(path: str, marker: str) -> str | None:
    """The nearest directory at or above ``path`` (a file's directory) holding ``marker``."""
    from include.store.local import marker_at_or_above

    return marker_at_or_above(path if os.path.isdir(path) else os.path.dirname(path), marker)


def _local_job_dir_above(path: str) -> str | None:
    here = path if os.path.isdir(path) else os.path.dirname(path)
    while True:
        if os.path.basename(os.path.dirname(here)) == "jobs" and os.path.isfile(os.path.join(here, OWNER_RECORD)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def check_input_borders(source: Location, checkpoint_root: Location | None = None,
                        store_options: Mapping[str, Any] | None = None) -> None:
    """LocationError if the input ``source`` overlaps the run's checkpoint root or one of the
    deployment's (``ITERATIONS_CHECKPOINT_ROOTS``), lies inside a checkpoint store or a job's
    directory, or (a directory or prefix read as a whole) holds one: a run never reads another
    job's state as its input. Reads only (a local walk, an S3 listing and a few HEADs)."""
    from include.store.roots import deployment_checkpoint_roots

    what = "input_path"
    for root in [checkpoint_root, *deployment_checkpoint_roots()]:
        if root is None:
            continue
        where = Location.parse(root, "checkpoint root")
        if source.overlaps(where):
            raise LocationError(f"{what} {source.url} overlaps the checkpoint root {where.url}: a run never reads "
                                "checkpoint data as its input")
    if source.is_local:
        store = _local_marker_above(source.path, STORE_MARKER)
        if store is not None:
            raise LocationError(f"{what} {source.url} lies inside the checkpoint store {store}: a run never reads "
                                "another job's state as its input")
        job_dir = _local_job_dir_above(source.path)
        if job_dir is not None:
            raise LocationError(f"{what} {source.url} lies inside the directory of job {os.path.basename(job_dir)} "
                                f"({job_dir}): a run never reads another job's state as its input")
        if os.path.isdir(source.path):
            keys = []
            for dirpath, _dirs, files in os.walk(source.path, followlinks=True):
                rel = os.path.relpath(dirpath, source.path).replace(os.sep, "/")
                keys.extend(f"{rel}/{f}" if rel != "." else f for f in files)
            check_keys_hold_no_store(keys, source, what)
        return
    from include.store import open_store

    store = open_store(source.url, **dict(store_options or {}))
    check_not_inside_store(store, source, what)
    check_keys_hold_no_store([o.key for o in store.list("")], source, what)


__all__ = ["OWNER_RECORD", "check_input_borders", "check_keys_hold_no_store", "check_local_tree",
           "check_not_inside_store", "check_store_borders"]
