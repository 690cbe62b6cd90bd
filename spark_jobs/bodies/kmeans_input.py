"""k-means' input: which columns hold the features, the points with their features as one
array, and the refusals of input k-means cannot cluster (each naming the column and a row)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

from include.errors import InputDataError


def feature_columns(raw: DataFrame, params: Any) -> tuple[list[str], str | None]:
    """(scalar feature columns, or [] and the one array/vector column)."""
    from pyspark.sql.types import NumericType

    types = {f.name: f.dataType for f in raw.schema.fields}
    if params.features is not None:
        missing = [f for f in params.features if f not in types]
        if missing:
            raise InputDataError(f"k-means feature column(s) {missing} not in the input; columns: {raw.columns}")
        if len(params.features) == 1 and vector_kind(types[params.features[0]]) is not None:
            return [], params.features[0]
        bad = {f: types[f].simpleString() for f in params.features if not isinstance(types[f], NumericType)}
        if bad:
            raise InputDataError("k-means needs numeric features; non-numeric: "
                                 + ", ".join(f"{f} ({t})" for f, t in bad.items()))
        return list(params.features), None
    scalars = [n for n, t in types.items() if n != "id" and isinstance(t, NumericType)]
    if scalars:
        return scalars, None
    vectors = [n for n, t in types.items() if vector_kind(t) is not None]
    if len(vectors) == 1:
        return [], vectors[0]
    raise InputDataError("k-means input has no numeric feature column" + (
        f" and several array or vector columns {vectors}: name one with the features parameter" if vectors else "")
        + "; columns and types: " + ", ".join(f"{n} {t.simpleString()}" for n, t in types.items()))

def load_points(raw: DataFrame, params: Any) -> dict[str, Any]:
    """k-means' static data (``KMeans.load``): the points, cached, with their features as one
    array column ``__x`` (an input column of doubles as it is, cached once: ``cached_input``
    then holds what is cached); the feature columns, the vector column (or None), the number of
    features and of points. Refuses (``InputDataError``, naming the column and a sample row)
    nulls, NaN, infinities, arrays of other lengths or of non-numbers, empty input, fewer points
    than k: one Spark job inspects every partition."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType

    from spark_jobs.bodies.kmeans_kernels import inspect_partition

    scalars, vector = feature_columns(raw, params)
    as_is = vector is not None and isinstance(raw.schema[vector].dataType, ArrayType) \
        and isinstance(raw.schema[vector].dataType.elementType, DoubleType)
    if vector is not None:
        kind = vector_kind(raw.schema[vector].dataType)
        if kind.startswith("array-of-"):
            row = raw.where(F.col(vector).isNotNull() & (F.size(vector) > 0)).select(sample_of(raw)).first()
            raise InputDataError(f"k-means feature column {vector} holds arrays of {kind[len('array-of-'):]}, "
                                 f"not numbers (e.g. {sample_text(row[0].asDict() if row else None)})")
        if kind == "vector":
            from pyspark.ml.functions import vector_to_array

            x = vector_to_array(F.col(vector), "float64")
        else:
            x = F.col(vector).cast("array<double>")
    else:
        x = F.array(*[F.col(f).cast("double") for f in scalars])
    if as_is:  # an array of doubles is __x as it is: cached once, under that name (a pass over
        # __x then scans the cache with no projection), and named back for the outputs
        cached = raw.select(*[F.col(c).alias("__x") if c == vector else F.col(c) for c in raw.columns]).cache()
        points = cached.select(*[F.col("__x").alias(c) if c == vector else F.col(c) for c in raw.columns], "__x")
    else:
        cached = points = raw.select(*raw.columns, x.alias("__x")).cache()
    checked = points.select(sample_of(raw).alias("__row"), "__x").mapInArrow(
        inspect_partition, "n long, dim int, bad string").collect()
    try:
        n = sum(r["n"] for r in checked)
        if n == 0:
            raise InputDataError("k-means input is empty: no points")
        dims = sorted({r["dim"] for r in checked if r["dim"] is not None})
        bad: dict[str, Any] = {}
        for r in checked:
            for key, found in json.loads(r["bad"]).items():
                bad.setdefault(key, found)
        refuse(bad, dims, scalars, vector)
        dim = dims[0] if dims else 0
        if dim == 0:
            raise InputDataError(f"k-means feature column {vector} holds empty arrays: no features")
        if n < params.k:
            raise InputDataError(f"k-means with k={params.k} needs at least {params.k} points, the input has {n}")
    except InputDataError:
        cached.unpersist()  # refused: nothing keeps the cached points
        raise
    features = scalars or [vector]
    data = {"points": points, "features": features, "vector": vector, "dim": dim, "num_points": n}
    if cached is not points:  # released with the static data (the points are a projection of it)
        data["cached_input"] = cached
    return data

def sample_of(raw: DataFrame):
    """A row named in an error message: its id, or without an id column the whole row."""
    from pyspark.sql import functions as F

    return F.struct(F.col("id")) if "id" in raw.columns else F.struct(*[F.col(n) for n in raw.columns])

def refuse(bad: Mapping[str, Any], dims: list[int], scalars: list[str], vector: str | None) -> None:
    def where(found) -> str:
        j = found.get("feature")
        return scalars[j] if scalars and j is not None else vector if vector else ", ".join(scalars)

    if len(dims) > 1 or "ragged" in bad:
        found = bad.get("ragged")
        example = (f" (e.g. {sample_text(found['row'])}: {found['length']} features where others have "
                   f"{found['expected']})" if found else "")
        lengths = sorted(set(dims) | ({found["length"], found["expected"]} if found else set()))
        raise InputDataError(f"k-means feature column {vector} holds arrays of different lengths {lengths}"
                             f"{example}: every point needs the same number of features")

    def at(found) -> str:  # the column, and for an array column the index
        j = found.get("feature")
        return where(found) + (f"[{j}]" if not scalars and j is not None else "")

    nulls = {k: v for k, v in bad.items() if k == "null" or k.startswith("nan:")}
    if nulls:
        cols = sorted({where(v) for v in nulls.values()}, key=lambda c: (scalars + [c]).index(c))
        examples = "; ".join(f"{sample_text(v['row'])}: {at(v)} is {'null' if k == 'null' else 'NaN'}"
                             for k, v in nulls.items())
        raise InputDataError(f"k-means feature column(s) {cols} have null or NaN values (e.g. {examples})")
    infinite = {int(k.split(":")[1]): v for k, v in bad.items() if k.startswith("inf:")}
    if infinite:
        cols = [where(infinite[j]) for j in sorted(infinite)]
        examples = "; ".join(f"{sample_text(infinite[j]['row'])}: {at(infinite[j])}="
                             f"{value_text(infinite[j]['value'])}" for j in sorted(infinite))
        raise InputDataError(f"k-means feature column(s) {sorted(set(cols), key=cols.index)} have infinite "
                             f"values (e.g. {examples})")


def vector_kind(data_type) -> str | None:
    """"array" for an array of numbers, "vector" for an ML vector, "array-of-<t>" for an array
    of something else, None for anything else."""
    from pyspark.sql.types import ArrayType, NumericType

    if isinstance(data_type, ArrayType):
        inner = data_type.elementType
        return "array" if isinstance(inner, NumericType) else f"array-of-{inner.simpleString()}"
    if type(data_type).__name__ == "VectorUDT":
        return "vector"
    return None


def sample_text(row: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={value_text(v)}" for k, v in (row or {}).items())


def value_text(v: Any) -> str:
    if isinstance(v, float):
        return "inf" if v == math.inf else "-inf" if v == -math.inf else "nan" if math.isnan(v) else repr(v)
    return str(v)
