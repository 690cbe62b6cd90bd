"""k-means per epoch, with durable checkpoints, against Spark MLlib's KMeans per iteration on the
same data and the same warm local session (issue 27's target: at most 1.5x).

Inputs (features as one array column; MLlib reads the same file with the array as a vector):
scikit-learn's digits (1,797 x 64, k=10), 200k x 64 and 1M x 8 generated blobs (k=10); 10M x 16
overlapping blobs (k=10, only when named: 1.3 GB of Parquet, ``SPARK_DRIVER_MEMORY=10g``).

* ours: ``IterationRunner`` to a local store, ``max_epochs`` epochs at tolerance 0, the median
  of the per-epoch seconds the runner logs (plan, the Spark pass, the tail, alignment, the data
  checks, the commit) from epoch 1 (epoch 0 also runs k-means++), and their mean (which counts
  the epoch that takes the points out of Spark's cache, where the driver holds them);
* MLlib: ``KMeans(maxIter=E)`` and ``KMeans(maxIter=1)`` (k-means|| with the same seed, so
  both start from the same centroids), three fits of each after one of each to warm up, in
  alternating order, and per iteration ``(median t(E) - median t(1)) / (E - 1)``, which cancels
  the initialisation and the set-up; the iterations each fit ran are checked
  (``summary.numIter``).

Also the whole job: ours, epoch 0 (k-means++ and the first Lloyd pass) and the wall time of
``run()`` (loading and checking the input, the E epochs, finishing: the centroids and every
point's assignment written); MLlib, the median ``fit`` of E iterations (k-means|| included, the
points cached beforehand, no assignment written), and MLlib's whole job as its user writes it,
which does the work ``run()`` does but the checkpoints, checks and publication: the same file
read, its features made vectors and cached, ``fit``, ``transform`` and every point's assignment
(the input's columns and ``cluster_id``) and the centroids written as Parquet.

Where ours' whole job goes (from the runner's log lines and their times): loading and checking
the input (epoch 0's "static input"), k-means++ and the first Lloyd pass (epoch 0's "step and
tail"), the rest of epoch 0 (its plan, checks and commit), epochs 1 to E-1, the finish (the
assignments and centroids written, the final checkpoint and its checks, up to its commit), the
publication of the outputs, and what is left (opening the job: owner, input pin).

Each figure is the median of ``--repeat`` rounds (default 3), the variants in alternating
order. Run::

    .venv/bin/python -m bench.kmeans
    .venv/bin/python -m bench.kmeans --inputs digits --epochs 8 --repeat 1
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, machine  # noqa: E402

_EPOCH = re.compile(r"epoch (\d+): .* ([0-9.]+)s (?:committed|adopted)")
_PHASES = re.compile(r"epoch 0 attempt \S+: static input ([0-9.]+)s .*step and tail ([0-9.]+)s")
_FINAL = re.compile(r"final checkpoint \d+ committed")
# name: (points, features, k, spread of the blobs' centres)
INPUTS = {"digits": (None, None, 10, None), "200k-64": (200_000, 64, 10, 5.0), "1M-8": (1_000_000, 8, 10, 5.0),
          # overlapping blobs: Lloyd's centres still move after the epochs asked for (well separated
          # ones stop moving after 3 iterations at this size, and MLlib's fit with them)
          "10M-16": (10_000_000, 16, 10, 1.0)}
#: the parts of ours' whole job, in order (see the module docstring)
PARTS = ("input load and check", "k-means++ and first pass", "rest of epoch 0", "epochs 1..E-1", "finish",
         "publication", "other")


class _EpochSeconds(logging.Handler):
    """The runner's per-epoch seconds, epoch 0's phases and when the last epoch and the final
    checkpoint committed (the records' times)."""

    def __init__(self):
        super().__init__()
        self.seconds: list[float] = []
        self.epoch0: tuple[float, float] | None = None
        self.last_epoch_at = self.final_at = None

    def emit(self, record):
        message = record.getMessage()
        m = _EPOCH.search(message)
        if m:
            self.seconds.append(float(m.group(2)))
            self.last_epoch_at = record.created
        m = _PHASES.search(message)
        if m:
            self.epoch0 = (float(m.group(1)), float(m.group(2)))
        if _FINAL.search(message):
            self.final_at = record.created

    def parts(self, started: float, ended: float) -> dict[str, float]:
        """The whole job (from ``started`` to ``ended``, ``time.time()``) in ``PARTS``."""
        if self.epoch0 is None or self.last_epoch_at is None or self.final_at is None:
            raise SystemExit("the runner's log lines changed: bench.kmeans cannot split the job into its parts")
        load, first = self.epoch0
        parts = {"input load and check": load, "k-means++ and first pass": first,
                 "rest of epoch 0": self.seconds[0] - load - first, "epochs 1..E-1": sum(self.seconds[1:]),
                 "finish": self.final_at - self.last_epoch_at, "publication": ended - self.final_at}
        parts["other"] = (ended - started) - sum(parts.values())
        return parts


def dataset(name: str) -> str:
    """The input as Parquet with ``id`` and ``features`` (array<double>), cached."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    n, d, k, spread = INPUTS[name]
    path = os.path.join(DATA, f"kmeans-{name}.parquet" if spread in (None, 5.0) else f"kmeans-{name}-{spread:g}.parquet")
    if os.path.exists(path):
        return path
    os.makedirs(DATA, exist_ok=True)
    if n is None:
        from sklearn.datasets import load_digits

        X = load_digits().data.astype(float)
    else:
        rng = np.random.default_rng(7)
        centers = rng.normal(0, spread, size=(k, d))
        X = centers[rng.integers(0, k, size=n)] + rng.normal(0, 1.5, size=(n, d))
    features = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1]).cast(pa.list_(pa.float64()))
    pq.write_table(pa.table({"id": np.arange(len(X)), "features": features}), path, row_group_size=50_000)
    return path


def ours(spark, path: str, k: int, epochs: int, partitions: int,
         work: str) -> tuple[float, float, float, float, dict[str, float]]:
    from include.contract import JobConfig
    from spark_jobs.runner import IterationRunner

    scratch = tempfile.mkdtemp(dir=work)
    config = JobConfig(job_id="km", body="kmeans", input=path, checkpoint_root=os.path.join(scratch, "store"),
                       output_path=os.path.join(scratch, "out"), body_params={"k": k, "seed": 3},
                       max_epochs=epochs, tolerance=0.0, num_partitions=partitions)
    handler = _EpochSeconds()
    logging.getLogger("iterations").addHandler(handler)
    try:
        started = time.time()
        result = IterationRunner(config, spark).run()
        ended = time.time()
    finally:
        logging.getLogger("iterations").removeHandler(handler)
        shutil.rmtree(scratch, ignore_errors=True)
    if len(result.epochs_computed) != epochs:
        raise SystemExit(f"k-means ran {result.epochs_computed}, not {epochs} epochs")
    seconds = handler.seconds[1:] or handler.seconds  # epoch 0 also runs k-means++
    return (statistics.median(seconds), statistics.mean(seconds), handler.seconds[0], ended - started,
            handler.parts(started, ended))


def mllib(spark, path: str, k: int, epochs: int, partitions: int) -> tuple[float, float]:
    from pyspark.ml.clustering import KMeans
    from pyspark.ml.functions import array_to_vector

    points = spark.read.parquet(path).select(array_to_vector("features").alias("features")) \
        .repartition(partitions).cache()
    points.count()
    seconds: dict[int, list[float]] = {1: [], epochs: []}
    for r in range(4):  # the first round warms up (not counted); fits of 1 and E iterations alternate
        for iterations in ((1, epochs) if r % 2 == 0 else (epochs, 1)):
            started = time.perf_counter()
            model = KMeans(k=k, maxIter=iterations, tol=0.0, seed=3).fit(points)
            if r > 0:
                seconds[iterations].append(time.perf_counter() - started)
            if model.summary.numIter != iterations:
                raise SystemExit(f"MLlib ran {model.summary.numIter} iterations, not {iterations}")
    points.unpersist()
    return (statistics.median(seconds[epochs]) - statistics.median(seconds[1])) / (epochs - 1), \
        statistics.median(seconds[epochs])


def mllib_job(spark, path: str, k: int, epochs: int, partitions: int, work: str) -> float:
    """MLlib's whole job (see the module docstring), seconds from reading the input to the
    outputs written."""
    from pyspark.ml.clustering import KMeans
    from pyspark.ml.functions import array_to_vector

    out = tempfile.mkdtemp(dir=work)
    started = time.perf_counter()
    points = spark.read.parquet(path).withColumn("__v", array_to_vector("features")).repartition(partitions).cache()
    model = KMeans(k=k, maxIter=epochs, tol=0.0, seed=3, featuresCol="__v", predictionCol="cluster_id").fit(points)
    model.transform(points).drop("__v").write.parquet(os.path.join(out, "assignments"))
    spark.createDataFrame([(i, [float(x) for x in c]) for i, c in enumerate(model.clusterCenters())],
                          "cluster_id int, centroid array<double>").write.parquet(os.path.join(out, "centroids"))
    seconds = time.perf_counter() - started
    points.unpersist()
    shutil.rmtree(out, ignore_errors=True)
    if model.summary.numIter != epochs:
        raise SystemExit(f"MLlib ran {model.summary.numIter} iterations, not {epochs}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", nargs="+", default=["digits", "200k-64", "1M-8"], choices=list(INPUTS),
                        help="10M-16 (1.3 GB of Parquet, generated once) only when named")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().handlers[0].setLevel(logging.WARNING)  # the runner's INFO lines: counted, not printed
    logging.getLogger("iterations").setLevel(logging.INFO)

    from spark_jobs.session import get_spark

    spark = get_spark("bench-kmeans")
    work = tempfile.mkdtemp(prefix="bench-kmeans-")
    print(machine())
    rows, breakdown = [], []
    for name in args.inputs:
        path = dataset(name)
        k = INPUTS[name][2]
        ours(spark, path, k, 2, args.partitions, work)  # warm-up: Python workers, JIT, the input cached
        figures: dict[str, list[float]] = {"ours": [], "ours mean": [], "mllib": [], "epoch 0": [], "ours job": [],
                                           "mllib fit": [], "mllib job": [], **{part: [] for part in PARTS}}
        for r in range(args.repeat):
            for variant in (["ours", "mllib"] if r % 2 == 0 else ["mllib", "ours"]):
                if variant == "ours":
                    s, mean, first, wall, parts = ours(spark, path, k, args.epochs, args.partitions, work)
                    for part, seconds in parts.items():
                        figures[part].append(seconds)
                    figures["ours mean"].append(mean)
                    figures["epoch 0"].append(first)
                    figures["ours job"].append(wall)
                    print(f"  {name} ours  round {r + 1}: {s:.3f} s per epoch (mean {mean:.3f}; epoch 0 {first:.3f}, "
                          f"job {wall:.2f})", flush=True)
                else:
                    s, fit = mllib(spark, path, k, args.epochs, args.partitions)
                    job = mllib_job(spark, path, k, args.epochs, args.partitions, work)
                    figures["mllib fit"].append(fit)
                    figures["mllib job"].append(job)
                    print(f"  {name} mllib round {r + 1}: {s:.3f} s per iteration (fit {fit:.2f}, job {job:.2f})",
                          flush=True)
                figures[variant].append(s)
        rows.append((name, *(statistics.median(figures[v])
                             for v in ("ours", "ours mean", "mllib", "epoch 0", "ours job", "mllib fit", "mllib job"))))
        breakdown.append((name, [statistics.median(figures[part]) for part in PARTS]))
    shutil.rmtree(work, ignore_errors=True)
    print("\n| input | ours, s per epoch (durable; median, mean) | MLlib, s per iteration | ours / MLlib (median, mean) |")
    print("|---|---|---|---|")
    for name, a, mean, b, *_rest in rows:
        print(f"| {name} | {a:.3f}, {mean:.3f} | {b:.3f} | {a / b:.2f}x, {mean / b:.2f}x |")
    print(f"\nThe whole job, {args.epochs} epochs / iterations with the initialisation:\n")
    print("| input | ours: epoch 0 (k-means++ and Lloyd), s | ours: `run()`, s | MLlib: `fit`, s | ours / `fit` "
          "| MLlib: whole job, s | ours / MLlib's job |")
    print("|---|---|---|---|---|---|---|")
    for name, *_rest, first, job, fit, whole in rows:
        print(f"| {name} | {first:.3f} | {job:.2f} | {fit:.2f} | {job / fit:.2f}x | {whole:.2f} | {job / whole:.2f}x |")
    print("\nWhere ours' whole job goes, s (medians of each part; see the module docstring):\n")
    print("| input | " + " | ".join(PARTS) + " |")
    print("|---|" + "---|" * len(PARTS))
    for name, seconds in breakdown:
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in seconds) + " |")


if __name__ == "__main__":
    main()
