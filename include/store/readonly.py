"""A store seen read-only: reads pass through, writes and deletes are refused."""

from __future__ import annotations

from typing import Any, Iterable

from include.errors import IterationError
from include.store.base import ObjectInfo, ObjectStore


class ReadOnlyViolation(IterationError):
    """Something tried to write through a read-only view of a store."""


class ReadOnlyStore(ObjectStore):
    """A store seen read-only: reads are passed through, writes and deletes refused."""

    def __init__(self, store: ObjectStore):
        self._store = store

    def _refuse(self, what: str, key: Any) -> None:
        raise ReadOnlyViolation(f"{what} {key!r} refused: {self._store.location()} is opened read-only")

    def put(self, key: str, data: bytes) -> None:
        self._refuse("put", key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._refuse("put_if_absent", key)
        return False

    def delete(self, keys: Iterable[str]) -> None:
        self._refuse("delete", list(keys))

    def get(self, key: str) -> bytes:
        return self._store.get(key)

    def open_read(self, key: str):
        return self._store.open_read(key)

    def write_stream(self, key: str, chunks, *, verify) -> None:
        self._refuse("write", key)

    def info(self, key: str) -> ObjectInfo | None:
        return self._store.info(key)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return self._store.list(prefix)

    def location(self, key: str = "") -> str:
        return self._store.location(key)

    def url(self, key: str) -> str:
        return self._store.url(key)

    def spec(self) -> dict[str, Any]:
        return self._store.spec()

    def exists(self, key: str) -> bool:
        return self._store.exists(key)

    def local_path(self, key: str) -> str | None:
        return self._store.local_path(key)

    def marker_above(self, key: str, marker: str) -> str | None:
        return self._store.marker_above(key, marker)

    def marker_in_ancestors(self, marker: str) -> str | None:
        return self._store.marker_in_ancestors(marker)

    def markers_below(self, marker: str, limit: int = 10) -> list[str]:
        return self._store.markers_below(marker, limit)
