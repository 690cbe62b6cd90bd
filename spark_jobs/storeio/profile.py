"""The profile of a written partition, for the data checks: what the tail learns of its
records as it writes them."""

from __future__ import annotations

from typing import Any, Mapping, Sequence


class Profile:
    """A partition's profile for the data checks, built from the record batches the tail
    writes (no second pass): records; per column its nulls; per numeric column its
    non-finite values (NaN, +-inf) and the min, max and sum of its finite values; the records
    whose key equals the previous record's (records arrive sorted by key, so these are the
    duplicate keys). ``include.checks`` combines the partitions' profiles."""

    def __init__(self, key_columns: Sequence[str] = (), facts: Mapping[str, float] | None = None):
        self.key_columns = tuple(key_columns)
        self.facts = {k: float(v) for k, v in (facts or {}).items()}
        self.rows = 0
        self.columns: dict[str, dict[str, Any]] = {}
        self.duplicate_keys = 0
        self._last_key: tuple | None = None

    def add(self, batch) -> None:
        import numpy as np
        import pyarrow as pa

        self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns):
            stats = self.columns.setdefault(name, {"nulls": 0})
            stats["nulls"] += column.null_count
            kind = column.type
            if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
                column, kind = column.flatten(), kind.value_type  # an array's stats: over its elements
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                continue
            values = column.drop_null().to_numpy(zero_copy_only=False)
            if pa.types.is_floating(kind):
                finite = np.isfinite(values)
                stats["nonfinite"] = stats.get("nonfinite", 0) + int(values.size - finite.sum())
                values = values[finite]
            else:
                stats.setdefault("nonfinite", 0)
            stats["sum"] = stats.get("sum", 0.0) + float(values.sum(dtype="float64"))
            if values.size:
                low, high = float(values.min()), float(values.max())
                stats["min"] = low if stats.get("min") is None else min(stats["min"], low)
                stats["max"] = high if stats.get("max") is None else max(stats["max"], high)
        if self.key_columns and batch.num_rows:
            keys = [batch.column(k).to_numpy(zero_copy_only=False) for k in self.key_columns]
            same = np.ones(batch.num_rows - 1, dtype=bool)
            for k in keys:
                same &= k[1:] == k[:-1]
            first = tuple(k[0] for k in keys)
            self.duplicate_keys += int(same.sum()) + int(self._last_key == first)
            self._last_key = tuple(k[-1] for k in keys)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rows": self.rows, "columns": self.columns}
        if self.key_columns:
            d["duplicate_keys"] = self.duplicate_keys
        if self.facts:
            d["facts"] = self.facts
        return d
