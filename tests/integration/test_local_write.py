"""The tail writes a local frame (rows the driver holds) from the driver: the same partitions,
records, metrics and profiles as the Spark job writes for the same rows as a distributed frame."""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import DoubleType, IntegerType, StructField, StructType

from include.store import LocalStore
from spark_jobs.frames import local_frame
from spark_jobs.storeio import write_dataset

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("cluster_id", IntegerType()), StructField("x", DoubleType()),
                     StructField("shift", DoubleType())])
ROWS = [(i, i * 1.5, 0.25 * i) for i in (7, 3, 11, 0, 5, 9, 2)]


def write(spark, tmp_path, df, name, kept=None):
    store = LocalStore(tmp_path)
    reports = write_dataset(df, store=store, prefix=f"{name}/data", report_prefix=f"{name}/reports",
                            head="centroids", epoch=3, attempt_id="a3", num_partitions=3,
                            key_columns=("cluster_id",), metrics={"max_shift": ("shift", "max")},
                            facts={"k": 7}, kept=kept)
    rows = {r.partition: [row for f in r.files for row in pq.read_table(io.BytesIO(store.get(f.key))).to_pylist()]
            for r in reports}
    return reports, rows


def test_a_local_frame_is_written_as_the_spark_job_writes_it(spark, tmp_path):
    local, distributed = local_frame(spark, ROWS, SCHEMA), spark.createDataFrame(ROWS, SCHEMA)
    assert local.isLocal() and not distributed.isLocal()
    kept = {}
    ours, ours_rows = write(spark, tmp_path, local, "local", kept)
    theirs, theirs_rows = write(spark, tmp_path, distributed, "spark")
    assert ours_rows == theirs_rows, "the same records in the same partitions, in key order"
    assert sum(len(r) for r in ours_rows.values()) == len(ROWS)
    for a, b in zip(ours, theirs):
        assert (a.partition, a.feedback_count, a.metrics, a.schema, a.profile) == \
            (b.partition, b.feedback_count, b.metrics, b.schema, b.profile)
        assert all(f.key.endswith("-driver.parquet") for f in a.files)
    records, checkpointed = kept["centroids"]
    assert checkpointed is None and records.isLocal()
    assert sorted(map(tuple, records.collect())) == sorted((c, x) for c, x, _s in ROWS)


def test_a_local_frame_costs_the_jvm_nothing_until_spark_is_asked(spark):
    """On a classic session the JVM relation of a local frame is made on first use: the tail
    writes it and the next epoch reads its rows from the Arrow table, so a frame nothing else
    asks about never costs one. When asked, it is ``createDataFrame`` of the same table."""
    from pyspark.sql import DataFrame
    from pyspark.sql.types import ArrayType, StringType

    from spark_jobs.frames import arrow_of, rows_of

    schema = StructType([StructField("cluster_id", IntegerType()), StructField("center", ArrayType(DoubleType())),
                         StructField("name", StringType(), nullable=False)])
    rows = [(1, [1.0, 2.0], "a"), (2, None, "b"), (0, [], "c")]
    df = local_frame(spark, rows, schema)
    assert isinstance(df, DataFrame) and df.schema == schema and df.columns == ["cluster_id", "center", "name"]
    assert [tuple(r.values()) for r in rows_of(df)] == rows
    eager = spark.createDataFrame(arrow_of(df))
    assert "_jdf" not in vars(df), "schema, columns and rows answered without the JVM"
    assert eager.schema == df.schema
    assert df.collect() == eager.collect() and df.isLocal() and "_jdf" in vars(df)
    other = local_frame(spark, rows, schema)
    joined = spark.createDataFrame([(2, "x"), (0, "y")], "cluster_id int, tag string").join(other, "cluster_id")
    assert sorted((r.cluster_id, r.tag, r.name) for r in joined.collect()) == [(0, "y", "c"), (2, "x", "b")]
    assert df.cluster_id is not None and df["center"] is not None  # columns by attribute and by name
    with pytest.raises(AttributeError):
        df.no_such_column


def test_one_store_read_from_two_sessions_of_one_process(spark, tmp_path):
    """The store's data source is registered per session: a process that reads one store from
    a second session (an executor kept across the epochs of a DAG run, a new session after the
    first was closed) registers it there too, instead of naming a source that session lacks."""
    from spark_jobs.storeio import read_files

    store = LocalStore(tmp_path)
    reports, rows = write(spark, tmp_path, spark.createDataFrame(ROWS, SCHEMA), "twice")
    groups = [[f.to_dict() for f in r.files] for r in reports]
    schema = StructType(SCHEMA.fields[:2])
    other = spark.newSession()
    assert read_files(spark, store, groups, schema).count() == len(ROWS)
    assert read_files(other, store, groups, schema).count() == len(ROWS)
    assert read_files(spark, store, groups, schema).count() == len(ROWS)


def test_a_small_dataset_is_written_by_one_spark_task_with_a_file_per_partition(spark, tmp_path):
    """The tail's shuffle is by the partition column and adaptive execution coalesces it: a
    small dataset's partitions are all written by one Spark task (one Python hand-over instead
    of P), still one file and one report per partition, records in key order. With adaptive
    execution off, a task per (non-empty) shuffle partition, the same files' contents."""
    rows = [(i, i * 0.5, 0.0) for i in range(200)]
    coalesced, coalesced_rows = write(spark, tmp_path, spark.createDataFrame(rows, SCHEMA).repartition(4), "one")
    tasks = {f.key.rsplit("-", 1)[1] for r in coalesced for f in r.files}
    assert len(tasks) == 1, f"written by the tasks {tasks}"
    assert [len(r.files) for r in coalesced] == [1, 1, 1]
    for p, got in coalesced_rows.items():
        assert [row["cluster_id"] for row in got] == sorted(row["cluster_id"] for row in got)
    shuffle_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        spread, spread_rows = write(spark, tmp_path, spark.createDataFrame(rows, SCHEMA).repartition(4), "spread")
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", "true")
        spark.conf.set("spark.sql.shuffle.partitions", shuffle_partitions)
    assert len({f.key.rsplit("-", 1)[1] for r in spread for f in r.files}) > 1
    assert spread_rows == coalesced_rows


def test_a_local_frame_with_arrays_is_written_without_a_spark_job(spark, tmp_path):
    """k-means' centroids: an array column. The tail writes the Arrow table the frame was made
    from (Spark only hashes the local rows for their partitions: no Spark job) and the files
    hold what the Spark job writes for the same rows."""
    from pyspark.sql.types import ArrayType, LongType

    schema = StructType([StructField("cluster_id", IntegerType()), StructField("center", ArrayType(DoubleType())),
                         StructField("shift", DoubleType()), StructField("size", LongType())])
    rows = [(i, [i * 0.5, -1.0, 2.0 ** i], 0.1 * i, 10 * i) for i in (4, 0, 2, 9, 1)]
    tracker = spark.sparkContext.statusTracker()
    local = local_frame(spark, rows, schema)
    jobs = set(tracker.getJobIdsForGroup(None))
    store = LocalStore(tmp_path)
    ours = write_dataset(local, store=store, prefix="local/data", report_prefix="local/reports", head="centroids",
                         epoch=1, attempt_id="a1", num_partitions=3, key_columns=("cluster_id",),
                         metrics={"max_shift": ("shift", "max")})
    assert set(tracker.getJobIdsForGroup(None)) == jobs, "no Spark job for a local frame"
    theirs = write_dataset(spark.createDataFrame(rows, schema), store=store, prefix="spark/data",
                           report_prefix="spark/reports", head="centroids", epoch=1, attempt_id="a1",
                           num_partitions=3, key_columns=("cluster_id",), metrics={"max_shift": ("shift", "max")})
    for a, b in zip(ours, theirs):
        assert (a.partition, a.feedback_count, a.metrics, a.schema, a.profile) == \
            (b.partition, b.feedback_count, b.metrics, b.schema, b.profile)
        got = [row for f in a.files for row in pq.read_table(io.BytesIO(store.get(f.key))).to_pylist()]
        want = [row for f in b.files for row in pq.read_table(io.BytesIO(store.get(f.key))).to_pylist()]
        assert got == want


# A session whose driver may collect at most 1 MiB of results: a variable the epoch expected to
# be small (on_driver) grew past it. Run in a process of its own (one SparkContext per process).
_GROWN = """
import json, logging, os, sys, tempfile
from pathlib import Path
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").config("spark.driver.maxResultSize", "1m")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("OFF")
from include.store import LocalStore
from spark_jobs.storeio import release_kept, write_dataset
root = Path(sys.argv[1])
persistent = lambda: spark.sparkContext._jsc.getPersistentRDDs().size()
out = {}
for name, rows in (("grown", 200_000), ("small", 2_000), ("few", 600)):
    df = spark.range(rows).select(F.col("id").alias("node"), (F.col("id") * 0.5).alias("rank"),
                                  F.sha2(F.col("id").cast("string"), 256).alias("pad"))
    for on_driver in (True, False):
        kept, before = {}, persistent()
        reports = write_dataset(df, store=LocalStore(root / f"{name}-{on_driver}"), prefix="v/ranks",
                                report_prefix="v/_r/ranks", head="ranks", epoch=3, attempt_id="a3",
                                num_partitions=3, key_columns=("node",), kept=kept, on_driver=on_driver)
        out[f"{name}-{on_driver}"] = {"sha256": [[f.sha256 for f in r.files] for r in reports],
                                      "tasks": sorted({f.key.rsplit("-", 1)[1].split(".")[0] for r in reports for f in r.files}),
                                      "kept_in_spark": kept["ranks"][1] is not None,
                                      "kept_local": "LocalRelation"
                                      in kept["ranks"][0]._jdf.queryExecution().analyzed().toString(),
                                      "kept_rows": kept["ranks"][0].count(),
                                      "held": persistent() - before}
        release_kept(kept["ranks"][1])
        out[f"{name}-{on_driver}"]["left_after_release"] = persistent() - before
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow  # a Spark driver of its own
def test_a_variable_grown_past_what_the_driver_may_collect_is_written_in_spark(tmp_path):
    """``on_driver``: the tail collects the records to the driver, unless they are more than
    ``spark.driver.maxResultSize``: then it writes them in Spark (warning), the same bytes.
    What it keeps is a local frame up to ``LOCAL_FRAME_ROWS`` records, else a local checkpoint
    in Spark (a local relation is copied into every place a plan reads it)."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", _GROWN, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    got = json.loads(line[len("RESULT "):])
    assert "epoch 3: 'ranks' grew past what the driver may collect (spark.driver.maxResultSize): written in Spark " \
        "instead" in done.stderr
    assert done.stderr.count("grew past what the driver may collect") == 1, "only the grown variable"
    assert got["grown-True"]["kept_in_spark"] and got["grown-True"]["tasks"] != ["driver"], "written in Spark"
    assert got["small-True"]["tasks"] == ["driver"], "2,000 records: written by the driver"
    assert got["small-True"]["kept_in_spark"] and not got["small-True"]["kept_local"], "kept in Spark"
    assert got["few-True"]["tasks"] == ["driver"] and got["few-True"]["kept_local"], "600: kept as a local frame"
    assert not got["few-True"]["kept_in_spark"]
    for name, rows in (("grown", 200_000), ("small", 2_000), ("few", 600)):
        assert got[f"{name}-True"]["sha256"] == got[f"{name}-False"]["sha256"], name
        assert got[f"{name}-True"]["kept_rows"] == got[f"{name}-False"]["kept_rows"] == rows, name
        for on_driver in (True, False):
            run = got[f"{name}-{on_driver}"]
            assert run["held"] == (1 if run["kept_in_spark"] else 0) and run["left_after_release"] == 0, (name, run)


@pytest.mark.parametrize("path", ["spark", "collected", "local"])
def test_repeated_keys_give_the_same_bytes_whatever_order_the_records_came_in(spark, tmp_path, path):
    """A variable whose key repeats (connected components' edges, keyed by node): with
    ``total_order`` its partitions are sorted by the other atomic columns too, so the same
    records give the same bytes on every write path, whichever order they reached the tail in
    (epoch 0 of components differed from run to run before)."""
    from pyspark.sql.types import ArrayType, LongType

    schema = StructType([StructField("node", LongType()), StructField("parent", LongType()),
                         StructField("tags", ArrayType(LongType()))])
    rows = [(n, p, [p]) for n in range(40) for p in range(n % 4 + 1)]
    store = LocalStore(tmp_path)

    def digests(ordered, name, total_order=True):
        df = local_frame(spark, ordered, schema) if path == "local" else spark.createDataFrame(ordered, schema)
        reports = write_dataset(df, store=store, prefix=f"{name}/data", report_prefix=f"{name}/reports",
                                head="edges", epoch=0, attempt_id="a0", num_partitions=3, key_columns=("node",),
                                total_order=total_order, on_driver=path == "collected")
        if path != "spark":
            assert all(f.key.endswith("-driver.parquet") for r in reports for f in r.files)
        return [[f.sha256 for f in r.files] for r in reports]

    ascending = digests(rows, "ascending")
    assert ascending == digests(list(reversed(rows)), "descending")
    # the test can tell: by the key alone, the reversed records keep their reversed order
    assert digests(rows, "keys-a", total_order=False) != digests(list(reversed(rows)), "keys-d", total_order=False)


@pytest.mark.parametrize("partitions", [3, 2])
def test_an_output_is_written_where_spark_computed_it(spark, tmp_path, partitions):
    """Without keys or a total order (an output), each of Spark's partitions (coalesced to at
    most P) is one partition of the dataset, its records in their order: no shuffle."""
    from pyspark.sql import functions as F

    df = spark.range(0, 900, numPartitions=3).select(F.col("id"), (F.col("id") % 7).alias("g"))
    store = LocalStore(tmp_path)
    reports = write_dataset(df, store=store, prefix="out/data", report_prefix="out/reports", head="assignments",
                            epoch=4, attempt_id="a4", num_partitions=partitions)
    written = {r.partition: [row["id"] for f in r.files for row in pq.read_table(io.BytesIO(store.get(f.key))).to_pylist()]
               for r in reports}
    spark_partitions = {}
    for row in df.coalesce(partitions).withColumn("p", F.spark_partition_id()).collect():
        spark_partitions.setdefault(row.p, []).append(row.id)
    assert written == {p: spark_partitions.get(p, []) for p in range(partitions)}
    assert sorted(i for ids in written.values() for i in ids) == list(range(900))
