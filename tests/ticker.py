"""A job that never converges and has no end of input: only ``max_epochs`` or a stop ends it
(HeadOperatorTest's unbounded iteration, seed 000). Each epoch adds one to every key's count;
the metric ``changed`` (keys changed) never reaches 0. Used by tests/integration/
test_unbounded.py and tests/dags/test_unbounded_dag.py."""

from __future__ import annotations

from include.body import EpochContext, IterationBody, StepResult


class Ticker(IterationBody):
    name = "ticker"
    heads = {"counts": ("key",)}
    metric_aggregations = {"changed": "sum"}
    convergence_metric = "changed"
    outputs = ("counts",)
    static_input = False

    def load(self, raw, params):
        return {}

    def init(self, data, ctx: EpochContext):
        return {"counts": ctx.spark.createDataFrame([(k, 0) for k in range(8)], "key int, n long")}

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        counts = variables["counts"].select("key", (F.col("n") + 1).alias("n"), F.lit(1.0).alias("changed"))
        return StepResult({"counts": counts}, metrics={"changed": ("counts", "changed")})

    def finish(self, variables, data, ctx):
        return {"counts": variables["counts"].select("key", "n")}
