"""A body whose step is a Python UDF from a module of its own package (tests/dags/
test_body_package.py): each key's value is halved every epoch until it is 0, and ``steps``
counts the epochs that changed it, so the output is each key's bit length. The UDF is pickled
by reference to ``halving_body.rules``: the Spark Connect server's Python workers must import
this package, which is on no path of the server's."""

from __future__ import annotations

from include.contract.body import EpochContext, IterationBody, StepResult


class Halving(IterationBody):
    name = "halving"
    heads = {"values": ("key",)}
    metric_aggregations = {"changed": "sum"}
    convergence_metric = "changed"
    outputs = ("values",)
    static_input = False

    def load(self, raw, params):
        return {}

    def init(self, data, ctx: EpochContext):
        return {"values": ctx.spark.createDataFrame([(k, k, 0) for k in range(1, 41)], "key long, x long, steps long")}

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        from halving_body.rules import halve

        values = variables["values"]
        moved = (F.col("x") != 0).cast("long")
        new = values.select("key", F.udf(halve, "long")("x").alias("x"), (F.col("steps") + moved).alias("steps"),
                            moved.alias("changed"))
        return StepResult({"values": new}, metrics={"changed": ("values", "changed")})

    def finish(self, variables, data, ctx):
        return {"values": variables["values"].select("key", "steps")}
