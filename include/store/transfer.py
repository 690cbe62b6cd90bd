"""Copying a checkpoint's file to an output, verified, without holding it in memory.

Publication copies files the checkpoint vouches for (size and SHA-256 in its manifest) to an
output location. ``copy_verified`` never publishes bytes the checkpoint does not vouch for, and
its memory does not grow with the file:

- between two S3 stores one client can read (same endpoint and credentials), the S3 service
  copies the object (CopyObject; part by part above 5 GiB) and returns the copy's SHA-256,
  compared with the manifest's: no byte passes through this process. A service that returns no
  checksum (an older S3-compatible one, or a multipart copy) has the copy read back and hashed,
  a block at a time;
- from a local store to a local store, the kernel copies the file (``LocalStore.write_copy``) and
  the copy is read back and hashed, a block at a time, before it is made visible;
- otherwise (local to S3, S3 to local, two S3 accounts) the file is streamed a
  block at a time (``STREAM_CHUNK``), hashed as it goes, and the destination made visible only
  once size and digest match (a renamed temporary file; a completed multipart upload).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
from typing import Any, Iterator

from include.errors import CheckpointCorrupted
from include.store.base import STREAM_CHUNK, ObjectStore
from include.store.local import LocalStore
from include.store.readonly import ReadOnlyStore
from include.store.s3 import S3Store

log = logging.getLogger("iterations")


def _inner(store: ObjectStore) -> ObjectStore:
    """The store behind a read-only view (reads go to it alike)."""
    return store._store if isinstance(store, ReadOnlyStore) else store


class _Tally:
    """The size and SHA-256 of the blocks read through it, checked against a FileRef."""

    def __init__(self) -> None:
        self.digest, self.size = hashlib.sha256(), 0

    def blocks(self, store: ObjectStore, key: str) -> Iterator[bytes]:
        """The object's bytes, ``STREAM_CHUNK`` at a time, counted and hashed as they pass."""
        with store.open_read(key) as f:
            while block := f.read(STREAM_CHUNK):
                self.digest.update(block)
                self.size += len(block)
                yield block

    def read(self, store: ObjectStore, key: str) -> "_Tally":
        for _ in self.blocks(store, key):
            pass
        return self

    def read_file(self, path: str) -> "_Tally":
        with open(path, "rb") as f:
            while block := f.read(STREAM_CHUNK):
                self.digest.update(block)
                self.size += len(block)
        return self

    def check(self, ref: Any, where: str) -> None:
        """CheckpointCorrupted naming ``where`` unless what passed is ``ref``'s size and digest."""
        digest = self.digest.hexdigest()
        if self.size != ref.size:
            raise CheckpointCorrupted(f"{where} has {self.size} bytes, the manifest says {ref.size}")
        if digest != ref.sha256:
            raise CheckpointCorrupted(f"{where} fails its checksum (sha256 {digest[:12]}…, manifest says "
                                      f"{ref.sha256[:12]}…): the checkpoint is damaged")


def copy_verified(source: ObjectStore, out: ObjectStore, ref: Any, key: str) -> str:
    """Copy ``ref`` (an include.checkpoints.head_state.FileRef: key, size, sha256 of an object of ``source``) to
    ``key`` of ``out``, verified against its size and SHA-256; CheckpointCorrupted naming the
    source when it does not match (nothing left at ``key``). How it was copied:
    "server-side", "by the kernel" (local to local) or "streamed"."""
    src, dst = _inner(source), out
    where = source.location(ref.key)
    if isinstance(src, S3Store) and isinstance(dst, S3Store) and dst.reads_with(src):
        digest = dst.copy_from(src, ref.key, key, ref.size)
        try:
            if digest is None:  # the service gave no checksum of the copy: read it back
                _Tally().read(dst, key).check(ref, where)
            elif digest != ref.sha256:
                raise CheckpointCorrupted(f"{where} fails its checksum (sha256 {digest[:12]}…, manifest says "
                                          f"{ref.sha256[:12]}…): the checkpoint is damaged")
        except CheckpointCorrupted:
            dst.delete([key])
            raise
        return "server-side"
    path = src.local_path(ref.key)
    if path is not None and isinstance(dst, LocalStore):
        dst.write_copy(key, path, verify=lambda copy: _Tally().read_file(copy).check(ref, where))
        return "by the kernel"
    tally = _Tally()
    dst.write_stream(key, tally.blocks(source, ref.key), verify=lambda: tally.check(ref, where))
    return "streamed"


@contextlib.contextmanager
def verified_file(source: ObjectStore, ref: Any, scratch: str | None = None) -> Iterator[str]:
    """A local path holding ``ref``'s bytes, verified against its size and SHA-256 before it is
    given (CheckpointCorrupted otherwise): the object's own file on a local store, else a
    temporary copy in ``scratch`` (streamed a block at a time, deleted afterwards)."""
    where = source.location(ref.key)
    path = _inner(source).local_path(ref.key)
    if path is not None:
        _Tally().read(source, ref.key).check(ref, where)
        yield path
        return
    with tempfile.NamedTemporaryFile(prefix="iterations-publish-", suffix=".parquet", dir=scratch) as tmp:
        tally = _Tally()
        for block in tally.blocks(source, ref.key):
            tmp.write(block)
        tmp.flush()
        tally.check(ref, where)
        yield tmp.name


__all__ = ["copy_verified", "verified_file"]
