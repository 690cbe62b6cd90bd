"""Spark helpers for bodies: small DataFrames the driver holds."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: StructType) -> DataFrame:
    """A small DataFrame of rows the driver holds (k-means' centroids, a model's weights), made
    from Arrow so that Spark sees a local relation (``DataFrame.isLocal()``): reading it runs no
    Spark job, and the tail writes it from the driver instead of a Spark job per dataset.
    ``spark.createDataFrame(list_of_rows, ...)`` gives the same rows as a distributed dataset.
    The Arrow table is kept with the frame (``arrow_of``): the tail writes it as it is instead
    of asking Spark for the rows again."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema)
    columns = list(zip(*rows)) if rows else [() for _ in schema.fields]
    return arrow_frame(spark, pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, arrow)],
                                                   schema=arrow))


def arrow_frame(spark: SparkSession, table: Any) -> DataFrame:
    """``local_frame`` of an Arrow table: a local relation, the table kept with it."""
    df = spark.createDataFrame(table)
    _TABLES[df] = table
    return df


_TABLES: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def arrow_of(df: DataFrame) -> Any:
    """The Arrow table ``local_frame`` made ``df`` from, in the frame's row order; None for any
    other DataFrame, one derived from a local frame included."""
    try:
        return _TABLES.get(df)
    except TypeError:  # a DataFrame type that cannot be weakly referenced
        return None



def rows_of(df: DataFrame) -> list[Any]:
    """The rows of a small DataFrame, each readable by column name (``row["name"]``): from the
    Arrow table ``local_frame`` made it from, without Spark, or else by ``collect()``."""
    table = arrow_of(df)
    return table.to_pylist() if table is not None else df.collect()
