"""Copying a checkpoint's file to an output, verified, without holding it in memory.

Publication copies files the checkpoint vouches for (size and SHA-256 in its manifest) to an
output location. ``copy_verified`` never publishes bytes the checkpoint does not vouch for, and
its memory does not grow with the file:

- between two S3 stores one client can read (same endpoint and credentials), the S3 service
  copies the object (CopyObject; part by part above 5 GiB) and returns the copy's SHA-256,
  compared with the manifest's: no byte passes through this process. A service that returns no
  checksum (an older S3-compatible one, or a multipart copy) has the copy read back and hashed,
  a block at a time;
- otherwise (local to local, local to S3, S3 to local, two S3 accounts) the file is streamed a
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

log = logging.getLogger("iterations")


def _inner(store: ObjectStore) -> ObjectStore:
    """The store behind a read-only view (reads go to it alike)."""
    from include.store.readonly import ReadOnlyStore

    return store._store if isinstance(store, ReadOnlyStore) else store


def _mismatch(where: str, size: int, digest: str, ref: Any) -> CheckpointCorrupted:
    if size != ref.size:
        return CheckpointCorrupted(f"{where} has {size} bytes, the manifest says {ref.size}")
    return CheckpointCorrupted(f"{where} fails its checksum (sha256 {digest[:12]}…, manifest says "
                               f"{ref.sha256[:12]}…): the checkpoint is damaged")


def _hash_stream(store: ObjectStore, key: str) -> tuple[int, str]:
    h, n = hashlib.sha256(), 0
    with store.open_read(key) as f:
        while block := f.read(STREAM_CHUNK):
            h.update(block)
            n += len(block)
    return n, h.hexdigest()


def copy_verified(source: ObjectStore, out: ObjectStore, ref: Any, key: str) -> str:
    """Copy ``ref`` (an include.head.FileRef: key, size, sha256 of an object of ``source``) to
    ``key`` of ``out``, verified against its size and SHA-256; CheckpointCorrupted naming the
    source when it does not match (nothing left at ``key``). How it was copied:
    "server-side" or "streamed"."""
    from include.store.s3 import S3Store

    src, dst = _inner(source), out
    where = source.location(ref.key)
    if isinstance(src, S3Store) and isinstance(dst, S3Store) and dst.reads_with(src):
        digest = dst.copy_from(src, ref.key, key)
        size = ref.size
        if digest is None:  # the service gave no checksum of the copy: read it back
            size, digest = _hash_stream(dst, key)
        if (size, digest) != (ref.size, ref.sha256):
            dst.delete([key])
            raise _mismatch(where, size, digest, ref)
        return "server-side"
    h, n = hashlib.sha256(), 0

    def chunks():
        nonlocal n
        with source.open_read(ref.key) as f:
            while block := f.read(STREAM_CHUNK):
                h.update(block)
                n += len(block)
                yield block

    def verify() -> None:
        if (n, h.hexdigest()) != (ref.size, ref.sha256):
            raise _mismatch(where, n, h.hexdigest(), ref)

    dst.write_stream(key, chunks(), verify=verify)
    return "streamed"


@contextlib.contextmanager
def verified_file(source: ObjectStore, ref: Any, scratch: str | None = None) -> Iterator[str]:
    """A local path holding ``ref``'s bytes, verified against its size and SHA-256 before it is
    given (CheckpointCorrupted otherwise): the object's own file on a local store, else a
    temporary copy in ``scratch`` (streamed a block at a time, deleted afterwards)."""
    where = source.location(ref.key)
    path = _inner(source).local_path(ref.key)
    if path is not None:
        size, digest = _hash_stream(source, ref.key)
        if (size, digest) != (ref.size, ref.sha256):
            raise _mismatch(where, size, digest, ref)
        yield path
        return
    with tempfile.NamedTemporaryFile(prefix="iterations-publish-", suffix=".parquet", dir=scratch) as tmp:
        h, n = hashlib.sha256(), 0
        with source.open_read(ref.key) as f:
            while block := f.read(STREAM_CHUNK):
                h.update(block)
                n += len(block)
                tmp.write(block)
        tmp.flush()
        if (n, h.hexdigest()) != (ref.size, ref.sha256):
            raise _mismatch(where, n, h.hexdigest(), ref)
        yield tmp.name


__all__ = ["copy_verified", "verified_file"]
