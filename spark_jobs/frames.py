"""Spark helpers for bodies: small DataFrames the driver holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: StructType) -> DataFrame:
    """A small DataFrame of rows the driver holds (k-means' centroids, a model's weights), made
    from Arrow so that Spark sees a local relation (``DataFrame.isLocal()``): reading it runs no
    Spark job, and the tail writes it from the driver instead of a Spark job per dataset.
    ``spark.createDataFrame(list_of_rows, ...)`` gives the same rows as a distributed dataset."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema)
    columns = list(zip(*rows)) if rows else [() for _ in schema.fields]
    table = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, arrow)], schema=arrow)
    return spark.createDataFrame(table)

