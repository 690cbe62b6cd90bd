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
    """``local_frame`` of an Arrow table: a local relation, the table kept with it. On a
    classic session the relation is made in the JVM only when Spark is first asked about the
    frame (``_deferred_frame``): a body's small result that only the tail (from the table) and
    the next epoch's ``rows_of`` read never costs the JVM a relation."""
    df = _deferred_frame(spark, table)
    if df is None:
        df = spark.createDataFrame(table)
    _TABLES[df] = table
    return df


_DEFERRED: list[type] = []  # the classic DataFrame subclass, made on first use (pyspark imported then)


def _deferred_frame(spark: SparkSession, table: Any) -> DataFrame | None:
    """A classic DataFrame of ``table`` whose JVM relation is ``spark.createDataFrame(table)``,
    made when something first needs it (its ``_jdf``: a transformation, an action, ``isLocal``);
    its schema is known at once, computed as ``createDataFrame`` computes it. None on a Spark
    Connect session (its frames are plans the client builds) or for a table with timestamps
    (whose type depends on the session's time settings)."""
    from spark_jobs.session import is_classic

    if not is_classic(spark) or any("timestamp" in str(f.type) for f in table.schema):
        return None
    if not _DEFERRED:
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

        class DeferredArrowFrame(ClassicDataFrame):
            def __init__(self, spark: Any, table: Any, schema: Any):  # what DataFrame.__init__ sets, but _jdf
                self._session, self._sc, self.is_cached, self._support_repr_html = spark, spark._sc, False, False
                self.__dict__["schema"] = schema  # DataFrame.schema is a cached_property
                self._arrow = table

            def __getattr__(self, name: str) -> Any:
                if name == "_jdf":
                    self._jdf = self._session.createDataFrame(self._arrow)._jdf
                    return self._jdf
                return super().__getattr__(name)

        DeferredArrowFrame.__qualname__ = "DeferredArrowFrame"
        _DEFERRED.append(DeferredArrowFrame)
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    schema = StructType([StructField(f.name, from_arrow_type(f.type), nullable=f.nullable) for f in table.schema])
    return _DEFERRED[0](spark, table, schema)


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
