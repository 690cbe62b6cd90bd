"""A store in a directory of the local filesystem (the embedded default)."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import uuid
from typing import Any, Iterable

from include.errors import ObjectNotFound, PermanentStoreError, StoreFull
from include.store.base import TMP_MARK, ObjectInfo, ObjectStore, check_key

log = logging.getLogger(__name__)

#: S3 lets one key be an object and the prefix of others at once (``a/b`` beside ``a/b/c``); a
#: file cannot be a directory. Such a key's bytes live in this file inside its directory, and a
#: listing names it by the directory's key: a name no key can end with (``check_key`` refuses
#: backslashes), so that a stray file where the store needs a directory (``jobs/<job>/aborted/<epoch>``
#: written by hand) is kept, listed, reported by whoever lists it, and stepped around.
_SELF = "\\object"


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

    def _file(self, key: str) -> str:
        """The file that holds ``key``'s bytes: its path, or the ``_SELF`` file in it when its path
        is a directory (the key is also the prefix of others)."""
        path = self._path(key)
        return os.path.join(path, _SELF) if os.path.isdir(path) else path

    def local_path(self, key: str) -> str:
        return self._file(key)

    def location(self, key: str = "") -> str:
        return self._path(key) if key else self.root

    def spec(self) -> dict[str, Any]:
        return {"kind": "local", "root": self.root}

    def _make_parent(self, path: str) -> None:
        """The directory ``path`` goes in, made; a file (or anything but a directory) that stands
        where one of its directories must be is moved into that directory as its ``_SELF`` file:
        its key still lists and reads as before, with a warning naming it, and the write goes on
        (S3 keeps both; failing every write under it would fail every retry of an epoch)."""
        for _ in range(8):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                return
            except (FileExistsError, NotADirectoryError):
                self._make_room(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)  # still blocked: the error names the path

    def _make_room(self, path: str) -> None:
        """Turn each non-directory standing among ``path``'s ancestors (strictly below the root)
        into a directory holding it as ``_SELF``. Race-safe: the file is hard-linked aside first,
        and only one writer's unlink of the blocking name succeeds; the others find the directory.
        A process killed between that unlink and the link into the directory leaves the bytes in
        the ``<name>.tmp-<hex>`` link beside it (listed by nobody, never lost)."""
        d = self.root
        for part in os.path.relpath(os.path.dirname(path), self.root).split(os.sep):
            d = os.path.join(d, part)
            if os.path.isdir(d):
                continue
            if not os.path.lexists(d):
                return
            aside = f"{d}{TMP_MARK}{uuid.uuid4().hex}"
            try:
                os.link(d, aside, follow_symlinks=False)
            except FileNotFoundError:
                continue  # another writer moved it meanwhile
            try:
                try:
                    os.unlink(d)
                except OSError:
                    continue  # another writer made the directory first: it holds the file already
                os.makedirs(d, exist_ok=True)
                try:
                    os.link(aside, os.path.join(d, _SELF), follow_symlinks=False)
                except FileExistsError:
                    pass
                key = os.path.relpath(d, self.root).replace(os.sep, "/")
                log.warning("%s is a file where the store needs a directory (for %s): it is kept as object %r "
                            "(now %s) and the write goes on beside it", d, os.path.relpath(path, self.root)
                            .replace(os.sep, "/"), key, os.path.join(d, _SELF))
            finally:
                os.unlink(aside)

    def _target(self, path: str) -> str:
        """Where a write of the key at ``path`` puts its bytes (``_file``, by path)."""
        return os.path.join(path, _SELF) if os.path.isdir(path) else path

    def _write_tmp(self, path: str, data: bytes) -> str:
        self._make_parent(path)
        tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            try:  # no partial temporary file left behind
                os.unlink(tmp)
            except OSError:
                pass
            if e.errno in _FULL:
                raise StoreFull(f"cannot write {len(data):,} bytes to {path}: {e.strerror} (the local store at "
                                f"{self.root}; {_free(self.root)})") from e
            raise
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
        target = self._target(path)
        os.replace(tmp, target)
        self._fsync_dir(target)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        target = self._target(path)
        try:
            os.link(tmp, target)  # atomic, fails with EEXIST if the name is taken
        except FileExistsError:
            if target != path or not os.path.isdir(path):
                return False
            target = os.path.join(path, _SELF)  # a directory was made at the key meanwhile
            try:
                os.link(tmp, target)
            except FileExistsError:
                return False
        finally:
            os.unlink(tmp)
        self._fsync_dir(target)
        return True

    def open_read(self, key: str):
        """The object's file, open; ObjectNotFound if there is none (nothing at its path, a
        directory without the key's own bytes, or a file where one of its directories would be)."""
        path = self._path(key)
        try:
            return open(path, "rb")
        except IsADirectoryError:
            pass
        except (FileNotFoundError, NotADirectoryError):
            if not os.path.isdir(path):  # a directory only if made at the key meanwhile
                raise ObjectNotFound(path) from None
        try:
            return open(os.path.join(path, _SELF), "rb")
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(path) from None

    def write_stream(self, key: str, chunks, *, verify) -> None:
        """Chunk by chunk into a temporary file beside the object, renamed over it once
        ``verify()`` returned (deleted if it raises)."""
        def fill(tmp: str) -> None:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
            verify()

        self._write_verified(key, fill)

    def write_copy(self, key: str, source_path: str, *, verify) -> None:
        """The file at ``source_path`` to ``key``: copied by the kernel (``shutil.copyfile``:
        no byte through this process) into a temporary file beside the object, ``verify(tmp)``
        called on the copy (it reads the copy, which only this call writes), renamed over the
        object once it returned (deleted if it raises)."""
        def fill(tmp: str) -> None:
            try:
                shutil.copyfile(source_path, tmp)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                raise ObjectNotFound(source_path) from None
            verify(tmp)

        self._write_verified(key, fill)

    def _write_verified(self, key: str, fill) -> None:
        """``fill(tmp)`` writes and checks a temporary file beside ``key``'s; it is then made
        durable and renamed over the object, or deleted if ``fill`` raised."""
        path = self._path(key)
        self._make_parent(path)
        tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
        try:
            fill(tmp)
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            target = self._target(path)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self._fsync_dir(target)

    def get(self, key: str) -> bytes:
        with self.open_read(key) as f:
            return f.read()

    def info(self, key: str) -> ObjectInfo | None:
        try:
            return ObjectInfo(key, os.stat(self._file(key)).st_size)
        except (FileNotFoundError, NotADirectoryError):
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
                key = rel[:-1] if name == _SELF else rel + name  # _SELF: the directory's own object
                if TMP_MARK in name or not key or not key.startswith(prefix):
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
            path = self._file(key)
            try:
                os.unlink(path)
                dirs.add(os.path.dirname(path))
            except (FileNotFoundError, NotADirectoryError):
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


#: a write the filesystem cannot take: full, over quota, read-only
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _free(root: str) -> str:
    """The free space of the filesystem ``root`` is on, for an error message."""
    try:
        st = os.statvfs(root)
    except OSError:
        return "its free space unknown"
    return f"{st.f_bavail * st.f_frsize:,} bytes free of {st.f_blocks * st.f_frsize:,}"
