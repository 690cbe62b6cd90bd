"""k-means per epoch, with durable checkpoints, against Spark MLlib's KMeans per iteration on the
same data and the same warm local session (issue 27's target: at most 1.5x).

Inputs (features as one array column; MLlib reads the same file with the array as a vector):
scikit-learn's digits (1,797 x 64, k=10), 200k x 64 and 1M x 8 generated blobs (k=10).

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
point's assignment written); MLlib, the median ``fit`` of E iterations (k-means|| included, no
assignment written).

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
INPUTS = {"digits": (None, None, 10), "200k-64": (200_000, 64, 10), "1M-8": (1_000_000, 8, 10)}


class _EpochSeconds(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seconds: list[float] = []

    def emit(self, record):
        m = _EPOCH.search(record.getMessage())
        if m:
            self.seconds.append(float(m.group(2)))


def dataset(name: str) -> str:
    """The input as Parquet with ``id`` and ``features`` (array<double>), cached."""
    import numpy as np
    import pandas as pd

    path = os.path.join(DATA, f"kmeans-{name}.parquet")
    if os.path.exists(path):
        return path
    os.makedirs(DATA, exist_ok=True)
    n, d, k = INPUTS[name]
    if n is None:
        from sklearn.datasets import load_digits

        X = load_digits().data.astype(float)
    else:
        rng = np.random.default_rng(7)
        centers = rng.normal(0, 5, size=(k, d))
        X = centers[rng.integers(0, k, size=n)] + rng.normal(0, 1.5, size=(n, d))
    pd.DataFrame({"id": np.arange(len(X)), "features": list(X)}).to_parquet(path, row_group_size=50_000)
    return path


def ours(spark, path: str, k: int, epochs: int, partitions: int, work: str) -> tuple[float, float, float, float]:
    from include.contract import JobConfig
    from spark_jobs.runner import IterationRunner

    scratch = tempfile.mkdtemp(dir=work)
    config = JobConfig(job_id="km", body="kmeans", input=path, checkpoint_root=os.path.join(scratch, "store"),
                       output_path=os.path.join(scratch, "out"), body_params={"k": k, "seed": 3},
                       max_epochs=epochs, tolerance=0.0, num_partitions=partitions)
    handler = _EpochSeconds()
    logging.getLogger("iterations").addHandler(handler)
    try:
        started = time.perf_counter()
        result = IterationRunner(config, spark).run()
        wall = time.perf_counter() - started
    finally:
        logging.getLogger("iterations").removeHandler(handler)
        shutil.rmtree(scratch, ignore_errors=True)
    if len(result.epochs_computed) != epochs:
        raise SystemExit(f"k-means ran {result.epochs_computed}, not {epochs} epochs")
    seconds = handler.seconds[1:] or handler.seconds  # epoch 0 also runs k-means++
    return statistics.median(seconds), statistics.mean(seconds), handler.seconds[0], wall


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", nargs="+", default=list(INPUTS), choices=list(INPUTS))
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
    rows = []
    for name in args.inputs:
        path = dataset(name)
        k = INPUTS[name][2]
        ours(spark, path, k, 2, args.partitions, work)  # warm-up: Python workers, JIT, the input cached
        figures: dict[str, list[float]] = {"ours": [], "ours mean": [], "mllib": [], "epoch 0": [], "ours job": [],
                                           "mllib fit": []}
        for r in range(args.repeat):
            for variant in (["ours", "mllib"] if r % 2 == 0 else ["mllib", "ours"]):
                if variant == "ours":
                    s, mean, first, wall = ours(spark, path, k, args.epochs, args.partitions, work)
                    figures["ours mean"].append(mean)
                    figures["epoch 0"].append(first)
                    figures["ours job"].append(wall)
                    print(f"  {name} ours  round {r + 1}: {s:.3f} s per epoch (mean {mean:.3f}; epoch 0 {first:.3f}, "
                          f"job {wall:.2f})", flush=True)
                else:
                    s, fit = mllib(spark, path, k, args.epochs, args.partitions)
                    figures["mllib fit"].append(fit)
                    print(f"  {name} mllib round {r + 1}: {s:.3f} s per iteration (fit {fit:.2f})", flush=True)
                figures[variant].append(s)
        rows.append((name, *(statistics.median(figures[v])
                             for v in ("ours", "ours mean", "mllib", "epoch 0", "ours job", "mllib fit"))))
    shutil.rmtree(work, ignore_errors=True)
    print("\n| input | ours, s per epoch (durable; median, mean) | MLlib, s per iteration | ours / MLlib (median, mean) |")
    print("|---|---|---|---|")
    for name, a, mean, b, *_ in rows:
        print(f"| {name} | {a:.3f}, {mean:.3f} | {b:.3f} | {a / b:.2f}x, {mean / b:.2f}x |")
    print(f"\nThe whole job, {args.epochs} epochs / iterations with the initialisation:\n")
    print("| input | ours: epoch 0 (k-means++ and Lloyd), s | ours: `run()`, s | MLlib: `fit`, s | ours / MLlib |")
    print("|---|---|---|---|---|")
    for name, *_, first, job, fit in rows:
        print(f"| {name} | {first:.3f} | {job:.2f} | {fit:.2f} | {job / fit:.2f}x |")


if __name__ == "__main__":
    main()
