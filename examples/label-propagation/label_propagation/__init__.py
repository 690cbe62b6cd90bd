"""Connected components by label propagation, as an iteration body in a package of its own.

Every node starts with its own id as its label; each epoch, every node takes the smallest label
among itself and its neighbours. After as many epochs as the graph's diameter, each node's label
is the smallest node id of its component (what GraphFrames' label propagation and Pregel-style
connected components compute). The project's own ``components`` body gets there in O(log n)
epochs; this one is the baseline, and the example of docs/writing-a-body.md.

Input: edges ``src``, ``dst`` (integer ids). Output: ``labels(node, label)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from include import EpochContext, InputDataError, IterationBody, StepResult, param


@dataclass(frozen=True)
class LabelPropagationParams:
    directed: bool = param(False, "Follow edges from src to dst only (false: both ways).", type="boolean")


class LabelPropagation(IterationBody):
    name = "label_propagation"
    title = "Label propagation"
    params_type = LabelPropagationParams
    heads = {"labels": ("node",)}
    metric_aggregations = {"changed": "sum"}
    convergence_metric = "changed"  # converged when no label changed (any tolerance in (0, 1])
    outputs = ("labels",)
    facts = ("input_nodes",)
    expectations = (
        {"name": "one_label_per_node", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "labels.duplicate_keys", "max_value": 0},
         "description": "one label per node"},
        {"name": "labels_cover_input", "type": "expect_column_pair_values_to_be_equal",
         "kwargs": {"column_A": "labels.rows", "column_B": "input_nodes"},
         "description": "every node of the input has a label"},
    )

    def load(self, raw, params: LabelPropagationParams) -> dict[str, Any]:
        from pyspark.sql import functions as F

        if not {"src", "dst"} <= set(raw.columns):
            raise InputDataError(f"label propagation needs columns src and dst, found {raw.columns}")
        edges = raw.select(F.col("src").cast("long").alias("src"), F.col("dst").cast("long").alias("dst"))
        bad = edges.where(F.col("src").isNull() | F.col("dst").isNull()).limit(1).first()
        if bad is not None:
            raise InputDataError(f"label propagation needs integer ids in src and dst; an edge has {bad.asDict()}")
        if not params.directed:
            edges = edges.union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
        edges = edges.where("src != dst").distinct().cache()
        nodes = raw.select(F.col("src").cast("long").alias("node")).union(
            raw.select(F.col("dst").cast("long").alias("node"))).distinct().cache()
        n = nodes.count()
        if n == 0:
            raise InputDataError("label propagation input is empty: no edges")
        return {"edges": edges, "nodes": nodes, "num_nodes": n}

    def init(self, data: Mapping[str, Any], ctx: EpochContext) -> dict[str, Any]:
        from pyspark.sql import functions as F

        return {"labels": data["nodes"].select("node", F.col("node").alias("label"))}

    def step(self, variables, data: Mapping[str, Any], ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        labels = variables["labels"].select("node", "label")
        offered = data["edges"].join(labels.withColumnRenamed("node", "src"), "src") \
            .groupBy(F.col("dst").alias("node")).agg(F.min("label").alias("offered"))
        new = labels.join(offered, "node", "left").select(
            "node", F.least("label", F.coalesce("offered", "label")).alias("label"), F.col("label").alias("before"))
        new = new.select("node", "label", (F.col("label") != F.col("before")).cast("long").alias("changed"))
        return StepResult(variables={"labels": new}, metrics={"changed": ("labels", "changed")},
                          facts={"input_nodes": data["num_nodes"]})

    def finish(self, variables, data: Mapping[str, Any], ctx: EpochContext) -> dict[str, Any]:
        return {"labels": variables["labels"].select("node", "label")}
