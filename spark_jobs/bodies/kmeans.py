"""k-means (Lloyd's algorithm) as an iteration body (pure DataFrame functions).

Input: points with numeric features: scalar numeric columns (every numeric column but ``id`` by
default, or the ``features`` parameter), or one column holding each point's features as an
array of numbers or an ML vector (``features`` naming it; by default the input's only such
column when it has no numeric scalar column). Variables: ``centroids(cluster_id, center)`` (k
rows, ``center`` an array of the d features: the data checks see its elements' stats).

Each epoch is one pass over the points: every partition assigns its points to the nearest
centroid and sums them per cluster with numpy (``mapInArrow``; the centroids travel with the
function), and the driver adds the partitions' sums. The plan Spark runs is the same for any k
and any number of features. Small inputs (``LOCAL_STEP_VALUES``, ``LOCAL_STEP_WORK``) skip the
Spark job, and medium ones (``HELD_STEP_VALUES``) from k-means++ or the second epoch a process
runs: the driver collects each partition's points once per process and runs the same kernel over them,
partition by partition, for the same bits (a partition's rows are summed in blocks of
``kmeans_kernels.BLOCK_ROWS`` whatever Arrow batches Spark cuts them into).

Initialisation is k-means++ made deterministic by a seed: each round picks the point with the
largest ``log(u) / D(x)^2`` (Efraimidis-Spirakis weighted sampling, weights D(x)^2), where
``u`` in (0, 1) is a hash of (seed, round, the point's features): the same data and seed give
the same centroids whatever the partitioning. Points too many for the driver to hold
(``LOCAL_INIT_VALUES``, ``HELD_STEP_VALUES``) start from k-means|| instead (MLlib's
initialisation, ``_parallel_init``), made deterministic the same way: a few Spark passes
whatever k, where k-means++ takes one per centroid. A cluster that loses all its points keeps its
centroid; the data check ``no_empty_cluster`` refuses such an epoch unless the job lowers its
severity to ``warning``. Input with null, NaN or infinite features, arrays of other lengths or
of non-numbers, or fewer distinct points than k, is refused (``InputDataError`` naming the
column and a sample row) before any step. Converged when no centroid moves more than the job's
tolerance (Euclidean).
Outputs: ``centroids`` (``cluster_id`` and the features as the input has them: a column each,
or the one array column) and ``assignments`` (the input rows plus ``cluster_id``); every epoch
also emits ``centroid_history`` rows (epoch, cluster_id, center, shift), published as each
epoch's checkpoint commits, so a running job's trajectory can be watched and plotted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pyspark is imported where a function runs: the body's metadata is importable without it
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

from include.contract import EpochContext, IterationBody, StepResult, param
from include.errors import InputDataError

log = logging.getLogger("iterations")

# k-means++ runs on the driver when the points' features are at most this many numbers (one
# collect, then no Spark job per round); beyond, one Spark job per round
LOCAL_INIT_VALUES = 1 << 22
# Lloyd's pass runs on the driver, over each partition's points collected from Spark once per
# process and kept (the same partitions and kernel: the same bits), where that costs less than
# Spark jobs do:
# - from the first pass, when the points are at most LOCAL_STEP_VALUES numbers and a pass at
#   most LOCAL_STEP_WORK multiply-adds (points x features x k): less than one Spark job costs;
# - from the second pass over the same points in one process (the library runner's epochs), or
#   from k-means++ (k passes at once), up to HELD_STEP_VALUES numbers (128 MiB of the driver's
#   memory) and HELD_STEP_WORK multiply-adds: taking the points out of Spark's cache costs about
#   what a Spark pass costs (both move them from the JVM to Python), paid once instead of at
#   every pass. An Airflow task runs one epoch per process: there such inputs take the Spark
#   pass at every epoch but the first (whose k-means++ collected them).
# Beyond, one Spark job per epoch.
LOCAL_STEP_VALUES = 1 << 20
LOCAL_STEP_WORK = 1 << 26
HELD_STEP_VALUES = 1 << 24
HELD_STEP_WORK = 1 << 28
# k-means|| (beyond the driver's thresholds): sampling passes, and points sampled per pass per
# cluster (MLlib's initSteps and its 2k per step), Lloyd's passes over the weighted candidates
PARALLEL_INIT_STEPS = 2
PARALLEL_INIT_OVERSAMPLING = 2
PARALLEL_INIT_LLOYD = 30
_PARALLEL_ROUNDS = 1 << 20  # k-means||' draws use rounds of their own (u of seed, round, point)


@dataclass(frozen=True)
class KMeansParams:
    """The parameters, each declared once: its default, description and schema."""

    k: int = param(3, "Number of clusters.", type="integer", minimum=1, maximum=10_000)
    seed: int = param(42, "Seed of the deterministic initialisation (k-means++; k-means|| for inputs too large for "
                      "the driver).", type="integer")
    features: tuple[str, ...] | None = param(
        None, "Feature columns (numeric), or one column of arrays or ML vectors; null: every numeric column but "
        "id, else the input's only array or vector column.", type=["null", "array"], minItems=1)


def _schema(*fields: tuple[str, str]) -> StructType:
    from pyspark.sql.types import ArrayType, DoubleType, IntegerType, LongType, StructField, StructType

    types = {"int": IntegerType(), "long": LongType(), "double": DoubleType(), "doubles": ArrayType(DoubleType())}
    return StructType([StructField(name, types[kind]) for name, kind in fields])


def _doubles(names: Sequence[str]) -> list[tuple[str, str]]:
    return [(n, "double") for n in names]


def _centers(rows) -> Any:
    """The centroids of ``rows`` (the variables' records) as a (k, d) array, by cluster id."""
    import numpy as np

    rows = sorted(rows, key=lambda r: r["cluster_id"])
    return [int(r["cluster_id"]) for r in rows], np.array([r["center"] for r in rows], dtype=float)


class KMeans(IterationBody):
    name = "kmeans"
    title = "k-means"
    params_type = KMeansParams
    heads = {"centroids": ("cluster_id",)}
    metric_aggregations = {"max_shift": "max", "min_cluster_size": "min", "assigned_points": "sum"}
    convergence_metric = "max_shift"
    outputs = ("centroids", "assignments")
    epoch_outputs = ("centroid_history",)
    review = {"centroids": {"keys": ("cluster_id",), "shift": True}}  # how far each centroid moved
    facts = ("input_points", "k")  # StepResult.facts of every epoch
    # checked before each checkpoint commits (include.checks)
    expectations = (
        {"name": "cluster_ids_unique", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "centroids.duplicate_keys", "max_value": 0},
         "description": "one centroid per cluster"},
        {"name": "centroids_finite", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "centroids.*.nonfinite", "max_value": 0},
         "description": "every centroid coordinate is a finite number"},
        {"name": "centroids_count", "type": "expect_column_pair_values_to_be_equal",
         "kwargs": {"column_A": "centroids.rows", "column_B": "k"},
         "description": "k centroids"},
        {"name": "no_empty_cluster", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "min_cluster_size", "min_value": 1},
         "description": "every cluster has a point (set severity warning to let an empty cluster keep its centroid)"},
        {"name": "points_all_assigned", "type": "expect_column_pair_values_to_be_equal",
         "kwargs": {"column_A": "assigned_points", "column_B": "input_points"},
         "description": "each input point is in exactly one cluster"},
    )

    def load(self, raw: DataFrame, params: KMeansParams) -> dict[str, Any]:
        from spark_jobs.bodies.kmeans_input import load_points

        return load_points(raw, params)

    # -- k-means++ ----------------------------------------------------------------------------
    def initial_centroids(self, data: Mapping[str, Any], params: KMeansParams,
                          start: Sequence[Sequence[float]] = ()) -> list[list[float]]:
        """Deterministic k-means++ (see the module docstring): on the driver when the points are
        small enough to collect once (``LOCAL_INIT_VALUES``) or to hold for Lloyd's passes
        (``_points_on_driver``: then the passes of this process run on the driver from the
        first), else one Spark job per round; the same picks either way
        (spark_jobs.bodies.kmeans_kernels.best_candidate). ``start``: centroids already chosen
        (a fork with a larger k): the rounds after them pick the rest."""
        import numpy as np

        from spark_jobs.bodies import kmeans_kernels as K

        points, dim = data["points"].select("__x"), data["dim"]
        chosen: list[np.ndarray] = [np.array(c, dtype=float) for c in start]
        rounds = range(len(chosen), params.k)
        held = _points_on_driver(data, params.k, passes=len(rounds))  # the rounds: worth holding the points
        if held is None and data["num_points"] * dim <= LOCAL_INIT_VALUES:
            held = [_points_matrix(points.toArrow(), dim)]  # collected for k-means++ only
        if held is not None:
            X = np.concatenate(held) if held else np.zeros((0, dim))
            hashes, d2 = K.point_hashes(X), K.min_d2(X, chosen) if chosen else None
            for round_ in rounds:
                best = K.best_candidate(X, hashes, params.seed, round_, d2)
                if best is None:
                    self._too_few_distinct(params, chosen, data)
                chosen.append(X[best[1]].copy())
                new = K.exact_d2(X, chosen[-1])
                d2 = new if d2 is None else np.minimum(d2, new)
            return [c.tolist() for c in chosen]
        if rounds:
            centers = _parallel_init(points, dim, params, chosen)
            if centers is not None:
                return centers
            log.info("k-means||: fewer than k=%d distinct candidates; k-means++ in Spark, one pass per round",
                     params.k)
        for round_ in rounds:
            best = _spark_round(points, dim, params.seed, round_, chosen)
            if best is None:
                self._too_few_distinct(params, chosen, data)
            chosen.append(best)
        return [c.tolist() for c in chosen]

    @staticmethod
    def _too_few_distinct(params: KMeansParams, chosen: list, data: Mapping[str, Any]) -> None:
        # every point is one of the chosen centroids: the input has exactly len(chosen) distinct
        # points (known here at no cost; counting them in load would shuffle)
        raise InputDataError(
            f"k-means with k={params.k} needs at least {params.k} distinct points, the input has "
            f"{len(chosen)} distinct point(s) (of {data['num_points']} points): "
            "k must not exceed the number of distinct points")

    def init(self, data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        from spark_jobs.frames import local_frame

        centroids = self.initial_centroids(data, ctx.params)
        return {"centroids": local_frame(ctx.spark, list(enumerate(centroids)),
                                         _schema(("cluster_id", "int"), ("center", "doubles")))}

    def fork(self, variables: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        """A fork with another ``k``: with fewer clusters, the centroids of the lowest cluster ids
        stay; with more, the initialisation picks the new ones given the parent's (``initial_centroids``
        from them, deterministic from the fork's seed); with the same k, the parent's as they are."""
        from spark_jobs.frames import local_frame, rows_of

        ids, C = _centers(rows_of(variables["centroids"]))
        k = ctx.params.k
        if len(C) == k:
            return dict(variables)
        order = sorted(range(len(ids)), key=lambda i: ids[i])
        kept = [C[i].tolist() for i in order[:k]]
        centers = kept if len(kept) == k else self.initial_centroids(data, ctx.params, start=kept)
        log.info("k-means fork: %d centroids from the parent's %d (k=%d)", len(centers), len(C), k)
        return {"centroids": local_frame(ctx.spark, list(enumerate(centers)),
                                         _schema(("cluster_id", "int"), ("center", "doubles")))}

    # -- an epoch -----------------------------------------------------------------------------
    def step(self, variables: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> StepResult:
        import numpy as np

        from spark_jobs.bodies import kmeans_kernels as K
        from spark_jobs.frames import local_frame, rows_of

        dim = data["dim"]
        ids, C = _centers(rows_of(variables["centroids"]))  # k rows
        k = len(C)
        sums, counts = np.zeros((k, dim)), np.zeros(k, dtype=np.int64)
        held = _points_on_driver(data, k)
        log.info("k-means epoch %d: Lloyd's pass %s (%d points x %d features, k=%d)", ctx.epoch,
                 "on the driver" if held is not None else "in Spark", data["num_points"], dim, k)
        if held is not None:  # small: the driver holds each partition's points (the same sums)
            for X in held:
                part_sums, part_counts = K.partition_sums([X], C, dim)
                at = np.flatnonzero(part_counts)
                K.add_partials(sums, counts, at, part_counts[at], part_sums[at])
        else:  # one pass over the points: each partition's sums and counts per cluster, added here
            partials = data["points"].select("__x").mapInArrow(
                _sums_function(C, dim), "cluster_id int, count long, sums array<double>").toArrow()  # by row of C
            if partials.num_rows:
                part = np.concatenate([c.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim)
                                       for c in partials.column("sums").chunks])
                # the centroid's row in C, partition after partition
                K.add_partials(sums, counts, partials.column("cluster_id").to_numpy(),
                               partials.column("count").to_numpy(), part)
        new_rows = []
        for i, cluster in enumerate(ids):
            # an empty cluster keeps its centroid
            moved = C[i] if counts[i] == 0 else sums[i] / counts[i]
            shift = float(np.sqrt(((moved - C[i]) ** 2).sum()))
            new_rows.append((cluster, moved.tolist(), shift, int(counts[i])))
        # k rows each: local frames (the tail writes them from the driver, no Spark job)
        new = local_frame(ctx.spark, new_rows, _schema(("cluster_id", "int"), ("center", "doubles"),
                                                       ("shift", "double"), ("__size", "long")))
        history = local_frame(ctx.spark, [(ctx.epoch, *r[:-1]) for r in new_rows],
                              _schema(("epoch", "int"), ("cluster_id", "int"), ("center", "doubles"),
                                      ("shift", "double")))
        return StepResult(variables={"centroids": new},
                          metrics={"max_shift": ("centroids", "shift"), "min_cluster_size": ("centroids", "__size"),
                                   "assigned_points": ("centroids", "__size")},
                          outputs={"centroid_history": history},
                          facts={"input_points": data["num_points"], "k": ctx.params.k})

    def finish(self, variables: Mapping[str, DataFrame], data: Mapping[str, Any], ctx: EpochContext) -> dict[str, DataFrame]:
        from pyspark.sql.types import IntegerType, StructField, StructType

        from spark_jobs.frames import local_frame, rows_of

        ids, C = _centers(rows_of(variables["centroids"]))
        if data["vector"] is not None:  # the centroids as the input had the points: one array column
            centroids = local_frame(ctx.spark, [(i, c.tolist()) for i, c in zip(ids, C)],
                                    _schema(("cluster_id", "int"), (data["vector"], "doubles")))
        else:  # a column per feature
            centroids = local_frame(ctx.spark, [(i, *map(float, c)) for i, c in zip(ids, C)],
                                    _schema(("cluster_id", "int"), *_doubles(data["features"])))
        points = data["points"]
        original = [f for f in points.schema.fields if f.name != "__x"]
        assignments = points.mapInArrow(_assign_function(C, data["dim"]),
                                        StructType([*original, StructField("cluster_id", IntegerType())]))
        return {"centroids": centroids, "assignments": assignments}


def _spark_round(points: DataFrame, dim: int, seed: int, round_: int, chosen: list) -> Any:
    """k-means++'s pick of round ``round_`` over the points in Spark (one pass), or None when
    every point is one of the chosen centroids."""
    import numpy as np

    found = points.mapInArrow(_round_function(seed, round_, np.array(chosen), dim),
                              "key double, x array<double>").collect()
    found = [r for r in found if r["key"] is not None]
    if not found:
        return None
    best = max(found, key=lambda r: r["key"])  # an equal key is the same point (the same hash)
    return np.array(best["x"], dtype=float)


def _parallel_init(points: DataFrame, dim: int, params: KMeansParams, start: list) -> list[list[float]] | None:
    """k-means|| (Bahmani et al., MLlib's initialisation) for points the driver does not hold,
    deterministic as k-means++ is here: the first centroid is k-means++'s first pick (unless
    centroids are given: ``start``); each of ``PARALLEL_INIT_STEPS`` Spark passes adds the
    ``PARALLEL_INIT_OVERSAMPLING`` x k distinct points with the largest log(u) / D(x)^2 (a
    weighted sample without replacement, u a hash of seed, step and the point); one more pass
    counts the points nearest each candidate; on the driver, k-means++ over the candidates
    weighted by those counts, then Lloyd's passes over them. ``PARALLEL_INIT_STEPS`` + 2 Spark
    passes, whatever k. None when fewer than k distinct candidates were found (the caller runs
    k-means++ round by round, which names an input with fewer than k distinct points)."""
    import numpy as np

    from spark_jobs.bodies import kmeans_kernels as K

    k = params.k
    candidates = [np.asarray(c, dtype=float) for c in start]
    if not candidates:
        first = _spark_round(points, dim, params.seed, 0, [])
        if first is None:
            return None
        candidates.append(first)
    per_step = PARALLEL_INIT_OVERSAMPLING * k
    for step in range(PARALLEL_INIT_STEPS):
        rows = points.mapInArrow(
            _sample_function(params.seed, _PARALLEL_ROUNDS + step, np.array(candidates), dim, per_step),
            "key double, x array<double>").collect()
        # the partitions' samples merged: the largest keys, a repeated point once, ties by value
        rows = sorted(((r["key"], tuple(r["x"])) for r in rows), key=lambda r: (-r[0], r[1]))
        seen, added = {tuple(c.tolist()) for c in candidates}, 0
        for _key, x in rows:
            if added == per_step:
                break
            if x not in seen:
                seen.add(x)
                candidates.append(np.array(x, dtype=float))
                added += 1
    X = np.array(candidates)
    partials = points.mapInArrow(_sums_function(X, dim), "cluster_id int, count long, sums array<double>").toArrow()
    weights = np.zeros(len(X))
    np.add.at(weights, partials.column("cluster_id").to_numpy(), partials.column("count").to_numpy())
    picked = K.weighted_plus_plus(X, weights, params.seed, k, fixed=len(start), first_round=2 * _PARALLEL_ROUNDS)
    if picked is None:
        return None
    centers = K.weighted_lloyd(X, weights, X[picked], fixed=len(start), iterations=PARALLEL_INIT_LLOYD)
    log.info("k-means||: %d candidates from %d sampling passes, k=%d centroids (weighted k-means++ and "
             "Lloyd's passes over them)", len(X), PARALLEL_INIT_STEPS, k)
    return [c.tolist() for c in centers]


# The points the driver holds for Lloyd's pass, per process: id(points frame) -> (a weak
# reference to the frame, each partition's points as a matrix in partition order, or None when
# one pass over them ran in Spark and none is held yet)
_HELD: dict[int, tuple[Any, list | None]] = {}


def _points_on_driver(data: Mapping[str, Any], k: int, passes: int = 1) -> list | None:
    """Each partition's points as an (n_p, d) matrix, in partition order, when the driver is to
    run the pass (``LOCAL_STEP_VALUES``, ``HELD_STEP_VALUES``): collected once per process (one
    Spark job) and kept while the loaded points are; else None (the pass runs in Spark).
    ``passes``: how many passes over the points the caller makes now (k-means++ makes k): a
    medium input is collected at the first call making several, else at the second call."""
    import weakref

    import numpy as np

    n, dim, points = data["num_points"], data["dim"], data["points"]
    small = n * dim <= LOCAL_STEP_VALUES and n * dim * k <= LOCAL_STEP_WORK
    if not small and (n * dim > HELD_STEP_VALUES or n * dim * k > HELD_STEP_WORK):
        return None
    held = _HELD.get(id(points))
    if held is not None and held[0]() is not points:  # another frame at a reused id
        held = None
    for stale in [key for key, (ref, _m) in _HELD.items() if ref() is None]:
        del _HELD[stale]
    if held is not None and held[1] is not None:
        return held[1]
    if held is None and not small and passes < 2:  # the first pass over them in this process: in Spark
        _HELD[id(points)] = (weakref.ref(points), None)
        return None
    from pyspark.sql import functions as F

    table = points.select(F.spark_partition_id().alias("p"), "__x").toArrow()  # rows in partition order
    matrices = []
    if table.num_rows:
        matrices = np.split(_points_matrix(table, dim), np.flatnonzero(np.diff(table.column("p").to_numpy())) + 1)
    _HELD[id(points)] = (weakref.ref(points), matrices)
    return matrices


def _points_matrix(table: Any, dim: int) -> Any:
    """The ``__x`` column of a collected Arrow table as one (n, d) matrix, in the table's order."""
    import numpy as np

    from spark_jobs.bodies import kmeans_kernels as K

    return np.concatenate([K.matrix(c, dim) for c in table.column("__x").chunks]) if table.num_rows \
        else np.zeros((0, dim))


# -- the functions Spark runs per partition (module level: they pickle small) ---------------------

def _round_function(seed: int, round_: int, chosen, dim: int):
    def best_in_partition(batches):
        import pyarrow as pa

        from spark_jobs.bodies import kmeans_kernels as K

        best = None
        for batch in batches:
            X = K.matrix(batch.column("__x"), dim)
            d2 = K.min_d2(X, chosen) if len(chosen) else None
            found = K.best_candidate(X, K.point_hashes(X), seed, round_, d2)
            if found is not None and (best is None or found[0] > best[0]):
                best = (found[0], X[found[1]].tolist())
        yield pa.RecordBatch.from_pydict({"key": [best[0] if best else None], "x": [best[1] if best else None]},
                                         schema=pa.schema([("key", pa.float64()), ("x", pa.list_(pa.float64()))]))
    return best_in_partition


def _sample_function(seed: int, round_: int, chosen, dim: int, count: int):
    def sample_in_partition(batches):
        import numpy as np
        import pyarrow as pa

        from spark_jobs.bodies import kmeans_kernels as K

        keys, hashes, xs = np.zeros(0), np.zeros(0, dtype=np.uint64), np.zeros((0, dim))
        for batch in batches:  # the partition's best `count` so far, and this batch's
            X = K.matrix(batch.column("__x"), dim)
            h = K.point_hashes(X)
            key = K.sampling_keys(K.uniform(h, seed, round_), K.min_d2(X, chosen))
            top = K.top_distinct(key, h, count)
            keys, hashes, xs = (np.concatenate([keys, key[top]]), np.concatenate([hashes, h[top]]),
                                np.concatenate([xs, X[top]]))
            best = K.top_distinct(keys, hashes, count)
            keys, hashes, xs = keys[best], hashes[best], xs[best]
        yield pa.RecordBatch.from_pydict({"key": keys.tolist(), "x": xs.tolist()},
                                         schema=pa.schema([("key", pa.float64()), ("x", pa.list_(pa.float64()))]))
    return sample_in_partition


def _sums_function(C, dim: int):
    def sums_in_partition(batches):
        import numpy as np
        import pyarrow as pa

        from spark_jobs.bodies import kmeans_kernels as K

        sums, counts = K.partition_sums((K.matrix(b.column("__x"), dim) for b in batches), C, dim)
        ids = np.flatnonzero(counts)
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids.astype(np.int32)), pa.array(counts[ids]),
             pa.FixedSizeListArray.from_arrays(pa.array(sums[ids].ravel()), dim).cast(pa.list_(pa.float64()))],
            names=["cluster_id", "count", "sums"])
    return sums_in_partition


def _assign_function(C, dim: int):
    def assign_in_partition(batches):
        import numpy as np
        import pyarrow as pa

        from spark_jobs.bodies import kmeans_kernels as K

        for batch in batches:
            labels = K.nearest(K.matrix(batch.column("__x"), dim), C).astype(np.int32)
            kept = batch.drop_columns(["__x"])
            yield kept.append_column("cluster_id", pa.array(labels))
    return assign_in_partition
