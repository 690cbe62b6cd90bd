"""The records an input spec carries when its input is pinned: a published version of an output
(``check_pinned``) or a directory's files (``check_pinned_files``), checked by shape."""

from __future__ import annotations

import re
from typing import Any, Mapping

from include.checkpoints.layout import JOB_ID_PATTERN
from include.checkpoints.record_schemas import VERSION_PATTERN
from include.errors import ConfigError
from include.store import Location, LocationError

MAX_PINNED_FILES = 100_000  # files (objects) one input may have
#: the scalar fields of a pinned version, and the check of each
PINNED_FIELDS = {
    "job_id": lambda v: isinstance(v, str) and bool(JOB_ID_PATTERN.fullmatch(v)),
    "checkpoint_id": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "version": lambda v: isinstance(v, str) and bool(VERSION_PATTERN.fullmatch(v)),
    "rows": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "format": lambda v: v in ("parquet", "delta"),
    "replaces": lambda v: v is None or (isinstance(v, str) and bool(VERSION_PATTERN.fullmatch(v))),
}


def check_pinned(pinned: Any, where: str) -> dict[str, Any]:
    """The part of an input spec that names the files of one version (``InputSpec.published``),
    checked: a version, its rows, and files ``<version>/part-NNNNN.parquet`` under the input,
    nothing else (ConfigError naming ``where`` otherwise)."""
    if not isinstance(pinned, Mapping):
        raise ConfigError(f"{where}: the pinned input version must be an object, got {type(pinned).__name__}")
    version = pinned.get("version")
    if not PINNED_FIELDS["version"](version):
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
        if not PINNED_FIELDS[key](pinned.get(key)):
            raise ConfigError(f"{where}: {key} {pinned.get(key)!r} of the pinned input is not valid")
    return {"version": version, "job_id": pinned["job_id"], "checkpoint_id": pinned["checkpoint_id"],
            "rows": pinned["rows"], "files": [{"key": f["key"], "size": f["size"], "sha256": f.get("sha256")}
                                              for f in files]}


def check_pinned_files(files: Any, where: str) -> list[dict[str, Any]]:
    """The pinned files of an input (``InputSpec.files``), checked: each a key in the location
    grammar (or "" for an input that is one file), a size, and its identity fields of the right
    shape; ConfigError naming ``where`` otherwise."""
    sha = re.compile(r"[0-9a-f]{64}")

    def ok(f: Any) -> bool:
        if not isinstance(f, Mapping) or not isinstance(f.get("key"), str):
            return False
        if f["key"]:
            try:
                Location.parse("s3://bucket-name").child(f["key"])
            except LocationError:
                return False
        nat = lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)  # noqa: E731
        return (nat(f.get("size")) and f.get("size") is not None and nat(f.get("mtime_ns")) and nat(f.get("ctime_ns"))
                and (f.get("sha256") is None or (isinstance(f["sha256"], str) and bool(sha.fullmatch(f["sha256"]))))
                and (f.get("etag") is None or (isinstance(f["etag"], str) and 0 < len(f["etag"]) <= 128)))

    if not isinstance(files, list) or not files or len(files) > MAX_PINNED_FILES or not all(ok(f) for f in files):
        raise ConfigError(f"{where}: the pinned files of the input must be a list of 1 to {MAX_PINNED_FILES} "
                          "{key, size, sha256|etag} records, keys in the location grammar")
    keys = [f["key"] for f in files]
    if len(set(keys)) != len(keys) or ("" in keys and len(keys) > 1):
        raise ConfigError(f"{where}: the pinned files of the input name a file twice")
    fields = ("key", "size", "sha256", "mtime_ns", "ctime_ns", "etag")
    return [{k: f[k] for k in fields if f.get(k) is not None} for f in files]
