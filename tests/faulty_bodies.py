"""Bodies made to produce bad data at one epoch, for the data-check tests: the fault is on
while the file ``while_exists`` exists, so deleting it "fixes the input" without changing
the job's parameters (the plan, and so the checkpoint history, stay comparable)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping

from pyspark.sql import functions as F

from include.contract.body import EpochContext, StepResult
from include.errors import ConfigError
from spark_jobs.bodies.kmeans import KMeans, KMeansParams
from spark_jobs.bodies.pagerank import PageRank, PageRankParams

PAGERANK_FAULTS = ("nan", "lost_mass", "negative", "schema")


def _fault_params(raw: Mapping[str, Any], faults) -> tuple[dict, dict]:
    raw = dict(raw)
    fault = {k: raw.pop(k) for k in ("fault", "at_epoch", "while_exists") if k in raw}
    if fault.get("fault") not in faults:
        raise ConfigError(f"fault must be one of {faults}, got {fault.get('fault')!r}")
    return raw, fault


@dataclass(frozen=True)
class _Fault:
    """The fault fields both faulty bodies' params add (after the body's own)."""

    fault: str = ""
    at_epoch: int = 1
    while_exists: str = ""

    def active(self, epoch: int) -> bool:
        return epoch == self.at_epoch and os.path.exists(self.while_exists)


@dataclass(frozen=True)
class FaultyPageRankParams(_Fault, PageRankParams):
    pass


class FaultyPageRank(PageRank):
    name = "faulty_pagerank"

    def parse_params(self, raw: Mapping[str, Any]) -> FaultyPageRankParams:
        rest, fault = _fault_params(raw, PAGERANK_FAULTS)
        return FaultyPageRankParams(damping=super().parse_params(rest).damping, **fault)

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        result = super().step(variables, data, ctx)
        p = ctx.params
        if not p.active(ctx.epoch):
            return result
        ranks = result.variables["ranks"]
        victim = F.pmod(F.xxhash64("node"), F.lit(5)) == 0  # about a fifth of the nodes
        if p.fault == "nan":
            ranks = ranks.withColumn("rank", F.when(victim, F.lit(float("nan"))).otherwise(F.col("rank")))
        elif p.fault == "lost_mass":
            ranks = ranks.withColumn("rank", F.col("rank") * F.lit(0.9))
        elif p.fault == "negative":
            ranks = ranks.withColumn("rank", F.when(victim, -F.col("rank")).otherwise(F.col("rank")))
        elif p.fault == "schema":
            ranks = ranks.withColumn("rank", F.col("rank").cast("float"))
        return StepResult({"ranks": ranks}, result.metrics, result.outputs, result.facts)


@dataclass(frozen=True)
class FaultyKMeansParams(_Fault, KMeansParams):
    pass


class FaultyKMeans(KMeans):
    """``empty_cluster``: at the faulty epoch, centroid 0 is moved far from every point before
    the step, so no point is assigned to it."""

    name = "faulty_kmeans"

    def parse_params(self, raw: Mapping[str, Any]) -> FaultyKMeansParams:
        rest, fault = _fault_params(raw, ("empty_cluster",))
        base = super().parse_params(rest)
        return FaultyKMeansParams(k=base.k, seed=base.seed, features=base.features, **fault)

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        p = ctx.params
        if p.active(ctx.epoch):
            centroids = variables["centroids"]
            far = F.transform(F.col("center"), lambda _: F.lit(1e9))
            moved = F.when(F.col("cluster_id") == 0, far).otherwise(F.col("center")).alias("center")
            variables = {"centroids": centroids.select("cluster_id", moved)}
        return super().step(variables, data, ctx)


class NoisyPageRank(PageRank):
    """PageRank whose ranks get an unseeded random nudge every epoch: a recomputation of an
    epoch differs from the committed one (the determinism audit must flag it)."""

    name = "noisy_pagerank"

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        result = super().step(variables, data, ctx)
        ranks = result.variables["ranks"].withColumn("rank", F.col("rank") + F.rand() * 1e-9)
        return dataclasses.replace(result, variables={**result.variables, "ranks": ranks})
