"""Bad input gives a clear error naming the problem, and commits no checkpoint."""

from __future__ import annotations

import pandas as pd
import pytest

from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from include.errors import (
    CheckpointCorrupted,
    CheckpointError,
    ConfigError,
    InputDataError,
    PermanentStoreError,
    TransientStoreError,
)
from include.runs.ownership import OwnershipError
from include.store import RetryPolicy
from spark_jobs.runner import IterationRunner
from tests.conftest import free_port
from tests.helpers import graph_with_dangling, pagerank_config, write_edges

pytestmark = pytest.mark.spark


def assert_nothing_committed(cfg, **store_options):
    assert IterationJob(cfg, store_options=store_options).log.latest_id() is None


def test_missing_input_path(spark, tmp_path):
    cfg = pagerank_config(tmp_path, tmp_path / "nope" / "edges.csv")
    with pytest.raises(InputDataError, match=r"input path .*nope/edges.csv does not exist"):
        IterationRunner(cfg, spark).run()
    assert_nothing_committed(cfg)


def test_edges_without_src_dst(spark, tmp_path):
    (tmp_path / "edges.csv").write_text("from,to\n1,2\n2,3\n")
    cfg = pagerank_config(tmp_path, tmp_path / "edges.csv")
    with pytest.raises(InputDataError, match=r"needs columns src and dst; missing \['src', 'dst'\], found \['from', 'to'\]"):
        IterationRunner(cfg, spark).run()
    assert_nothing_committed(cfg)


def test_empty_input(spark, tmp_path):
    (tmp_path / "edges.csv").write_text("src,dst\n")
    cfg = pagerank_config(tmp_path, tmp_path / "edges.csv")
    with pytest.raises(InputDataError, match="PageRank input is empty"):
        IterationRunner(cfg, spark).run()
    assert_nothing_committed(cfg)
    (tmp_path / "empty_dir").mkdir()
    cfg = pagerank_config(tmp_path, tmp_path / "empty_dir", job_id="pr-dir")
    with pytest.raises(InputDataError, match="empty_dir is empty"):
        IterationRunner(cfg, spark).run()


@pytest.mark.parametrize("edges", ["src,dst\n1,2\n2,\n3,1\n", "src,dst\n1,2\n,3\n"])
def test_edges_with_a_null_end(spark, tmp_path, edges):
    (tmp_path / "edges.csv").write_text(edges)
    cfg = pagerank_config(tmp_path, tmp_path / "edges.csv")
    with pytest.raises(InputDataError, match="PageRank input has edges with a null src or dst"):
        IterationRunner(cfg, spark).run()
    assert_nothing_committed(cfg)


def test_non_numeric_features(spark, tmp_path):
    pd.DataFrame({"x": [1.0, 2.0, 3.0], "label": ["a", "b", "c"]}).to_parquet(tmp_path / "p.parquet")
    cfg = JobConfig(job_id="km", body="kmeans", input=str(tmp_path / "p.parquet"), checkpoint_root=str(tmp_path / "s"),
                    body_params={"k": 2, "features": ["x", "label"]})
    with pytest.raises(InputDataError, match=r"k-means needs numeric features; non-numeric: label \(string\)"):
        IterationRunner(cfg, spark).run()
    assert_nothing_committed(cfg)


def test_bad_parameters_are_refused_before_any_work(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(5, 0.5))
    with pytest.raises(ConfigError, match=r"damping must be a number in \(0, 1\), got 1.5"):
        IterationRunner(pagerank_config(tmp_path, edges, body_params={"damping": 1.5}), spark).run()
    with pytest.raises(ConfigError, match=r"unknown PageRank parameter\(s\) \['dampening'\]"):
        IterationRunner(pagerank_config(tmp_path, edges, body_params={"dampening": 0.5}), spark).run()
    with pytest.raises(ConfigError, match=r"invalid job_id '\.\./x'"):
        pagerank_config(tmp_path, edges, job_id="../x")
    with pytest.raises(ConfigError, match="tolerance must be a finite number >= 0"):
        pagerank_config(tmp_path, edges, tolerance=float("nan"))
    with pytest.raises(ConfigError, match=r"num_partitions must be null or an integer in \[1, 100000\], got 0"):
        pagerank_config(tmp_path, edges, num_partitions=0)
    with pytest.raises(ConfigError, match="unknown iteration body 'pagerankk'"):
        IterationRunner(pagerank_config(tmp_path, edges, body="pagerankk"), spark).run()
    assert_nothing_committed(pagerank_config(tmp_path, edges))


def test_damaged_checkpoint_is_refused(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(10, 0.3))
    cfg = pagerank_config(tmp_path, edges, max_epochs=5, tolerance=0.0)
    IterationRunner(cfg, spark).run(max_epochs_in_batch=2)
    job = IterationJob(cfg)
    latest = job.restorer.state().latest
    victim = latest.variables["ranks"].partitions[0][0].key
    data = bytearray(job.store.get(victim))
    data[len(data) // 2] ^= 0xFF  # flip bits, same size
    job.store.put(victim, bytes(data))
    with pytest.raises(CheckpointCorrupted, match=rf"{victim.rsplit('/', 1)[-1]} fails its checksum"):
        IterationRunner(cfg, spark).run()
    assert IterationJob(cfg).log.latest_id() == 1, "no checkpoint was committed on top of bad data"
    with pytest.raises(CheckpointCorrupted, match="fails its checksum"):
        job.log.load(1, verify="full")


def test_store_that_cannot_be_reached(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(5, 0.5))
    cfg = pagerank_config(tmp_path, edges, checkpoint_root="s3://some-bucket/root")
    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}", "retry": RetryPolicy(3, 0.01, 0.01),
               "connect_timeout": 0.5}
    with pytest.raises(TransientStoreError,
                       match=r"s3://some-bucket/root/.* at http://127.0.0.1:\d+ still failing after 3 attempts"):
        IterationRunner(cfg, spark, store_options=options).run()


@pytest.mark.s3
def test_store_without_bucket(spark, tmp_path, moto_endpoint):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(5, 0.5))
    cfg = pagerank_config(tmp_path, edges, checkpoint_root="s3://missing-bucket-x/root")
    with pytest.raises(PermanentStoreError,
                       match=r"s3://missing-bucket-x/root/.* failed with NoSuchBucket \(the bucket does not exist\)"):
        IterationRunner(cfg, spark, store_options={"endpoint_url": moto_endpoint}).run()


def test_a_job_cannot_change_its_body(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(8, 0.3))
    IterationRunner(pagerank_config(tmp_path, edges, max_epochs=3), spark).run(max_epochs_in_batch=1)
    other = JobConfig(job_id="pr", body="kmeans", input=edges, checkpoint_root=str(tmp_path / "store"))
    with pytest.raises(OwnershipError, match="job pr belongs to .*body spark_jobs.bodies.pagerank:PageRank.*"
                                             "body 'spark_jobs.bodies.pagerank:PageRank' -> 'spark_jobs.bodies.kmeans:KMeans'"):
        IterationRunner(other, spark).run()
    # even taken over, a checkpoint's variables are never given to another body
    with pytest.raises(CheckpointError, match="checkpointed with body 'pagerank'; it cannot continue as 'kmeans'"):
        IterationRunner(other, spark, take_over=True).run()


def kmeans_config(tmp_path, points: pd.DataFrame, **params) -> JobConfig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "points.parquet"
    points.to_parquet(path)
    return JobConfig(job_id="km", body="kmeans", input=str(path), checkpoint_root=str(tmp_path / "store"),
                     body_params={"k": 2, "seed": 1, **params}, max_epochs=3, tolerance=0.0, num_partitions=2)


def assert_no_checks_report(cfg):
    job = IterationJob(cfg)
    assert not list(job.store.list(f"{job.log.layout.root}/checks/")), "refused before any data check ran"


def test_infinite_features(spark, tmp_path):
    inf = float("inf")
    points = pd.DataFrame({"id": range(10, 20), "x": [0.0, 1.0, inf, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
                           "y": [0.0, 1.0, 2.0, 3.0, -inf, 5.0, 6.0, 7.0, 8.0, 9.0]})
    cfg = kmeans_config(tmp_path, points)
    with pytest.raises(InputDataError) as refused:
        IterationRunner(cfg, spark).run()
    assert str(refused.value) == (
        "k-means feature column(s) ['x', 'y'] have infinite values (e.g. id=12: x=inf; id=14: y=-inf)")
    assert_nothing_committed(cfg)
    assert_no_checks_report(cfg)
    # without an id column the sample is the whole row
    cfg = kmeans_config(tmp_path / "no-id", points.drop(columns="id"))
    with pytest.raises(InputDataError) as refused:
        IterationRunner(cfg, spark).run()
    assert str(refused.value) == (
        "k-means feature column(s) ['x', 'y'] have infinite values (e.g. x=inf, y=2.0: x=inf; x=4.0, y=-inf: y=-inf)")
    assert_nothing_committed(cfg)


@pytest.mark.parametrize("case", ["ragged", "strings", "nan", "null_value", "null_vector", "null_scalar"])
def test_bad_feature_arrays(spark, tmp_path, case):
    """Each bad vector is refused before any step, naming the column and a sample row."""
    v = [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0], [4.0, 5.0], [5.0, 6.0]]
    frame, expected = pd.DataFrame({"id": range(6), "v": v}), None
    if case == "ragged":
        frame["v"] = [*v[:3], [3.0], *v[4:]]
        expected = ("k-means feature column v holds arrays of different lengths [1, 2] (e.g. id=3: 1 features where "
                    "others have 2): every point needs the same number of features")
    elif case == "strings":
        frame["v"] = [[str(x) for x in p] for p in v]
        expected = "k-means feature column v holds arrays of string, not numbers (e.g. id=0)"
    elif case == "nan":
        frame["v"] = [*v[:4], [4.0, float("nan")], v[5]]
        expected = "k-means feature column(s) ['v'] have null or NaN values (e.g. id=4: v[1] is NaN)"
    elif case == "null_value":
        frame["v"] = [*v[:2], [None, 3.0], *v[3:]]
        expected = "k-means feature column(s) ['v'] have null or NaN values (e.g. id=2: v[0] is null)"
    elif case == "null_vector":
        frame["v"] = [*v[:5], None]
        expected = "k-means feature column(s) ['v'] have null or NaN values (e.g. id=5: v is null)"
    else:
        frame = pd.DataFrame({"id": range(6), "x": [0.0, 1.0, None, 3.0, 4.0, 5.0], "y": [0.0] * 6})
        expected = "k-means feature column(s) ['x'] have null or NaN values (e.g. id=2: x is null)"
    cfg = kmeans_config(tmp_path, frame)
    if case == "nan":  # pandas writes a NaN in a list as null: write the NaN itself
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": list(range(6)), "v": pa.array(list(frame["v"]), pa.list_(pa.float64()),
                                                                     from_pandas=False)}), cfg.input.path)
    with pytest.raises(InputDataError) as refused:
        IterationRunner(cfg, spark).run()
    assert str(refused.value) == expected
    assert_nothing_committed(cfg)


def test_fewer_distinct_points_than_k(spark, tmp_path):
    points = pd.DataFrame({"id": range(8), "x": [1.0, 5.0] * 4, "y": [2.0, 6.0] * 4})
    cfg = kmeans_config(tmp_path, points, k=3)
    with pytest.raises(InputDataError) as refused:
        IterationRunner(cfg, spark).run()
    assert str(refused.value) == (
        "k-means with k=3 needs at least 3 distinct points, the input has 2 distinct point(s) (of 8 points): "
        "k must not exceed the number of distinct points")
    assert_nothing_committed(cfg)
    assert_no_checks_report(cfg)
