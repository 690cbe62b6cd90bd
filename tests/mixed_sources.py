"""A job with two sources (FLIP-147's partially finished job, seed 001): a bounded one, whose
input under ``<input>/bounded`` is complete from the start (its ``_DONE`` marker is there), and
an unbounded one under ``<input>/unbounded``, whose files keep coming until its marker appears.
Each is a ``FileSplitEnumerator`` assigning one file an epoch. The body records every file it
was given, with its source and epoch, in its variable ``seen`` (published as the output
``seen``): the bounded source finishes early, the job goes on with the other, and ends only
when both have finished. Used by tests/dags/test_mixed_sources_dag.py."""

from __future__ import annotations

import os

from include.contract.body import EpochContext, IterationBody, StepResult

SOURCES = ("bounded", "unbounded")


class TwoSources(IterationBody):
    name = "two_sources"
    heads = {"seen": ("split",)}
    metric_aggregations = {"files": "sum"}
    convergence_metric = None
    outputs = ("seen",)
    static_input = False  # everything comes from the two sources

    def coordinators(self, params, input, store_options):
        from include.epoch.splits import FileSplitEnumerator

        return {source: FileSplitEnumerator(os.path.join(input.path, source), store_options=store_options,
                                            suffixes=(".csv",), max_splits_per_epoch=1)
                for source in SOURCES}

    def load(self, raw, params):
        return {}

    def init(self, data, ctx: EpochContext):
        return {"seen": ctx.spark.createDataFrame([], "split string, source string, epoch int")}

    def step(self, variables, data, ctx: EpochContext) -> StepResult:
        from pyspark.sql import functions as F

        rows = [(f"{source}/{e['split']}", source, ctx.epoch)
                for source in SOURCES for events in ctx.events_for(source).values() for e in events]
        seen = variables["seen"].unionByName(
            ctx.spark.createDataFrame(rows, "split string, source string, epoch int"))
        return StepResult({"seen": seen.withColumn("files", F.lit(1.0))}, metrics={"files": ("seen", "files")})

    def finish(self, variables, data, ctx):
        return {"seen": variables["seen"].select("split", "source", "epoch")}
