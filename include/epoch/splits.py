"""New input arriving while a job iterates: a split enumerator as a coordinator.

``FileSplitEnumerator`` watches an input prefix (a local directory or ``s3://bucket/prefix``).
Each data file is a *split*. When an epoch is planned the enumerator lists the prefix, adds the
files it has not seen (in name order) to its pending splits, and assigns up to
``max_splits_per_epoch`` of them to the epoch's partitions, round robin, as events
``{"split": <key relative to the prefix>, "size": <bytes>}``. Its snapshot (the files it knows and
the ones not yet assigned) goes into every checkpoint, so across failures and restarts each
split is assigned to exactly one committed epoch: an assignment made for an epoch that never
commits is forgotten with the reset and made again.

The input ends when a marker object (``_DONE`` by default) appears under the prefix: once every
split is assigned, the source has finished, and the epoch that gets the last ones is the job's
last (end of input) when it is the job's only source, or the others have finished too. The
prefix is not listed again once the marker was seen: a file written after it is never a split.

Writers must make a file appear atomically (an S3 PUT; locally, write a temporary name starting
with ``.`` or ``_`` and rename it). Names starting with ``.`` or ``_`` are never splits.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from include.epoch.coordinators import Coordinator, CoordinatorContext
from include.errors import ConfigError
from include.store import ObjectStore, open_store

log = logging.getLogger("iterations")

DONE_MARKER = "_DONE"


class FileSplitEnumerator(Coordinator):
    def __init__(self, prefix: str, *, store_options: Mapping[str, Any] | None = None,
                 suffixes: tuple[str, ...] = (".parquet", ".csv", ".json", ".jsonl"),
                 max_splits_per_epoch: int = 0, done_marker: str = DONE_MARKER):
        if max_splits_per_epoch < 0:
            raise ConfigError(f"max_splits_per_epoch must be >= 0 (0: all pending), got {max_splits_per_epoch}")
        self.prefix = prefix
        self.store_options = dict(store_options or {})
        self.suffixes = suffixes
        self.max_splits_per_epoch = max_splits_per_epoch
        self.done_marker = done_marker
        self._store: ObjectStore | None = None
        self.known: list[str] = []
        self.pending: list[str] = []
        self.ended = False

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.prefix, **self.store_options)
        return self._store

    def _is_split(self, key: str) -> bool:
        name = key.rsplit("/", 1)[-1]
        return not name.startswith((".", "_")) and name.endswith(self.suffixes)

    def discover(self) -> tuple[list[tuple[str, int]], bool]:
        """(new splits with their sizes, in name order; whether the end marker is there)."""
        known = set(self.known)
        new, ended = [], False
        for o in self.store.list(""):
            if o.key.rsplit("/", 1)[-1] == self.done_marker:
                ended = True
            elif self._is_split(o.key) and o.key not in known and o.size > 0:
                new.append((o.key, o.size))
        return sorted(new), ended

    def input_available(self) -> bool:
        """Is there something for the next epoch: pending splits, new files, or the end marker?"""
        if self.pending or self.ended:
            return True
        new, ended = self.discover()
        return bool(new) or ended

    def on_epoch_start(self, epoch: int, ctx: CoordinatorContext) -> None:
        # once the end marker was seen the input is complete: it is never listed again, and a
        # file that appears after the marker is not a split (a finished source is not read)
        new, ended = self.discover() if not self.ended else ([], True)
        sizes = dict(new)
        if new:
            self.known.extend(k for k, _ in new)
            self.pending.extend(k for k, _ in new)
            log.info("input %s: %d new split(s) discovered for epoch %d", self.store.location(), len(new), epoch)
        self.ended = self.ended or ended
        take = self.pending if not self.max_splits_per_epoch else self.pending[: self.max_splits_per_epoch]
        for i, key in enumerate(list(take)):
            ctx.send(i % ctx.num_partitions, {"split": key, "size": sizes.get(key)})
        self.pending = self.pending[len(take):]

    def input_finished(self) -> bool:
        return self.ended and not self.pending

    def snapshot(self) -> Any:
        return {"known": list(self.known), "pending": list(self.pending), "ended": self.ended}

    def rescale(self, state: Any, old_partitions: int, new_partitions: int) -> Any:
        """Splits are assigned when an epoch is planned, to that epoch's partitions; the state
        (known, pending, ended) names none: it goes on with any number of partitions."""
        return state

    def reset_to(self, state: Any | None) -> None:
        state = state or {}
        self.known = list(state.get("known", []))
        self.pending = list(state.get("pending", []))
        self.ended = bool(state.get("ended", False))


__all__ = ["DONE_MARKER", "FileSplitEnumerator"]
