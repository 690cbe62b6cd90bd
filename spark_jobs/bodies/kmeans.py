"""k-means (Lloyd's algorithm) as an iteration body (pure DataFrame functions).

Input: points with numeric feature columns (all numeric columns except ``id`` by default, or
the ``features`` parameter). Variables: ``centroids(cluster_id, <features...>)`` (k rows).

Initialisation is k-means++ made deterministic by a seed: each round picks the point with the
largest ``log(u) / D(x)^2`` (Efraimidis-Spirakis weighted sampling, weights D(x)^2), where
``u`` in (0, 1) is a hash of (seed, round, the point's features): the same data and seed give
the same centroids whatever the partitioning. A cluster that loses all its points keeps its
centroid; the data check ``no_empty_cluster`` refuses such an epoch unless the job lowers its
severity to ``warning``. Input with null, NaN or infinite features, or with fewer distinct
points than k, is refused (``InputDataError``) before any step. Converged when no centroid
moves more than the job's tolerance (Euclidean).
Outputs: ``centroids`` and ``assignments`` (the input rows plus ``cluster_id``); every epoch
also emits ``centroid_history`` rows (epoch, cluster_id, features, shift), published as each
epoch's checkpoint commits, so a running job's trajectory can be watched and plotted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pyspark is imported where a function runs: the body's metadata is importable without it
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

from include.body import EpochContext, IterationBody, Parameter, StepResult
from include.errors import InputDataError

_MASK53 = (1 << 53) - 1


@dataclass(frozen=True)
class KMeansParams:
    """The parameters, as ``KMeans.parameters`` declares and checks them."""

    k: int
    seed: int
    features: tuple[str, ...] | None


def _doubles(names: Sequence[str]) -> list[tuple[str, str]]:
    return [(n, "double") for n in names]


def _schema(*fields: tuple[str, str]) -> StructType:
    from pyspark.sql.types import (
        DoubleType,
        IntegerType,
        LongType,
        StructField,
        StructType,
    )

    types = {"int": IntegerType(), "long": LongType(), "double": DoubleType()}
    return StructType([StructField(name, types[kind]) for name, kind in fields])


def _distance2(features: Sequence[str], centroid: Sequence[float]) -> Column:
    from pyspark.sql import functions as F

    return reduce(lambda a, b: a + b, [(F.col(f) - F.lit(float(c))) ** 2 for f, c in zip(features, centroid)])


def _uniform(seed: int, round_: int, features: Sequence[str]) -> Column:
    from pyspark.sql import functions as F

    h = F.xxhash64(F.lit(seed), F.lit(round_), *[F.col(f) for f in features])
    return (h.bitwiseAND(F.lit(_MASK53)).cast("double") + F.lit(0.5)) / F.lit(float(1 << 53))


class KMeans(IterationBody):
    name = "kmeans"
    title = "k-means"
    parameters = (
        Parameter("k", 3, "Number of clusters.", {"type": "integer", "minimum": 1, "maximum": 10_000}),
        Parameter("seed", 42, "Seed of the deterministic k-means++ initialisation.", {"type": "integer"}),
        Parameter("features", None, "Feature columns; null: every numeric column but id.",
                  {"type": ["null", "array"], "minItems": 1}),
    )
    params_type = KMeansParams
    heads = {"centroids": ("cluster_id",)}
    metric_aggregations = {"max_shift": "max", "min_cluster_size": "min", "assigned_points": "sum"}
    convergence_metric = "max_shift"
    outputs = ("centroids", "assignments")
    epoch_outputs = ("centroid_history",)
    facts = ("input_points", "k")  # StepResult.facts of every epoch
    # checked before each checkpoint commits (include.checks)
    expectations = (
        {"name": "cluster_ids_unique", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "centroids.duplicate_keys", "max_value": 0},
         "description": "one centroid per cluster"},
        {"name": "centroids_finite", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "centroids.*.nonfinite", "max_value": 0},
         "description": "every centroid coordinate is a finite number"},
        {"name": "centroids_count", "type": "expect_column_pair_values_to_be_equal",
         "kwargs": {"column_A": "centroids.rows", "column_B": "k"},
         "description": "k centroids"},
        {"name": "no_empty_cluster", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "min_cluster_size", "min_value": 1},
         "description": "every cluster has a point (set severity warning to let an empty cluster keep its centroid)"},
        {"name": "points_all_assigned", "type": "expect_column_pair_values_to_be_equal",
         "kwargs": {"column_A": "assigned_points", "column_B": "input_points"},
         "description": "each input point is in exactly one cluster"},
    )

    def load(self, raw: DataFrame, params: KMeansParams) -> dict[str, Any]:
        from pyspark.sql import functions as F
        from pyspark.sql.types import NumericType

        types = {f.name: f.dataType for f in raw.schema.fields}
        if params.features is not None:
            missing = [f for f in params.features if f not in types]
            if missing:
                raise InputDataError(f"k-means feature column(s) {missing} not in the input; columns: {raw.columns}")
            features = list(params.features)
        else:
            features = [n for n, t in types.items() if n != "id" and isinstance(t, NumericType)]
            if not features:
                raise InputDataError("k-means input has no numeric feature column; columns and types: "
                                     + ", ".join(f"{n} {t.simpleString()}" for n, t in types.items()))
        bad = {f: types[f].simpleString() for f in features if not isinstance(types[f], NumericType)}
        if bad:
            raise InputDataError(
                "k-means needs numeric features; non-numeric: "
                + ", ".join(f"{f} ({t})" for f, t in bad.items())
            )
        points = raw.select(*raw.columns, *[F.col(f).cast("double").alias(f"__f{i}") for i, f in enumerate(features)])
        fcols = [f"__f{i}" for i in range(len(features))]
        points = points.cache()
        # a sample row for the error message: its id, or without an id column the whole row
        sample = F.struct(F.col("id")) if "id" in raw.columns else F.struct(*[F.col(n) for n in raw.columns])
        # one pass: the rows, and per feature its null/NaN rows and a row with ±inf if any
        stats = points.agg(
            F.count("*").alias("n"),
            *[F.sum(F.when(F.col(c).isNull() | F.isnan(c), 1).otherwise(0)).alias(c) for c in fcols],
            *[F.first(F.when(F.abs(F.col(c)) == F.lit(math.inf), F.struct(sample.alias("row"), F.col(c).alias("value"))),
                      ignorenulls=True).alias(f"{c}_inf") for c in fcols],
        ).first()
        try:
            if stats["n"] == 0:
                raise InputDataError("k-means input is empty: no points")
            nulls = [f for f, c in zip(features, fcols) if stats[c]]
            if nulls:
                raise InputDataError(f"k-means feature column(s) {nulls} have null or NaN values")
            infinite = {f: stats[f"{c}_inf"] for f, c in zip(features, fcols) if stats[f"{c}_inf"] is not None}
            if infinite:
                examples = "; ".join(
                    ", ".join(f"{k}={v}" for k, v in s["row"].asDict().items()) + f": {f}={s['value']}"
                    for f, s in infinite.items())
                raise InputDataError(f"k-means feature column(s) {list(infinite)} have infinite values (e.g. {examples})")
            if stats["n"] < params.k:
                raise InputDataError(f"k-means with k={params.k} needs at least {params.k} points, the input has {stats['n']}")
        except InputDataError:
            points.unpersist()  # refused: nothing keeps the cached points
            raise
        return {"points": points, "features": features, "fcols": fcols, "num_points": int(stats["n"])}

    def initial_centroids(self, data: Mapping[str, Any], params: KMeansParams) -> list[list[float]]:
        """Deterministic k-means++ (see the module docstring)."""
        from pyspark.sql import functions as F

        points, fcols = data["points"], data["fcols"]
        chosen: list[list[float]] = []
        for round_ in range(params.k):
            u = _uniform(params.seed, round_, fcols)
            if chosen:
                d2 = F.least(*[_distance2(fcols, c) for c in chosen]) if len(chosen) > 1 else _distance2(fcols, chosen[0])
                scored = points.select(*fcols, (F.log(u) / d2).alias("key"), d2.alias("d2")).where("d2 > 0")
            else:
                scored = points.select(*fcols, u.alias("key"))
            best = scored.orderBy(F.col("key").desc(), *[F.col(c) for c in fcols]).select(*fcols).first()
            if best is None:
                # every point is one of the chosen centroids: the input has exactly len(chosen)
                # distinct points (known here at no cost; counting them in load would shuffle)
                raise InputDataError(
                    f"k-means with k={params.k} needs at least {params.k} distinct points, the input has "
                    f"{len(chosen)} distinct point(s) (of {data['num_points']} points): "
                    "k must not exceed the number of distinct points")
            chosen.append([float(best[c]) for c in fcols])
        return chosen

    def init(self, data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        from spark_jobs.frames import local_frame

        centroids = self.initial_centroids(data, ctx.params)
        rows = [(i, *c) for i, c in enumerate(centroids)]
        return {"centroids": local_frame(ctx.spark, rows, _schema(("cluster_id", "int"), *_doubles(data["features"])))}

    def _assign(self, points: DataFrame, fcols: Sequence[str], centroids: list[list[float]]) -> Column:
        """Index of the nearest centroid, as one expression (no join, no shuffle)."""
        from pyspark.sql import functions as F

        distances = [_distance2(fcols, c) for c in centroids]
        best = F.least(*distances) if len(distances) > 1 else distances[0]
        expr = F.lit(len(centroids) - 1)
        for i in range(len(centroids) - 2, -1, -1):
            expr = F.when(distances[i] == best, F.lit(i)).otherwise(expr)
        return expr

    def step(self, variables: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        from spark_jobs.frames import local_frame

        features, fcols = data["features"], data["fcols"]
        rows = sorted(variables["centroids"].collect(), key=lambda r: r["cluster_id"])  # k rows
        centroids = [[float(r[f]) for f in features] for r in rows]
        # one pass over the points; everything after it is k rows on the driver
        means = {
            r["cluster_id"]: r
            for r in data["points"]
            .select(self._assign(data["points"], fcols, centroids).alias("cluster_id"), *fcols)
            .groupBy("cluster_id")
            .agg(*[F.avg(c).alias(c) for c in fcols], F.count("*").alias("__size"))
            .collect()
        }
        new_rows = []
        for i, (row, old) in enumerate(zip(rows, centroids)):
            mean = means.get(i)  # None: the cluster lost all its points and keeps its centroid
            moved = old if mean is None else [float(mean[c]) for c in fcols]
            shift = math.sqrt(sum((m - o) ** 2 for m, o in zip(moved, old)))
            new_rows.append((int(row["cluster_id"]), *moved, shift, 0 if mean is None else int(mean["__size"])))
        # k rows each: local frames (the tail writes them from the driver, no Spark job)
        new = local_frame(ctx.spark, new_rows, _schema(("cluster_id", "int"), *_doubles(features), ("shift", "double"),
                                                       ("__size", "long")))
        history = local_frame(ctx.spark, [(ctx.epoch, *r[:-1]) for r in new_rows],
                              _schema(("epoch", "int"), ("cluster_id", "int"), *_doubles(features), ("shift", "double")))
        return StepResult(variables={"centroids": new},
                          metrics={"max_shift": ("centroids", "shift"), "min_cluster_size": ("centroids", "__size"),
                                   "assigned_points": ("centroids", "__size")},
                          outputs={"centroid_history": history},
                          facts={"input_points": data["num_points"], "k": ctx.params.k})

    def finish(self, variables: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        centroids_df = variables["centroids"]
        rows = sorted(centroids_df.collect(), key=lambda r: r["cluster_id"])
        centroids = [[float(r[f]) for f in data["features"]] for r in rows]
        points = data["points"]
        original = [c for c in points.columns if c not in data["fcols"]]
        assignments = points.select(*original, self._assign(points, data["fcols"], centroids).alias("cluster_id"))
        return {"centroids": centroids_df.orderBy("cluster_id"), "assignments": assignments}
