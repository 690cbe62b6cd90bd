"""Mini-batch gradient descent for linear regression over input that keeps arriving.

The input is a prefix (a local directory or ``s3://bucket/prefix``) that files are dropped into
while the job runs; a ``FileSplitEnumerator`` coordinator (``include.epoch.splits``) assigns each new
file to one coming epoch, exactly once across failures. Each epoch takes one gradient step on
the rows of the files assigned to it (a mini-batch)::

    w <- w - learning_rate * mean((w . x + b - y) * x),   b <- b - learning_rate * mean(w . x + b - y)

Variables: ``model(name, weight)`` (one row per feature, plus ``__intercept__``) and
``splits(split, epoch, rows)``, the log of every file processed, by the epoch that processed it
(so exactly-once is visible in the state). An epoch with no new file leaves the model as it is.
The job ends when the input ends (the ``_DONE`` marker, every file processed) or at max_epochs.
Outputs: ``model`` and ``splits``.

Parameters: ``target`` (column, default ``y``), ``features`` (default: every numeric column
except the target and ``id``, taken from the first file), ``learning_rate`` (0.1),
``max_splits_per_epoch`` (0: every pending file).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pyspark is imported where a function runs: the body's metadata is importable without it
    from pyspark.sql import DataFrame

from include.contract import EpochContext, IterationBody, StepResult, param
from include.errors import InputDataError

INTERCEPT = "__intercept__"
SPLIT_COLUMN = "__split"


def _model_schema():
    """The model's schema: a weight per feature name (and the intercept)."""
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType

    return StructType([StructField("name", StringType()), StructField("weight", DoubleType())])


@dataclass(frozen=True)
class SGDParams:
    """The parameters, each declared once: its default, description and schema."""

    target: str = param("y", "The column to predict.", type="string", minLength=1)
    features: tuple[str, ...] | None = param(None, "Feature columns; null: every numeric column but the target.",
                                             type=["null", "array"], minItems=1)
    learning_rate: float = param(0.1, "Step size.", type="number", exclusiveMinimum=0)
    max_splits_per_epoch: int = param(0, "Files one epoch takes at most (0: all new ones).",
                                      type="integer", minimum=0)


class IncrementalSGD(IterationBody):
    name = "sgd"
    params_type = SGDParams
    heads = {"model": ("name",), "splits": ("split",)}
    metric_aggregations = {"points": "sum", "new_points": "sum"}
    convergence_metric = None
    outputs = ("model", "splits")
    facts = ()  # step() reports no StepResult.facts
    # checked before each checkpoint commits (include.checks)
    expectations = (
        {"name": "splits_once", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "splits.duplicate_keys", "max_value": 0},
         "description": "each input split is recorded once: no file is learned from twice"},
        {"name": "model_names_unique", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "model.duplicate_keys", "max_value": 0},
         "description": "one weight per feature"},
        {"name": "model_finite", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "model.weight.nonfinite", "max_value": 0},
         "description": "every weight is a finite number"},
    )
    static_input = False

    def coordinators(self, params: SGDParams, input, store_options) -> dict[str, Any]:
        from include.epoch import FileSplitEnumerator

        suffixes = {"parquet": (".parquet", ".pq"), "csv": (".csv",), "json": (".json", ".jsonl")}[input.format]
        return {"splits": FileSplitEnumerator(input.path, store_options=store_options, suffixes=suffixes,
                                              max_splits_per_epoch=params.max_splits_per_epoch)}

    def load(self, raw, params: SGDParams) -> dict[str, Any]:
        return {}

    def init(self, data, ctx: EpochContext) -> dict[str, DataFrame]:
        return {"model": ctx.spark.createDataFrame([], "name string, weight double"),
                "splits": ctx.spark.createDataFrame([], "split string, epoch int, rows long")}

    def _read(self, ctx: EpochContext, assigned: dict[int, list[dict]]):
        """The rows of the files assigned to this epoch, partition p reading partition p's files,
        with the file each row came from in ``__split``."""
        from pyspark.sql.pandas.types import from_arrow_schema
        from pyspark.sql.types import StringType, StructField, StructType

        from include.store import open_store
        from spark_jobs.storeio import decode_column, read_files

        spec = ctx.input
        store = open_store(spec.path, **ctx.store_options)
        first = next(e["split"] for events in assigned.values() for e in events)
        fmt = spec.format
        arrow = decode_column(store.get(first), fmt, True)
        schema = StructType(from_arrow_schema(arrow.schema).fields + [StructField(SPLIT_COLUMN, StringType())])
        groups = [[{"key": e["split"]} for e in assigned.get(p, [])] for p in range(ctx.num_partitions)]
        return read_files(ctx.spark, store, groups, schema, fmt, {"source_column": SPLIT_COLUMN})

    def step(self, variables: Mapping[str, DataFrame], data, ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        from spark_jobs.frames import local_frame, rows_of

        params: SGDParams = ctx.params
        assigned = ctx.events_for("splits")
        model = {r["name"]: float(r["weight"]) for r in rows_of(variables["model"])}
        split_rows: list[tuple[str, int, int]] = []
        if assigned:
            points = self._read(ctx, assigned)
            features = self._features(points, params)
            missing = [c for c in (*features, params.target) if c not in points.columns]
            if missing:
                raise InputDataError(f"sgd: column(s) {missing} not in the input files; columns: {points.columns}")
            w = {f: model.get(f, 0.0) for f in features}
            b = model.get(INTERCEPT, 0.0)
            predicted = sum((F.col(f).cast("double") * F.lit(w[f]) for f in features), F.lit(b))
            residual = predicted - F.col(params.target).cast("double")
            # one pass: the gradient sums and the rows per file
            sums = (points.select(F.col(SPLIT_COLUMN), residual.alias("r"),
                                  *[(residual * F.col(f).cast("double")).alias(f"g_{i}") for i, f in enumerate(features)])
                    .groupBy(SPLIT_COLUMN)
                    .agg(F.count("*").alias("n"), F.sum("r").alias("r"),
                         *[F.sum(f"g_{i}").alias(f"g_{i}") for i in range(len(features))])
                    .collect())
            n = sum(r["n"] for r in sums)
            bad = [r[SPLIT_COLUMN] for r in sums if r["n"] and not all(
                math.isfinite(r[c]) for c in ["r"] + [f"g_{i}" for i in range(len(features))])]
            if bad:
                raise InputDataError(f"sgd: files {bad} have null or non-finite values in {features + [params.target]}")
            if n:
                lr = params.learning_rate
                for i, f in enumerate(features):
                    w[f] -= lr * sum(r[f"g_{i}"] for r in sums) / n
                b -= lr * sum(r["r"] for r in sums) / n
            model = {**w, INTERCEPT: b}
            split_rows = [(r[SPLIT_COLUMN], ctx.epoch, int(r["n"])) for r in sums]
            empty = {e["split"] for events in assigned.values() for e in events} - {s for s, _e, _n in split_rows}
            split_rows += [(s, ctx.epoch, 0) for s in sorted(empty)]  # a file without rows is processed too
        model_df = local_frame(ctx.spark, sorted(model.items()), _model_schema())  # a few rows: written by the driver
        new_splits = ctx.spark.createDataFrame(split_rows, "split string, epoch int, rows long")
        splits = variables["splits"].unionByName(new_splits)
        # metrics: points seen in total and in this epoch (rows of the splits log; new ones flagged)
        splits = splits.withColumn("points", F.col("rows").cast("double")) \
                       .withColumn("new_points", F.when(F.col("epoch") == ctx.epoch, F.col("rows")).otherwise(0).cast("double"))
        if not model:  # before the first file: keep an (empty) model; epochs wait for input
            model_df = local_frame(ctx.spark, [(INTERCEPT, 0.0)], _model_schema())
        return StepResult({"model": model_df, "splits": splits},
                          metrics={"points": ("splits", "points"), "new_points": ("splits", "new_points")})

    @staticmethod
    def _features(points: DataFrame, params: SGDParams) -> list[str]:
        if params.features is not None:
            return list(params.features)
        from pyspark.sql.types import NumericType

        found = [f.name for f in points.schema.fields
                 if isinstance(f.dataType, NumericType) and f.name not in (params.target, "id", SPLIT_COLUMN)]
        if not found:
            raise InputDataError(f"sgd: no numeric feature column in the input; columns: {points.columns}")
        return found

    def finish(self, variables, data, ctx) -> dict[str, DataFrame]:
        return {"model": variables["model"].orderBy("name"), "splits": variables["splits"].orderBy("epoch", "split")}
