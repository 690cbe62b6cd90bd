"""The object store interface (``ObjectStore``), its keys and its retry policy.

Keys are relative, '/'-separated paths. ``put_if_absent`` is the one atomic primitive the
checkpoint protocol needs: exactly one of several concurrent writers of a key wins.

* LocalStore: write to a temporary file, fsync, then ``os.link`` it to the final name
  (link fails if the name exists, so the visible object is always complete and unique). As in
  S3, a key may also be the prefix of others (a stray file ``aborted/<epoch>`` beside
  ``aborted/<epoch>/<attempt>``): its bytes then live inside its directory (``local._SELF``).
* S3Store: ``PutObject`` with ``If-None-Match: *`` (HTTP 412 when the key exists).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable

from include.errors import ConfigError, PermanentStoreError

log = logging.getLogger(__name__)



TMP_MARK = ".tmp-"
_BAD_KEY = re.compile(r"(^/)|(^|/)\.\.?(/|$)|//|\\|\x00")
# A checkpoint store marks its root with this object (include.runs.boundary.mark_store): no output
# is ever published inside a store (include.publication.outputs.check_not_in_store).
STORE_MARKER = "_iterations/store.json"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_key(key: str) -> str:
    """Refuse keys that could escape the store's root (``..``, absolute paths, empty parts)."""
    if not isinstance(key, str) or not key or _BAD_KEY.search(key) or key.endswith("/"):
        raise PermanentStoreError(
            f"invalid object key {key!r}: keys are relative '/'-separated paths without "
            "'.' or '..' segments, empty segments or backslashes"
        )
    return key


def join_key(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str | None = None  # S3's entity tag (a content identity), as listed; None in a local store


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter for transient store errors."""

    max_attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ConfigError(
                f"retry delays must be >= 0, got base={self.base_delay} max={self.max_delay}"
            )

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))


#: the block a streamed copy reads and hashes at a time (include.store.copy)
STREAM_CHUNK = 1 << 20


class ObjectStore(ABC):
    """What the checkpoint log needs from a store. Implementations must be picklable
    (Spark executors receive them inside the tail's closure)."""

    def open_read(self, key: str) -> BinaryIO:
        """The object as a file to read from, start to end, without holding it in memory (a
        store of its own overrides this; the default reads it whole). ObjectNotFound if absent."""
        import io

        return io.BytesIO(self.get(key))

    def write_stream(self, key: str, chunks: Iterable[bytes], *, verify: Callable[[], None]) -> None:
        """Write the object from ``chunks`` without holding it whole (a store of its own
        overrides this; the default joins them), and make it visible only once ``verify()``,
        called after the last chunk, has returned: if it raises, nothing is left at ``key``."""
        data = b"".join(chunks)
        verify()
        self.put(key, data)

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write (or replace) an object; readers see either the old or the whole new object."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object only if the key is free. True if this call created it."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """Read an object; ObjectNotFound if absent."""

    @abstractmethod
    def info(self, key: str) -> ObjectInfo | None:
        """Size of an object, or None if absent."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; absent keys are ignored."""

    @abstractmethod
    def location(self, key: str = "") -> str:
        """A human-readable address of a key, for messages."""

    def url(self, key: str) -> str:
        """The address other tools open a key by: a local path or s3://bucket/key."""
        return self.location(key)

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """JSON-able description without secrets, enough to reopen the store elsewhere."""

    def exists(self, key: str) -> bool:
        return self.info(key) is not None

    def local_path(self, key: str) -> str | None:
        """Filesystem path of a key when the store is a local directory."""
        return None

    def marker_above(self, key: str, marker: str) -> str | None:
        """Where ``marker`` lies in the directory of ``key`` or in one of its ancestors, up to
        the top of the filesystem or the bucket (beyond this store's own root): the location of
        the first such directory, None if there is none."""
        parts = [p for p in key.split("/") if p]
        for n in range(len(parts), -1, -1):
            prefix = "/".join(parts[:n])
            if self.exists(f"{prefix}/{marker}" if prefix else marker):
                return self.location(prefix)
        return None

    def marker_in_ancestors(self, marker: str) -> str | None:
        """The nearest directory (or prefix) strictly above this store's root that holds
        ``marker``: its location; None if none does, up to the top of the filesystem or bucket."""
        return None

    def markers_below(self, marker: str, limit: int = 10) -> list[str]:
        """Keys strictly under this store's root that end with ``/<marker>`` (the roots of
        stores nested inside this one), at most ``limit`` of them. Lists the whole store: for a
        store being created, not one in use."""
        return [o.key for o in self.list("") if o.key.endswith("/" + marker)][:limit]

    def check_reachable(self) -> None:
        """Fail fast, naming the store, if it cannot be used at all."""
        self.list("__probe__/")

    def check_conditional_writes(self) -> None:
        """Fail with PermanentStoreError, naming the store, if ``put_if_absent`` is not really
        exclusive here (a second create of a key also "wins"), so that a job does not start
        committing checkpoints on a store where two attempts could both believe they committed.
        Writes (a scratch object, removed again) where a check is needed: call it from code
        that is about to write anyway, never from read-only users. Idempotent and cheap when
        repeated. Default: nothing to check (a store whose exclusive create is atomic by
        construction, or one that cannot write at all)."""
