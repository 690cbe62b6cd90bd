"""A job that never converges and has no end of input: only ``max_epochs`` or a stop ends it
(HeadOperatorTest's unbounded iteration, seed 000). Each epoch adds one to every key's count;
the metric ``changed`` (keys changed) never reaches 0. Used by tests/integration/
test_unbounded.py and tests/dags/test_unbounded_dag.py."""

from __future__ import annotations

from include.contract.body import EpochContext, IterationBody, StepResult


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


class TwoHeads(Ticker):
    """Two heads with their own partition counts (HeadOperatorTest's testNotChainingHeadOperator,
    seed 000: a variable with a parallelism of its own): ``counts`` (16 keys) in the job's
    partitions, ``total`` (one row, their sum) always in one. Ends at ``max_epochs``."""

    name = "two_heads"
    heads = {"counts": ("key",), "total": ("name",)}
    head_partitions = {"total": 1}
    outputs = ("counts", "total")

    def init(self, data, ctx: EpochContext):
        counts = ctx.spark.createDataFrame([(k, 0) for k in range(16)], "key int, n long")
        return {"counts": counts, "total": ctx.spark.createDataFrame([("all", 0)], "name string, n long")}

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        counts = variables["counts"].select("key", (F.col("n") + F.col("key")).alias("n"),
                                            F.lit(1.0).alias("changed"))
        total = counts.agg(F.sum("n").alias("n")).select(F.lit("all").alias("name"), "n")
        return StepResult({"counts": counts, "total": total}, metrics={"changed": ("counts", "changed")})

    def finish(self, variables, data, ctx):
        return {"counts": variables["counts"].select("key", "n"), "total": variables["total"]}


class HalfTicker(Ticker):
    """Only the keys of partition 0 tick (the tail's partition of a key: Spark's
    ``pmod(hash(key), P)``); every other partition's records never change after epoch 0. For
    the tests of checkpoints that share unchanged partitions (test_shared_files.py)."""

    name = "half_ticker"

    def init(self, data, ctx: EpochContext):
        return {"counts": ctx.spark.createDataFrame([(k, 0) for k in range(64)], "key int, n long")}

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        ticks = F.pmod(F.hash("key"), F.lit(ctx.num_partitions)) == 0
        counts = variables["counts"].select("key", F.when(ticks, F.col("n") + 1).otherwise(F.col("n")).alias("n"),
                                            F.lit(1.0).alias("changed"))
        return StepResult({"counts": counts}, metrics={"changed": ("counts", "changed")})
