"""The driver's partition ids for a local frame (spark_jobs.storeio.hashing) equal Spark's
``pmod(hash(columns...), P)``, bit for bit, over every type it claims and the values that trip
hash functions up: nulls, -0.0, NaN, infinities, extremes, empty and multi-byte strings, empty
and null arrays, arrays holding nulls, nested arrays."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.frames import arrow_of, local_frame
from spark_jobs.storeio.hashing import partition_ids

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
COLUMNS = {
    "b": (BooleanType(), [True, False, None, True]),
    "i8": (ByteType(), [-128, 127, 0, None]),
    "i16": (ShortType(), [-32768, 32767, -1, 7]),
    "i32": (IntegerType(), [-2**31, 2**31 - 1, 0, None]),
    "i64": (LongType(), [-2**63, 2**63 - 1, -1, 123456789012345]),
    "f32": (FloatType(), [-0.0, -float("nan"), float("inf"), 1.5]),  # -nan: another NaN's bits
    "f64": (DoubleType(), [-0.0, -float("nan"), -float("inf"), 5e-324]),
    "s": (StringType(), ["", "a", "héllo wörld ✓", None]),
    "s5": (StringType(), ["abcde", "abcdefgh", "\u00ff\u00fe\u00fd", "x" * 37]),
    "bin": (BinaryType(), [b"", b"\x80\xff\x00", b"abcd", None]),
    "d": (DateType(), [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2026, 11, 26), None]),
    "ts": (TimestampType(), [dt.datetime(2026, 11, 26, 12, 0, 1, 250, tzinfo=UTC), None,
                             dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(1970, 1, 1, tzinfo=UTC)]),
    "ad": (ArrayType(DoubleType()), [[1.0, -0.0, float("nan")], [], None, [None, 2.5]]),
    "ai": (ArrayType(IntegerType()), [[1, 2, 3], [None], [], [-5]]),
    "as": (ArrayType(StringType()), [["a", None, "bcdef"], None, [""], ["✓"]]),
    "aa": (ArrayType(ArrayType(LongType())), [[[1, 2], [], None], [[3]], None, [[None, 4]]]),
}


def _frame(spark, names):
    """(a DataFrame of the columns, the Arrow table it holds)."""
    if names == ["ts"]:  # local_frame's schema conversion needs a time zone for timestamps: build the table
        table = pa.table({"ts": pa.array(COLUMNS["ts"][1], pa.timestamp("us", tz="UTC"))})
        return spark.createDataFrame(table), table
    schema = StructType([StructField(n, COLUMNS[n][0]) for n in names])
    df = local_frame(spark, list(zip(*(COLUMNS[n][1] for n in names))), schema)
    return df, arrow_of(df)


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_each_type_alone(spark, name):
    df, table = _frame(spark, [name])
    for p in (1, 2, 3, 7, 200):
        expected = [r[0] for r in df.select(F.pmod(F.hash(F.col(name)), F.lit(p))).collect()]
        got = partition_ids(table, [name], p)
        assert got is not None and got.tolist() == expected, (name, p, COLUMNS[name][1])


def test_columns_chained_and_many_random_rows(spark):
    import numpy as np

    rng = np.random.default_rng(5)
    n = 500
    values = {
        "i32": rng.integers(-2**31, 2**31, n).tolist(),
        "f64": [float(x) if i % 17 else math.nan for i, x in enumerate(rng.normal(size=n) * 1e6)],
        "s": ["".join(chr(c) for c in rng.integers(32, 1000, i % 13)) if i % 11 else None for i in range(n)],
        "ad": [rng.normal(size=i % 9).tolist() if i % 7 else None for i in range(n)],
    }
    schema = StructType([StructField(k, COLUMNS[k][0]) for k in values])
    df = local_frame(spark, list(zip(*values.values())), schema)
    for cols in (["i32"], ["s", "ad"], list(values), ["ad", "f64", "i32"]):
        expected = [r[0] for r in df.select(F.pmod(F.hash(*[F.col(c) for c in cols]), F.lit(4))).collect()]
        assert partition_ids(arrow_of(df), cols, 4).tolist() == expected, cols


def test_a_type_it_does_not_hash_is_left_to_spark(spark):
    df = local_frame(spark, [(1, None)], StructType([StructField("k", IntegerType()),
                                                     StructField("m", DecimalType(10, 2))]))
    assert partition_ids(arrow_of(df), ["k", "m"], 2) is None
    assert partition_ids(pa.table({"x": pa.array([{"a": 1}])}), ["x"], 2) is None
