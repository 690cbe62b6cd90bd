"""The day's machine in two figures, to read beside any time measured on it: the same machine
has run the same code 1.5-2x slower from one day to the next (bench/RESULTS.md).

- **PageRank epoch**: a warm epoch of PageRank on a 1M-edge graph (``bench.common.graph``),
  through the library runner (``run_job``, its own local Spark driver), with the JVM options of
  the test suite's short-lived JVMs fixed (``tests.jvm.OPTIONS``: the client compiler, the
  serial collector, no class-data archive): the median of the epochs after the first, which
  loads and caches the input. CPU-bound on the JVM and the driver.
- **Python loop**: a fixed pure-Python loop in this process, best of three.

    .venv/bin/python -m bench.calibrate              # about two minutes here; nothing else running
    .venv/bin/python -m bench.calibrate --epochs 6   # more epochs in the median

docs/testing.md says where the figures are kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT, graph, machine  # noqa: E402

EDGES = 1_000_000
_EPOCH = re.compile(r"job \S+ epoch (\d+): .* ([0-9.]+)s (?:committed|adopted)")


def python_loop() -> float:
    """Seconds of a fixed pure-Python loop, best of three."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(5_000_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - started)
    return best


def pagerank_epochs(edges: int, epochs: int) -> list[float]:
    """The seconds of each epoch of a ``run_job`` of PageRank on the cached graph of ``edges``."""
    from tests.jvm import OPTIONS

    path, _ = graph(edges)
    with tempfile.TemporaryDirectory(prefix="iterations-calibrate-") as work:
        cmd = [sys.executable, "-m", "spark_jobs.run_job", "--job-id", "calibrate", "--body", "pagerank",
               "--input", path, "--checkpoint-root", os.path.join(work, "store"),
               "--output-path", os.path.join(work, "out"), "--max-epochs", str(epochs), "--tolerance", "0"]
        env = {**os.environ, "PYTHONPATH": ROOT, "JAVA_TOOL_OPTIONS": OPTIONS}
        for name in ("ITERATIONS_DRIVER_PID", "SPARK_DRIVER_MEMORY"):
            env.pop(name, None)
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    found = [(int(m.group(1)), float(m.group(2))) for line in (done.stdout + done.stderr).splitlines()
             if (m := _EPOCH.search(line))]
    if done.returncode != 0 or len(found) != epochs:
        raise SystemExit(f"run_job exited {done.returncode} after {len(found)} of {epochs} epochs:\n"
                         f"{(done.stdout + done.stderr)[-4000:]}")
    return [seconds for _, seconds in sorted(found)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=EDGES, help=f"the graph's edges (default {EDGES:,})")
    parser.add_argument("--epochs", type=int, default=4, help="epochs to run, the first not counted (default 4)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error(f"--epochs {args.epochs}: at least 2 (the first epoch is not counted)")
    loop = python_loop()
    seconds = pagerank_epochs(args.edges, args.epochs)
    figures = {"date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "edges": args.edges,
               "first_epoch_s": round(seconds[0], 2), "warm_epoch_s": round(statistics.median(seconds[1:]), 2),
               "warm_epochs": len(seconds) - 1, "python_loop_s": round(loop, 3)}
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"calibration {figures['date']}, {machine()}")
    print(f"  PageRank {args.edges:,} edges, JVM options of the tests' short-lived JVMs: warm epoch "
          f"{figures['warm_epoch_s']:.2f} s (median of {figures['warm_epochs']}), first epoch "
          f"{figures['first_epoch_s']:.1f} s")
    print(f"  Python loop: {loop:.3f} s (best of 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
