"""A store in a directory of the local filesystem (the embedded default)."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any, Iterable

from include.errors import ObjectNotFound, PermanentStoreError
from include.store.base import _TMP_MARK, ObjectInfo, ObjectStore, check_key

log = logging.getLogger(__name__)


class LocalStore(ObjectStore):
    """A directory on the local filesystem."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True, create: bool = True):
        """``create=False``: open an existing root only; a missing one is a PermanentStoreError
        naming it, and nothing is created."""
        self.root = os.path.abspath(os.fspath(root))
        self.fsync = fsync
        if not create:
            if not os.path.isdir(self.root):
                what = "is not a directory" if os.path.exists(self.root) else "does not exist"
                raise PermanentStoreError(
                    f"local store root {self.root} {what} (opened without creating it)"
                )
            return
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as e:
            raise PermanentStoreError(f"cannot create local store root {self.root}: {e}") from e

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def local_path(self, key: str) -> str:
        return self._path(key)

    def location(self, key: str = "") -> str:
        return self._path(key) if key else self.root

    def spec(self) -> dict[str, Any]:
        return {"kind": "local", "root": self.root}

    def _write_tmp(self, path: str, data: bytes) -> str:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}{_TMP_MARK}{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        return tmp

    def _fsync_dir(self, path: str) -> None:
        if not self.fsync:
            return
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)
        self._fsync_dir(path)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, path)  # atomic, fails with EEXIST if the name is taken
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        self._fsync_dir(path)
        return True

    def open_read(self, key: str):
        path = self._path(key)
        try:
            return open(path, "rb")
        except FileNotFoundError:
            raise ObjectNotFound(path) from None

    def write_stream(self, key: str, chunks, *, verify) -> None:
        """Chunk by chunk into a temporary file beside the object, renamed over it once
        ``verify()`` returned (deleted if it raises)."""
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}{_TMP_MARK}{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                verify()
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self._fsync_dir(path)

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise ObjectNotFound(path) from None

    def info(self, key: str) -> ObjectInfo | None:
        try:
            return ObjectInfo(key, os.stat(self._path(key)).st_size)
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        if prefix.rstrip("/"):
            check_key(prefix.rstrip("/"))
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(self.root, *base.split("/")) if base else self.root
        out: list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(start):
            rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel = "" if rel == "." else rel + "/"
            for name in files:
                key = rel + name
                if _TMP_MARK in name or not key.startswith(prefix):
                    continue
                try:
                    size = os.stat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    continue  # deleted while listing
                out.append(ObjectInfo(key, size))
        out.sort(key=lambda o: o.key)
        return out

    def delete(self, keys: Iterable[str]) -> None:
        dirs: set[str] = set()
        for key in keys:
            path = self._path(key)
            try:
                os.unlink(path)
                dirs.add(os.path.dirname(path))
            except FileNotFoundError:
                pass
        # Remove directories left empty, deepest first, never the root.
        for d in sorted(dirs, key=len, reverse=True):
            while d.startswith(self.root + os.sep):
                try:
                    os.rmdir(d)
                except OSError:
                    break
                d = os.path.dirname(d)

    def check_reachable(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise PermanentStoreError(f"local store root {self.root} is not writable")

    def check_conditional_writes(self) -> None:
        """Nothing to check: ``put_if_absent`` links a complete file to its name, and linking
        to a taken name fails with EEXIST: exactly one creator wins, by construction."""

    def marker_in_ancestors(self, marker: str) -> str | None:
        return marker_at_or_above(os.path.dirname(self.root), marker)

    def markers_below(self, marker: str, limit: int = 10) -> list[str]:
        found: list[str] = []
        head, _, name = marker.rpartition("/")
        for dirpath, dirs, files in os.walk(self.root):
            if name in files and (not head or dirpath.endswith(os.sep + head.replace("/", os.sep))):
                rel = os.path.relpath(os.path.join(dirpath, name), self.root).replace(os.sep, "/")
                if rel != marker:
                    found.append(rel)
                    if len(found) >= limit:
                        break
        return sorted(found)

    def marker_above(self, key: str, marker: str) -> str | None:
        return marker_at_or_above(self._path(key) if key else self.root, marker)


def marker_at_or_above(path: str, marker: str) -> str | None:
    """The nearest directory at or above ``path`` that holds the file ``marker`` (a relative key)."""
    while True:
        if os.path.isfile(os.path.join(path, *marker.split("/"))):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
