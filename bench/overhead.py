"""Checkpoint overhead (issue 8, benchmark 1): the library runner against the driver loop a user
writes today, side by side in one run, on one warm Spark session.

For each input, four variants run the same body for the same number of epochs:

* (a) ``bare``: the loop with ``localCheckpoint()`` per epoch: nothing durable, the limit;
* (b) ``bare+parquet``: the loop writing each epoch's variables to Parquet and reading them
  back: durable by hand, the peer;
* (c) ``library local`` and ``library s3``: ``IterationRunner`` with full checkpointing (tail
  with SHA-256 per object, reports, alignment, data checks, atomic manifest commit, GC,
  final checkpoint and two-phase publication of the outputs) to the local store, and to the S3
  store on moto_server (HTTP on loopback).

Each variant's time is end to end: load the input, the epochs, the outputs written. A warm-up
run of every variant on a small input comes first (Python workers), then, for each input, a
round of every variant at that size that is not counted (the JIT compiles the code paths of
the real size: whichever variant ran first at a size was 10-30% slower). ``--repeat N`` runs
the variants N times, in alternating order (forward, backward, ...), and reports each one's
median: the JVM keeps getting faster over a run, which favours whatever runs last, and the
alternating order puts every variant early and late. Each variant's CPU seconds (the driver,
the Spark JVM and its Python workers; not moto_server) are printed beside its wall seconds. On
this kind of machine both vary by up to +-15% between two runs of one variant: compare medians
of several runs (every run's figure is printed too). Run::

    .venv/bin/python -m bench.overhead                                  # 250k, 1M, 4M edges; k-means 1M
    .venv/bin/python -m bench.overhead --edges 1000000 --kmeans-points 0 --no-s3
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

from bench.common import bare_loop, graph, machine, points, start_moto, tree_cpu_seconds  # noqa: E402

_EPOCH_LINE = re.compile(r"epoch (\d+): .* ([0-9.]+)s (?:committed|adopted)")


class _EpochTimes(logging.Handler):
    """Collects the per-epoch seconds the runner logs."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.seconds: list[float] = []

    def emit(self, record):
        m = _EPOCH_LINE.search(record.getMessage())
        if m:
            self.seconds.append(float(m.group(2)))


def library_run(spark, body, input_path, params, epochs, partitions, root, output, store_options, job_id,
                handoff=True, overlap_commits=True):
    from include.contract import JobConfig
    from spark_jobs.runner import IterationRunner

    cfg = JobConfig(job_id=job_id, body=body, input=input_path, checkpoint_root=root, output_path=output,
                    body_params=params, max_epochs=epochs, tolerance=0.0, num_partitions=partitions)
    handler = _EpochTimes()
    logger = logging.getLogger("iterations")
    logger.addHandler(handler)
    try:
        started = time.perf_counter()
        result = IterationRunner(cfg, spark, store_options=store_options, handoff=handoff,
                                 overlap_commits=overlap_commits).run()
        total = time.perf_counter() - started
    finally:
        logger.removeHandler(handler)
    if result.status.value != "TERMINATED" or len(result.epochs_computed) != epochs:
        raise SystemExit(f"library run {job_id} ended {result.status} after {result.epochs_computed}")
    return total, handler.seconds


def run_variants(spark, body, input_path, params, epochs, partitions, work, moto_url, repeat, tag,
                 no_handoff=False, warmup_round=True, exclude=(), in_order=False):
    """{variant: Figures} for one input (``warmup_round``: one uncounted run of each first)."""
    variants = ["bare", "bare+parquet", "library local"] + (["library s3"] if moto_url else []) + \
        (["library local, no handoff"] if no_handoff else []) + \
        ((["library local, in order"] + (["library s3, in order"] if moto_url else [])) if in_order else [])
    runs: dict[str, list[tuple[float, float, float]]] = {}
    rounds = ([-1] if warmup_round else []) + list(range(repeat))
    for r in rounds:
        for variant in (variants if r % 2 == 0 else variants[::-1]):
            scratch = tempfile.mkdtemp(prefix="bench-", dir=work)
            cpu = tree_cpu_seconds(exclude)
            if variant.startswith("bare"):
                out = bare_loop(spark, body, input_path, params, epochs, partitions,
                                os.path.join(scratch, "durable") if variant == "bare+parquet" else None,
                                os.path.join(scratch, "out"))
                total, per_epoch = out.total, out.epochs
            elif variant.startswith("library local"):
                total, per_epoch = library_run(spark, body, input_path, params, epochs, partitions,
                                               os.path.join(scratch, "store"), os.path.join(scratch, "out"),
                                               {}, f"{tag}-{r}-local", handoff="no handoff" not in variant,
                                               overlap_commits="in order" not in variant)
            else:
                prefix = f"s3://bench/{tag}-{r}{'-in-order' if 'in order' in variant else ''}"
                total, per_epoch = library_run(spark, body, input_path, params, epochs, partitions,
                                               f"{prefix}/store", f"{prefix}/out", {"endpoint_url": moto_url},
                                               f"{tag}-{r}-s3", overlap_commits="in order" not in variant)
            cpu = tree_cpu_seconds(exclude) - cpu
            shutil.rmtree(scratch, ignore_errors=True)
            median = statistics.median(per_epoch) if per_epoch else float("nan")
            which = "warm-up" if r < 0 else f"run {r + 1}"
            print(f"    {variant:<14} {which}: {total:7.2f} s total, {median:6.3f} s median epoch, "
                  f"{cpu:7.2f} CPU s", flush=True)
            if r >= 0:
                runs.setdefault(variant, []).append((total, median, cpu))
    return {v: Figures([t for t, _, _ in r], statistics.median(m for _, m, _ in r), [c for _, _, c in r])
            for v, r in runs.items()}


class Figures:
    """One variant's runs: wall seconds and CPU seconds of each, the median epoch."""

    def __init__(self, totals, median_epoch, cpu):
        self.totals, self.median_epoch, self.cpu = totals, median_epoch, cpu

    @property
    def median(self) -> float:
        return statistics.median(self.totals)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)


def _ratio_table(results, figure, unit: str, digits: int) -> None:
    """One row per input: the variants' median ``figure`` (``median`` or ``median_cpu``) and the
    ratios."""
    nan = Figures([float("nan")], float("nan"), [float("nan")])
    print("| input | (a) bare | (b) bare+parquet | (c) library local | (c) library s3 | "
          "(c local)/(a) | (c local)/(b) | (c s3)/(a) | (c s3)/(b) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, fig in results:
        a, b, cl, cs = (getattr(fig.get(v, nan), figure)
                        for v in ("bare", "bare+parquet", "library local", "library s3"))
        print(f"| {label} | " + " | ".join(f"{x:.{digits}f}{unit}" for x in (a, b, cl, cs)) + " | "
              f"{cl / a:.2f} | {cl / b:.2f} | {cs / a:.2f} | {cs / b:.2f} |")


def print_table(title, results):
    print(f"\n{title}")
    _ratio_table(results, "median", " s", 2)
    print("\nCPU seconds (the driver, the Spark JVM and its Python workers), median of the same runs:")
    _ratio_table(results, "median_cpu", "", 1)
    for label, fig in results:
        print(f"{label}, each run's wall seconds: " + "; ".join(
            f"{v} " + " ".join(f"{t:.1f}" for t in f.totals) for v, f in fig.items()))
        print(f"{label}, median seconds per epoch: " + ", ".join(f"{v} {f.median_epoch:.3f}" for v, f in fig.items()))
        if "library local, no handoff" in fig:
            off = fig["library local, no handoff"].median
            print(f"{label}, library local without the warm-session handoff (every epoch reads its checkpoint "
                  f"back): {off:.2f} s, /(a) {off / fig['bare'].median:.2f}, /(b) {off / fig['bare+parquet'].median:.2f}")
        for store in ("local", "s3"):
            if f"library {store}, in order" in fig:
                order, behind = fig[f"library {store}, in order"], fig[f"library {store}"]
                print(f"{label}, library {store} committing each epoch before the next (overlap_commits=False): "
                      f"{order.median:.2f} s, /(a) {order.median / fig['bare'].median:.2f}; commits behind the next "
                      f"epoch {behind.median:.2f} s: {behind.median / order.median:.2f}x; median epoch "
                      f"{order.median_epoch:.3f} -> {behind.median_epoch:.3f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, nargs="*", default=[250_000, 1_000_000, 4_000_000])
    p.add_argument("--kmeans-points", type=int, default=1_000_000, help="0: no k-means")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-s3", action="store_true", help="skip the S3 store (moto_server)")
    p.add_argument("--no-warmup-round", action="store_true",
                   help="count every run (by default each input's first round of the variants is not counted)")
    p.add_argument("--in-order-too", action="store_true",
                   help="also run the library committing each epoch before the next (overlap_commits=False)")
    p.add_argument("--no-handoff-too", action="store_true",
                   help="also run the library without the warm-session handoff (reads each checkpoint back)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("iterations").setLevel(logging.INFO)
    logging.getLogger("iterations").propagate = False

    from spark_jobs.session import get_spark

    moto, moto_url = start_moto() if not args.no_s3 else (None, None)
    work = tempfile.mkdtemp(prefix="bench-overhead-")
    spark = get_spark("bench-overhead")
    print(f"machine: {machine()}; {args.partitions} partitions, {args.epochs} epochs", flush=True)
    try:
        warm, _ = graph(20_000)
        print("warm-up (20k edges, 2 epochs):", flush=True)
        exclude = (moto.pid,) if moto is not None else ()
        run_variants(spark, "pagerank", warm, {}, 2, args.partitions, work, moto_url, 1, "warm", warmup_round=False,
                     exclude=exclude)
        results = []
        for edges in args.edges:
            path, exact = graph(edges)
            print(f"PageRank, {exact:,} edges:", flush=True)
            results.append((f"PageRank {exact:,} edges", run_variants(
                spark, "pagerank", path, {}, args.epochs, args.partitions, work, moto_url, args.repeat, f"pr{edges}",
                no_handoff=args.no_handoff_too, warmup_round=not args.no_warmup_round, exclude=exclude,
                in_order=args.in_order_too)))
        if args.kmeans_points:
            path = points(args.kmeans_points)
            print(f"k-means, {args.kmeans_points:,} points, k=4:", flush=True)
            results.append((f"k-means {args.kmeans_points:,} points", run_variants(
                spark, "kmeans", path, {"k": 4}, args.epochs, args.partitions, work, moto_url, args.repeat,
                f"km{args.kmeans_points}", no_handoff=args.no_handoff_too, warmup_round=not args.no_warmup_round,
                exclude=exclude, in_order=args.in_order_too)))
        print_table(f"end-to-end seconds (median of {args.repeat}, alternating order), {args.epochs} epochs, "
                    f"{machine()}", results)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if moto is not None:
            moto.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
