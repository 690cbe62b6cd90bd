"""Spark's ``pmod(hash(columns...), P)`` computed on an Arrow table, without Spark.

The tail assigns each record to partition ``pmod(hash(keys), P)``, where ``hash`` is Spark's
``Murmur3Hash`` with seed 42. A local frame (rows the driver holds) is written by the driver;
asking Spark for its partition ids costs a plan and a collect per dataset, more than the rest
of the write of a few rows. This module computes the same ids with numpy, bit for bit, for the
types local frames hold: booleans, integers of any width, floats and doubles, strings, binary,
dates and timestamps, and arrays of these (nested), nulls included. Any other type (decimals,
maps, structs, intervals) gives None, and the caller asks Spark.

Spark's rules (``org.apache.spark.sql.catalyst.expressions.Murmur3HashFunction``): columns and
array elements chain their hashes (each one's result is the next one's seed) and a null leaves
the seed as it is; a boolean, byte, short, int and date hash as an int; a long and a timestamp
as a long; a float as the int of its bits and a double as the long of its bits, -0.0 as 0.0
and every NaN as Java's canonical NaN; strings and binary through ``hashUnsafeBytes``, which
takes the last ``length % 4`` bytes one at a time, each a signed byte.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

SEED = 42
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h1 = h1 ^ np.asarray(length, dtype=np.uint32)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    return h1 ^ (h1 >> np.uint32(16))


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    return _fmix(_mix_h1(seed, _mix_k1(values.astype(np.int64).astype(np.uint32))), 4)


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    bits = values.astype(np.int64).view(np.uint64)
    h1 = _mix_h1(seed, _mix_k1((bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
    h1 = _mix_h1(h1, _mix_k1((bits >> np.uint64(32)).astype(np.uint32)))
    return _fmix(h1, 8)


def _hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes`` of one value."""
    n = len(data)
    aligned = n - n % 4
    h1 = np.uint32(seed)
    with np.errstate(over="ignore"):
        if aligned:
            for word in np.frombuffer(data[:aligned], dtype="<u4"):
                h1 = _mix_h1(h1, _mix_k1(word))
        for byte in np.frombuffer(data[aligned:], dtype=np.int8):
            h1 = _mix_h1(h1, _mix_k1(np.uint32(np.int64(byte) & 0xFFFFFFFF)))
        return int(_fmix(h1, n))


def _kind(arrow_type: Any) -> str | None:
    """How Spark hashes a column of this Arrow type: "int", "long", "float", "double",
    "bytes", "list", or None (not computed here)."""
    import pyarrow as pa

    t = arrow_type
    if pa.types.is_boolean(t) or pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t) \
            or pa.types.is_date32(t):
        return "int"
    if pa.types.is_int64(t) or pa.types.is_timestamp(t):
        return "long" if not pa.types.is_timestamp(t) or t.unit == "us" else None
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _kind(t.value_type) is not None:
        return "list"
    return None


def _hash_column(column: Any, seed: np.ndarray) -> np.ndarray:
    """``seed`` chained through the values of an Arrow array (one seed per value)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = _kind(column.type)
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if not valid.any():
        return seed
    out = seed.copy()
    if kind == "list":
        # element j of every list at once; a row's hash goes through its elements in order
        lengths = np.asarray(pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False))
        values = pc.list_flatten(column)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        for j in range(int(lengths.max(initial=0))):
            rows = np.flatnonzero(valid & (lengths > j))
            out[rows] = _hash_column(values.take(pa.array(starts[rows] + j)), out[rows])
        return out
    if kind == "bytes":
        for i in np.flatnonzero(valid):
            value = column[int(i)].as_py()
            out[i] = _hash_bytes(value.encode("utf-8") if isinstance(value, str) else value, int(out[i]))
        return out
    rows = np.flatnonzero(valid)
    if pa.types.is_timestamp(column.type) or pa.types.is_date32(column.type):
        column = column.view(pa.int64() if pa.types.is_timestamp(column.type) else pa.int32())
    values = np.asarray(column.to_numpy(zero_copy_only=False))[rows]
    if kind == "int":
        out[rows] = _hash_int(values.astype(np.int64), seed[rows])
    elif kind == "long":
        out[rows] = _hash_long(values, seed[rows])
    elif kind == "float":
        v = values.astype(np.float32)
        v = np.where(v == 0, np.float32(0.0), v)  # -0.0 hashes as 0.0
        bits = v.view(np.uint32).copy()
        bits[np.isnan(v)] = 0x7FC00000  # Java's floatToIntBits: one NaN
        out[rows] = _hash_int(bits.view(np.int32), seed[rows])
    else:
        v = values.astype(np.float64)
        v = np.where(v == 0, 0.0, v)
        bits = v.view(np.uint64).copy()
        bits[np.isnan(v)] = 0x7FF8000000000000  # Java's doubleToLongBits: one NaN
        out[rows] = _hash_long(bits.view(np.int64), seed[rows])
    return out


def partition_ids(table: Any, columns: Sequence[str], num_partitions: int) -> np.ndarray | None:
    """Spark's ``pmod(hash(columns...), num_partitions)`` for each row of the Arrow ``table``
    (int32), or None when a column has a type this module does not hash like Spark."""
    if any(_kind(table.schema.field(c).type) is None for c in columns):
        return None
    h = np.full(table.num_rows, SEED, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for c in columns:
            h = _hash_column(table.column(c).combine_chunks(), h)
    return np.mod(h.view(np.int32).astype(np.int64), num_partitions).astype(np.int32)
