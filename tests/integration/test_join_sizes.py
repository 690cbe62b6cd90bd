"""The variables an epoch starts from carry their stored size into Spark's join planning.

A local checkpoint inherits the size estimate of the plan that computed it (for a join, the
product of its sides' sizes) and the store's data source reports none, so without help Spark
plans every join with a variable as a sort-merge join and shuffles the other side (PageRank's
whole graph, every epoch; measured in bench/RESULTS.md). ``sized_for_joins`` marks a variable
whose stored Parquet is at most ``spark.sql.autoBroadcastJoinThreshold`` for broadcast, as
Spark does for a Parquet table of that size."""

from __future__ import annotations

import contextlib

import pytest
from pyspark.sql import functions as F

from include.checkpoints.manifest import DatasetRef
from include.store import LocalStore
from spark_jobs.storeio import read_dataset, sized_for_joins, write_dataset

pytestmark = pytest.mark.spark


@contextlib.contextmanager
def threshold(spark, value):
    old = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", value)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", old)


def join_strategy(big, variable) -> str:
    plan = big.join(variable, "node")._jdf.queryExecution().executedPlan().toString()
    found = [s for s in ("BroadcastHashJoin", "SortMergeJoin", "ShuffledHashJoin") if s in plan]
    assert len(found) == 1, plan
    return found[0]


def a_variable_with_a_join_estimate(spark):
    """A small frame computed by a join (its size estimate is a product), as a step returns."""
    nodes = spark.range(2000).withColumnRenamed("id", "node")
    weights = spark.range(2000).select(F.col("id").alias("node"), (F.col("id") * 0.5).alias("rank"))
    return nodes.join(weights, "node")


def test_a_kept_variable_is_broadcast_when_its_files_are_small(spark, tmp_path):
    big = spark.range(2_000_000).withColumnRenamed("id", "node")  # 16 MB estimated: over the threshold
    with threshold(spark, "1m"):
        kept = {}
        reports = write_dataset(a_variable_with_a_join_estimate(spark), store=LocalStore(tmp_path),
                                prefix="v/ranks", report_prefix="v/_reports/ranks", head="ranks", epoch=1,
                                attempt_id="a1", num_partitions=3, key_columns=("node",), kept=kept)
        records, checkpointed = kept["ranks"]
        stored = sum(f.size for r in reports for f in r.files)
        assert 0 < stored < 1 << 20
        assert join_strategy(big, checkpointed.select("node", "rank")) == "SortMergeJoin", \
            "the local checkpoint alone is planned by its inherited estimate"
        assert join_strategy(big, records) == "BroadcastHashJoin"
        assert sorted(records.collect()) == sorted(a_variable_with_a_join_estimate(spark).collect())
    with threshold(spark, "-1"):
        kept = {}
        write_dataset(a_variable_with_a_join_estimate(spark), store=LocalStore(tmp_path),
                      prefix="w/ranks", report_prefix="w/_reports/ranks", head="ranks", epoch=1,
                      attempt_id="a1", num_partitions=3, key_columns=("node",), kept=kept)
        assert join_strategy(big, kept["ranks"][0]) == "SortMergeJoin", "threshold -1: nothing is marked"


def test_a_variable_read_from_the_store_is_broadcast_only_when_small(spark, tmp_path):
    store = LocalStore(tmp_path)
    reports = write_dataset(a_variable_with_a_join_estimate(spark), store=store, prefix="v/ranks",
                            report_prefix="v/_reports/ranks", head="ranks", epoch=1, attempt_id="a1",
                            num_partitions=3, key_columns=("node",))
    ds = DatasetRef(reports[0].schema, tuple(r.files for r in reports))
    stored = sum(f.size for f in ds.files)
    big = spark.range(2_000_000).withColumnRenamed("id", "node")
    read = read_dataset(spark, store, ds, 3).cache()
    try:
        with threshold(spark, "1m"):
            assert join_strategy(big, read) == "SortMergeJoin", "the data source reports no size"
            assert join_strategy(big, sized_for_joins(read, stored)) == "BroadcastHashJoin"
        with threshold(spark, str(stored - 1)):
            assert join_strategy(big, sized_for_joins(read, stored)) == "SortMergeJoin", "one byte too many"
    finally:
        read.unpersist()
