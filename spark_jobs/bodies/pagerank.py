"""PageRank as an iteration body (pure DataFrame functions).

Input: edges with columns ``src`` and ``dst`` (any comparable type, CSV with a header or
Parquet). Edges form a set: a duplicated edge counts once, as in ``networkx.DiGraph``.
Variables: ``ranks(node, rank)``. Each epoch::

    rank'(v) = (1 - d) / N + d * ( sum over u -> v of rank(u) / outdeg(u)  +  dangling / N )

where ``dangling`` is the rank mass of nodes without out-edges, spread uniformly (networkx's
default). Converged when the L1 change of the ranks is under the job's tolerance.
Output: ``ranks(node, rank)``, ranks summing to 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pyspark is imported where a function runs: the body's metadata is importable without it
    from pyspark.sql import Column, DataFrame

from include.contract import EpochContext, IterationBody, StepResult, param
from include.errors import InputDataError

# Ranks and their shares are in [0, 1]: 34 decimal places keep 1e-34 absolute precision.
_EXACT = (38, 34)  # DecimalType(precision, scale)


def _exact_sum(values: Column) -> Column:
    """A sum whose result does not depend on the order Spark adds in: each double is rounded
    to a fixed decimal, the decimals add exactly, the total goes back to double. So an epoch
    recomputed after a failure gives the same bits as the first time."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    return F.sum(values.cast(DecimalType(*_EXACT))).cast("double")


@dataclass(frozen=True)
class PageRankParams:
    """The parameters, each declared once: its default, description and schema."""

    damping: float = param(0.85, "Probability of following a link.",
                           type="number", exclusiveMinimum=0, exclusiveMaximum=1)


class PageRank(IterationBody):
    name = "pagerank"
    title = "PageRank"
    params_type = PageRankParams
    heads = {"ranks": ("node",)}
    metric_aggregations = {"l1_delta": "sum"}
    convergence_metric = "l1_delta"
    outputs = ("ranks",)
    review = {"ranks": {"keys": ("node",), "ranked_by": "rank", "top": 10}}  # the top nodes, and how they moved
    facts = ("input_nodes",)  # StepResult.facts of every epoch
    # checked before each checkpoint commits (include.checks), on the feedback ranks and the output
    expectations = (
        {"name": "ranks_node_unique", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "ranks.duplicate_keys", "max_value": 0},
         "description": "one rank per node"},
        {"name": "ranks_node_not_null", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "ranks.node.nulls", "max_value": 0},
         "description": "no rank without its node"},
        {"name": "ranks_finite", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "ranks.rank.nonfinite", "max_value": 0},
         "description": "every rank is a finite number"},
        {"name": "ranks_nonnegative", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "ranks.rank.min", "min_value": 0},
         "description": "no rank is negative"},
        {"name": "rank_mass", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "ranks.rank.sum", "min_value": 1 - 1e-6, "max_value": 1 + 1e-6},
         "description": "the ranks sum to 1: no mass lost or created"},
        {"name": "ranks_cover_input", "type": "expect_column_pair_values_to_be_equal",
         "kwargs": {"column_A": "ranks.rows", "column_B": "input_nodes"},
         "description": "one rank per node of the input graph"},
        {"name": "l1_delta_not_increasing", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "l1_delta", "max_value": {"$PARAMETER": "previous__l1_delta + 1e-9"}},
         "description": "the power iteration contracts: the L1 change never grows (1e-9 slack)"},
    )

    def load(self, raw: DataFrame, params: PageRankParams) -> dict[str, Any]:
        from pyspark.sql import functions as F

        missing = [c for c in ("src", "dst") if c not in raw.columns]
        if missing:
            raise InputDataError(
                f"PageRank input needs columns src and dst; missing {missing}, found {raw.columns}"
            )
        edges = raw.select("src", "dst")
        src_type, dst_type = (edges.schema[c].dataType for c in ("src", "dst"))
        if src_type != dst_type:
            edges = edges.select(F.col("src").cast("string"), F.col("dst").cast("string"))
        edges = edges.distinct()
        out_degree = edges.groupBy(F.col("src").alias("node")).agg(F.count("*").alias("out_degree"))
        nodes = (
            edges.select(F.col("src").alias("node"))
            .union(edges.select(F.col("dst").alias("node")))
            .distinct()
            .join(out_degree, "node", "left")
            .select("node", F.coalesce("out_degree", F.lit(0)).cast("long").alias("out_degree"))
            .cache()
        )
        # counted on the cached nodes (an edge with a null end has a null node): a process that
        # loads the same input again (each task of a DAG run) finds them cached, no input scan
        counted = nodes.agg(F.count(F.lit(1)).alias("n"),
                            F.count(F.when(F.col("node").isNull(), 1)).alias("nulls")).first()
        if counted["nulls"]:
            nodes.unpersist()
            raise InputDataError("PageRank input has edges with a null src or dst")
        n = counted["n"]
        if n == 0:
            nodes.unpersist()
            raise InputDataError("PageRank input is empty: no edges")
        weighted = (
            edges.join(out_degree.withColumnRenamed("node", "src"), "src")
            .select("src", "dst", (F.lit(1.0) / F.col("out_degree")).alias("weight"))
            .cache()
        )
        return {"edges": weighted, "nodes": nodes, "num_nodes": n}

    def init(self, data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        from pyspark.sql import functions as F

        return {"ranks": data["nodes"].select("node", F.lit(1.0 / data["num_nodes"]).alias("rank"))}

    def warm_start(self, previous: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        """Start from the previous batch's ranks on today's graph: a node that is new gets
        1/N, a node that is gone drops out, and the ranks are scaled to sum to 1 again."""
        from pyspark.sql import functions as F

        n = data["num_nodes"]
        carried = (
            data["nodes"].select("node")
            .join(previous["ranks"].select("node", "rank"), "node", "left")
            .select("node", F.coalesce(F.col("rank"), F.lit(1.0 / n)).alias("rank"))
        )
        total = carried.agg(_exact_sum(F.col("rank")).alias("total")).first()["total"]
        return {"ranks": carried.select("node", (F.col("rank") / F.lit(total)).alias("rank"))}

    def step(self, variables: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        d = float(ctx.params.damping)
        n = data["num_nodes"]
        ranks = variables["ranks"]
        contributions = (
            data["edges"]
            .join(ranks.withColumnRenamed("node", "src"), "src")
            .groupBy(F.col("dst").alias("node"))
            .agg(_exact_sum(F.col("rank") * F.col("weight")).alias("contribution"))
        )
        dangling = (
            ranks.join(data["nodes"].where("out_degree = 0"), "node")
            .agg(F.coalesce(_exact_sum(F.col("rank")), F.lit(0.0)).alias("dangling"))
        )
        new_rank = F.lit((1.0 - d) / n) + F.lit(d) * (
            F.coalesce(F.col("contribution"), F.lit(0.0)) + F.col("dangling") / F.lit(float(n))
        )
        new = (
            ranks.join(contributions, "node", "left")
            .crossJoin(dangling)
            .select("node", new_rank.alias("rank"), F.col("rank").alias("previous"))
            .select("node", "rank", F.abs(F.col("rank") - F.col("previous")).alias("delta"))
        )
        return StepResult(variables={"ranks": new}, metrics={"l1_delta": ("ranks", "delta")},
                          facts={"input_nodes": n})

    def finish(self, variables: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        return {"ranks": variables["ranks"].select("node", "rank")}
