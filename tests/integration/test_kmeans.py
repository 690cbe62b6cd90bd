"""k-means through the library runner equals scikit-learn's Lloyd from the same initial centroids."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from include.checkpoints.head_state import HeadStatus
from include.contract.body import EpochContext, resolve_body
from include.contract.config import InputSpec, JobConfig
from spark_jobs.runner import IterationRunner
from spark_jobs.storeio import read_input

pytestmark = pytest.mark.spark


def blobs(path, n=400, seed=5):
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=n, centers=4, n_features=3, cluster_std=1.8, random_state=seed)
    pd.DataFrame({"id": np.arange(n), "x": X[:, 0], "y": X[:, 1], "z": X[:, 2]}).to_parquet(path)
    return X


def test_matches_sklearn_from_the_same_initial_centroids(spark, tmp_path):
    from sklearn.cluster import KMeans as SkKMeans

    X = blobs(tmp_path / "points.parquet")
    config = JobConfig(job_id="km", body="kmeans", input=str(tmp_path / "points.parquet"),
                       checkpoint_root=str(tmp_path / "store"), body_params={"k": 4, "seed": 11},
                       max_epochs=100, tolerance=1e-12, num_partitions=2)

    body = resolve_body("kmeans")
    params = body.parse_params(config.body_params)
    data = body.load(read_input(spark, config.input, 2), params)
    init = np.array(body.initial_centroids(data, params))
    assert init.shape == (4, 3) and len({tuple(c) for c in init}) == 4
    assert np.array_equal(init, np.array(body.initial_centroids(data, params))), "deterministic from the seed"

    result = IterationRunner(config, spark).run()
    assert result.status is HeadStatus.TERMINATED
    assert result.decisions[-1].reason.startswith("converged")

    reference = SkKMeans(n_clusters=4, init=init, n_init=1, max_iter=1000, tol=0.0, algorithm="lloyd").fit(X)
    centroids = result.outputs["centroids"].toPandas().sort_values("cluster_id")
    assert list(centroids["cluster_id"]) == [0, 1, 2, 3]
    np.testing.assert_allclose(centroids[["x", "y", "z"]].to_numpy(), reference.cluster_centers_, rtol=0, atol=1e-9)

    assignments = result.outputs["assignments"].toPandas().sort_values("id")
    assert list(assignments.columns) == ["id", "x", "y", "z", "cluster_id"]
    assert (assignments["cluster_id"].to_numpy() == reference.labels_).all()


def test_init_is_kmeans_plus_plus_spread(spark, tmp_path):
    """With well separated blobs, k-means++ puts one initial centroid in each blob."""
    from sklearn.datasets import make_blobs

    X, labels = make_blobs(n_samples=300, centers=[[0, 0], [50, 50], [-50, 50]], cluster_std=0.5, random_state=0)
    pd.DataFrame({"a": X[:, 0], "b": X[:, 1]}).to_parquet(tmp_path / "p.parquet")
    body = resolve_body("kmeans")
    params = body.parse_params({"k": 3, "seed": 1})
    data = body.load(read_input(spark, InputSpec(str(tmp_path / "p.parquet")), 2), params)
    init = np.array(body.initial_centroids(data, params))
    nearest_blob = {int(np.argmin(np.linalg.norm(np.array([[0, 0], [50, 50], [-50, 50]]) - c, axis=1))) for c in init}
    assert nearest_blob == {0, 1, 2}
    ctx = EpochContext(0, 2, params, spark)
    assert body.init(data, ctx)["centroids"].count() == 3


def test_kmeans_parallel_init_for_points_the_driver_does_not_hold(spark, tmp_path, monkeypatch):
    """Beyond what the driver collects, the initialisation is k-means||: a fixed number of Spark
    passes whatever k (k-means++ took one per centroid), one centroid per well separated blob,
    the same centroids on any partitioning, the centroids a fork keeps kept first, and a k above
    the number of distinct points still refused by name."""
    from sklearn.datasets import make_blobs

    from include.errors import InputDataError
    from spark_jobs.bodies import kmeans

    for threshold in ("LOCAL_INIT_VALUES", "LOCAL_STEP_VALUES", "HELD_STEP_VALUES"):
        monkeypatch.setattr(kmeans, threshold, 0)
    passes = []
    for name, label in (("_spark_round", "round"), ("_sample_function", "sample"), ("_sums_function", "weights")):
        original = getattr(kmeans, name)
        monkeypatch.setattr(kmeans, name, lambda *a, _f=original, _l=label, **kw: passes.append(_l) or _f(*a, **kw))
    centres = np.array([[0, 0], [60, 60], [-60, 60], [60, -60], [-60, -60]], dtype=float)
    X, _ = make_blobs(n_samples=3000, centers=centres, cluster_std=1.0, random_state=4)
    pd.DataFrame({"a": X[:, 0], "b": X[:, 1]}).to_parquet(tmp_path / "p.parquet")
    body = resolve_body("kmeans")
    params = body.parse_params({"k": 5, "seed": 9})

    def blobs_of(init) -> set[int]:
        return {int(np.argmin(np.linalg.norm(centres - c, axis=1))) for c in init}

    inits = []
    for partitions in (2, 3):
        data = body.load(read_input(spark, InputSpec(str(tmp_path / "p.parquet")), partitions), params)
        passes.clear()
        inits.append(np.array(body.initial_centroids(data, params)))
        assert passes == ["round"] + ["sample"] * kmeans.PARALLEL_INIT_STEPS + ["weights"]
    assert inits[0].shape == (5, 2)
    assert np.array_equal(inits[0], inits[1]), "the same centroids on 2 and 3 partitions"
    assert blobs_of(inits[0]) == {0, 1, 2, 3, 4}

    passes.clear()
    many = np.array(body.initial_centroids(data, body.parse_params({"k": 40, "seed": 9})))
    assert len({tuple(c) for c in many}) == 40 and len(passes) == kmeans.PARALLEL_INIT_STEPS + 2

    kept = inits[0][:2].tolist()  # a fork from k=2 to k=5 keeps its parent's two
    forked = body.initial_centroids(data, params, start=kept)
    assert forked[:2] == kept and blobs_of(forked) == {0, 1, 2, 3, 4}

    four = np.repeat(centres[:4], 500, axis=0)  # 4 distinct points
    pd.DataFrame({"a": four[:, 0], "b": four[:, 1]}).to_parquet(tmp_path / "four.parquet")
    data = body.load(read_input(spark, InputSpec(str(tmp_path / "four.parquet")), 2), params)
    with pytest.raises(InputDataError, match=r"k=5 needs at least 5 distinct points, the input has 4 distinct"):
        body.initial_centroids(data, params)
    params4 = body.parse_params({"k": 4, "seed": 9})
    assert {tuple(c) for c in body.initial_centroids(data, params4)} == {tuple(c) for c in centres[:4]}


def test_the_pass_on_the_driver_writes_the_same_bits_as_the_spark_pass(spark, tmp_path, monkeypatch):
    """Small inputs are summed by the driver over the partitions' points it holds from the first
    pass, medium ones from k-means++ or else the second pass in the process (the first runs in Spark); the
    checkpoints are the same bits as with the Spark pass at every epoch, whatever Arrow batches
    the Spark pass gets (rows are summed in blocks of ``BLOCK_ROWS`` in both)."""
    from spark_jobs.bodies import kmeans, kmeans_kernels

    rng = np.random.default_rng(3)
    n = 3 * kmeans_kernels.BLOCK_ROWS + 1234  # several blocks, one cut short
    X = rng.normal(0, 4, size=(n, 5)) + rng.integers(0, 6, size=(n, 1)) * 3.0
    (tmp_path / "points").mkdir()
    for i, part in enumerate(np.array_split(np.arange(n), 3)):  # three files: three partitions
        pd.DataFrame({"id": part, "features": list(X[part])}).to_parquet(tmp_path / "points" / f"{i}.parquet")
    spark_passes = []
    sums_function = kmeans._sums_function
    monkeypatch.setattr(kmeans, "_sums_function", lambda C, dim: spark_passes.append(1) or sums_function(C, dim))

    def run(job_id: str) -> tuple[list[list[str]], int, list]:
        spark_passes.clear()
        kmeans._HELD.clear()
        config = JobConfig(job_id=job_id, body="kmeans", input=str(tmp_path / "points"),
                           checkpoint_root=str(tmp_path / job_id), body_params={"k": 6, "seed": 2},
                           max_epochs=4, tolerance=0.0, num_partitions=2, retain_last=10)
        runner = IterationRunner(config, spark)
        result = runner.run()
        assert result.epochs_computed == [0, 1, 2, 3]
        digests = [[f.sha256 for f in runner.job.log.load(e).variables["centroids"].files] for e in range(4)]
        held = [m for _ref, m in kmeans._HELD.values() if m is not None]
        runner.close()
        return digests, len(spark_passes), held

    settings = {"spark.sql.files.openCostInBytes": "1",
                "spark.sql.execution.arrow.maxRecordsPerBatch": "1000"}
    saved = {key: spark.conf.get(key) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        on_driver, passes, held = run("driver")
        assert passes == 0, "a small input: every pass on the driver"
        assert len(held) == 1 and len(held[0]) == 3 and sum(len(m) for m in held[0]) == n, "the driver held the points"
        monkeypatch.setattr(kmeans, "LOCAL_STEP_VALUES", 0)  # medium: held from k-means++ (k passes)
        from_init, passes, held = run("held")
        assert passes == 0, "k-means++ collected the points: every pass on the driver"
        assert len(held) == 1 and sum(len(m) for m in held[0]) == n
        # a process that starts at a later epoch (no k-means++): the first pass in Spark, then held
        config = JobConfig(job_id="resumed", body="kmeans", input=str(tmp_path / "points"),
                           checkpoint_root=str(tmp_path / "resumed"), body_params={"k": 6, "seed": 2},
                           max_epochs=4, tolerance=0.0, num_partitions=2, retain_last=10)
        runner = IterationRunner(config, spark)
        assert runner.run(max_epochs_in_batch=2).epochs_computed == [0, 1]
        runner.close()
        kmeans._HELD.clear()
        spark_passes.clear()
        runner = IterationRunner(config, spark)
        assert runner.run().epochs_computed == [2, 3]
        resumed = [[f.sha256 for f in runner.job.log.load(e).variables["centroids"].files] for e in range(4)]
        runner.close()
        assert len(spark_passes) == 1, "the first pass of the process in Spark, the second on the driver"
        assert len(spark_passes) == 1, "the first pass of the process in Spark, the second on the driver"
        monkeypatch.setattr(kmeans, "HELD_STEP_VALUES", 0)  # large: every pass a Spark job
        in_spark, passes, held = run("spark")
        assert passes == 4 and not held
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
    assert on_driver == in_spark
    assert from_init == in_spark
    assert resumed == in_spark
