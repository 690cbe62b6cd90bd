"""Scaling (issue 8, benchmark 3): time and peak memory of the library runner versus input size
and versus the number of epochs, and the checkpoint bytes stored versus epochs with retention.

Each run is ``python -m spark_jobs.run_job`` in a process of its own (a fresh Spark driver, as
in production), with the resident memory of its whole process tree (Python driver, Spark JVM,
Python workers) sampled every 0.2 s. Times are taken from the run's own per-epoch log lines
(the JVM start and the input load are shown apart). The epochs sweep is one long run whose
cumulative time, peak memory so far and stored checkpoint bytes are read at every epoch
boundary; ``retain_last`` (3 by default) bounds what the store keeps. Run::

    .venv/bin/python -m bench.scaling                      # 250k, 1M, 4M edges x 10 epochs; 1M x 30 epochs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, ROOT, PeakMemory, dir_bytes, graph, machine  # noqa: E402

_EPOCH = re.compile(r"job \S+ epoch (\d+): .* ([0-9.]+)s committed")


def run(path: str, epochs: int, partitions: int, work: str, retain: int, watch_store: bool = False):
    """One run_job process; returns (wall seconds, per-epoch seconds, peak bytes, samples), where
    samples are (epoch, seconds since start, peak bytes so far, store bytes) at each epoch line."""
    store = os.path.join(work, "store")
    cmd = [sys.executable, "-m", "spark_jobs.run_job", "--job-id", "scale", "--body", "pagerank", "--input", path,
           "--checkpoint-root", store, "--output-path", os.path.join(work, "out"), "--max-epochs", str(epochs),
           "--tolerance", "0", "--num-partitions", str(partitions), "--retain-last", str(retain)]
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("ITERATIONS_DRIVER_PID", None)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    per_epoch, samples, tail = [], [], []
    with PeakMemory(proc.pid) as memory:
        for line in proc.stdout:
            tail = (tail + [line])[-40:]
            m = _EPOCH.search(line)
            if m:
                per_epoch.append(float(m.group(2)))
                samples.append((int(m.group(1)), time.perf_counter() - started, memory.peak,
                                dir_bytes(store) if watch_store else 0))
        code = proc.wait()
    wall = time.perf_counter() - started
    if code != 0 or len(per_epoch) != epochs:
        print("".join(tail), file=sys.stderr)
        raise SystemExit(f"run_job exited {code} after {len(per_epoch)} epoch(s)")
    summary = json.loads(tail[-1])
    if summary["status"] != "TERMINATED":
        raise SystemExit(f"run_job ended {summary}")
    return wall, per_epoch, memory.peak, samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, nargs="*", default=[250_000, 1_000_000, 4_000_000])
    p.add_argument("--epochs", type=int, default=10, help="epochs of the size sweep")
    p.add_argument("--long-edges", type=int, default=1_000_000, help="input of the epochs sweep")
    p.add_argument("--long-epochs", type=int, default=30, help="epochs of the epochs sweep (0: skip it)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--retain-last", type=int, default=3)
    args = p.parse_args(argv)

    os.makedirs(DATA, exist_ok=True)
    print(f"machine: {machine()}; {args.partitions} partitions, retain_last={args.retain_last}", flush=True)
    sizes = []
    for edges in args.edges:
        path, exact = graph(edges)
        work = tempfile.mkdtemp(prefix="bench-scale-", dir=DATA)
        try:
            wall, per_epoch, peak, _ = run(path, args.epochs, args.partitions, work, args.retain_last)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        later = per_epoch[1:]  # epoch 0 also loads and caches the input: shown apart
        sizes.append((exact, wall, per_epoch[0], sum(later), sorted(later)[len(later) // 2], peak))
        print(f"  {exact:,} edges: {wall:.1f} s wall, epoch 0 {per_epoch[0]:.1f} s, epochs 1.. {sum(later):.1f} s, "
              f"peak {peak / 2**20:.0f} MiB", flush=True)

    print(f"\nversus input size: PageRank, {args.epochs} epochs, {machine()}")
    print("| edges | wall (run_job: JVM start, load, epochs, finish) | epoch 0 (with the input load) | "
          "epochs 1.. | median epoch | epochs 1.. per edge / smallest's | peak memory (process tree) |")
    print("|---|---|---|---|---|---|---|")
    base = sizes[0][3] / sizes[0][0]
    for exact, wall, first, epochs_s, median, peak in sizes:
        print(f"| {exact:,} | {wall:.1f} s | {first:.1f} s | {epochs_s:.1f} s | {median:.2f} s | "
              f"{epochs_s / exact / base:.2f} | {peak / 2**20:.0f} MiB |")
    by_edges = {e: s for e, _w, _f, s, _m, _p in sizes}
    exacts = sorted(by_edges)
    for small, big in zip(exacts, exacts[1:]):
        print(f"{big:,} vs {small:,} edges ({big / small:.2f}x the edges): epochs 1.. take "
              f"{by_edges[big] / by_edges[small]:.2f}x the time")

    if args.long_epochs:
        path, exact = graph(args.long_edges)
        work = tempfile.mkdtemp(prefix="bench-scale-", dir=DATA)
        try:
            wall, per_epoch, peak, samples = run(path, args.long_epochs, args.partitions, work, args.retain_last,
                                                 watch_store=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"\nversus epochs: PageRank {exact:,} edges, {args.long_epochs} epochs in one run, "
              f"retain_last={args.retain_last}")
        print("| epoch | seconds since start | epoch seconds | peak memory so far | checkpoint store bytes |")
        print("|---|---|---|---|---|")
        for (epoch, since, peak_so_far, stored), seconds in zip(samples, per_epoch):
            if epoch < 3 or (epoch + 1) % 5 == 0:
                print(f"| {epoch} | {since:.1f} | {seconds:.2f} | {peak_so_far / 2**20:.0f} MiB | {stored:,} |")
        first, last = per_epoch[1: 1 + len(per_epoch) // 3], per_epoch[-(len(per_epoch) // 3):]
        stored = [s[3] for s in samples]
        print(f"mean epoch, first third (after epoch 0) {sum(first) / len(first):.2f} s, "
              f"last third {sum(last) / len(last):.2f} s; "
              f"store bytes after epoch {args.retain_last + 1}: max {max(stored[args.retain_last:]):,}, "
              f"min {min(stored[args.retain_last:]):,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
