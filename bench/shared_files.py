"""Bytes a checkpoint writes when unchanged partitions are shared (docs/how-it-works.md#shared-files):
connected components on the generated graph, run past its convergence (no tolerance, a fixed
number of epochs), once with ``full_checkpoint_every=1`` (every checkpoint full: what every
epoch wrote before shared files) and once with the default (10), on one warm local session,
the two interleaved round after round. Prints, per epoch of the last round, the bytes each wrote
against its checkpoint's whole size, and the median job time of each. Run::

    .venv/bin/python -m bench.shared_files --edges 1000000 --epochs 14 --rounds 3 [--s3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import graph, machine, start_moto  # noqa: E402


def run(spark, path: str, epochs: int, full_every: int, work: str, s3: str | None = None,
        tag: str = "") -> tuple[float, list[tuple[int, int, int, bool]]]:
    """Seconds of the job, and per epoch (epoch, bytes written, bytes the checkpoint references,
    whether the variables changed). ``s3``: the endpoint of the store (a ``bench`` bucket)."""
    from include.contract import JobConfig
    from include.epoch.job import IterationJob
    from spark_jobs.runner import IterationRunner

    scratch = tempfile.mkdtemp(dir=work)
    root = f"s3://bench/shared-{tag}/store" if s3 else os.path.join(scratch, "store")
    options = {"endpoint_url": s3} if s3 else {}
    config = JobConfig(job_id="cc", body="components", input=path, checkpoint_root=root,
                       max_epochs=epochs, tolerance=None, num_partitions=4, retain_last=epochs + 2,
                       full_checkpoint_every=full_every)
    started = time.perf_counter()
    IterationRunner(config, spark, store_options=options).run()
    seconds = time.perf_counter() - started
    log = IterationJob(config, store_options=options).log
    rows = []
    previous = None
    for cid in log.checkpoint_ids():
        m = log.load(cid, verify="none")
        if m.kind != "epoch":
            continue
        own = f"jobs/cc/attempts/{m.checkpoint_id:010d}/{m.attempt_id}/"
        files = [f for ds in m.variables.values() for f in ds.files]
        digests = sorted(f.sha256 for f in files)
        rows.append((m.epoch, sum(f.size for f in files if f.key.startswith(own)), sum(f.size for f in files),
                     digests != previous))
        previous = digests
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--s3", action="store_true", help="the store on moto_server (started here) instead of a local directory")
    args = parser.parse_args()
    from spark_jobs.session import get_spark

    moto, url = start_moto() if args.s3 else (None, None)  # before the session: its workers take the environment

    spark = get_spark("bench-shared-files")
    work = tempfile.mkdtemp(prefix="bench-shared-")
    print(machine())
    path, _nodes = graph(args.edges)
    run(spark, path, 3, 10, work, url, "warm-up")
    times: dict[int, list[float]] = {1: [], 10: []}
    rows: dict[int, list] = {}
    for r in range(args.rounds):
        for every in (1, 10):
            seconds, rows[every] = run(spark, path, args.epochs, every, work, url, f"{r}-{every}")
            times[every].append(seconds)
            print(f"  round {r + 1}: full_checkpoint_every={every}: {seconds:.1f} s", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    if moto is not None:
        moto.terminate()
    print(f"\nconnected components, {args.edges:,} edges, {args.epochs} epochs, 4 partitions, "
          f"{'S3 (moto_server)' if args.s3 else 'local'} store")
    print("| epoch | variables changed | written, every=1 | written, every=10 | of a full checkpoint |")
    print("|---|---|---|---|---|")
    for (epoch, w1, full, changed), (_e, w10, _f, _c) in zip(rows[1], rows[10]):
        print(f"| {epoch} | {'yes' if changed else 'no'} | {w1:,} | {w10:,} | {w10 / full:.1%} |")
    settled = [w10 / full for (_e, w10, full, changed) in rows[10] if not changed and _e % 10]
    if settled:
        print(f"after the variables settled (epochs not a multiple of 10): at most {max(settled):.1%} "
              "of a full checkpoint written per epoch")
    m1, m10 = statistics.median(times[1]), statistics.median(times[10])
    print(f"job seconds, median of {args.rounds}: every=1 {m1:.1f}, every=10 {m10:.1f} (ratio {m10 / m1:.2f})")


if __name__ == "__main__":
    main()
