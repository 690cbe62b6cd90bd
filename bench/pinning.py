"""What pinning an input costs (include.publication.pinned_inputs, docs/design.md rule 9): per plan (the cheap
check: a ``stat`` per file), per run's start (the full check: every local file hashed), and once
at the log's first plan (listing and hashing the input), on the PageRank graphs the other
benchmarks use (``bench.common.graph``), beside the warm epoch of the same graph when asked.

    .venv/bin/python -m bench.pinning                       # 1M edges
    .venv/bin/python -m bench.pinning --edges 1000000 50000000 --rounds 5

Medians of ``--rounds`` rounds; the full check is measured with this process's hash cache
emptied each round (a new task or runner process starts with none). Nothing else should run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import graph  # noqa: E402


def measure(path: str, rounds: int) -> dict[str, float]:
    from include.contract import InputSpec
    from include.publication import check_input, forget_hashes, pin_input
    from include.store import LocalStore

    spec = InputSpec(path)
    pin, cheap, full = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(tmp)
        for i in range(rounds):
            forget_hashes()  # a new process: nothing hashed yet
            t = time.perf_counter()
            pinned = pin_input(store, f"job-{i}", spec)
            pin.append(time.perf_counter() - t)
            t = time.perf_counter()
            check_input(pinned, f"job-{i}")
            cheap.append(time.perf_counter() - t)
            forget_hashes()
            t = time.perf_counter()
            check_input(pinned, f"job-{i}", full=True)
            full.append(time.perf_counter() - t)
    size = sum(f["size"] for f in pinned.files)
    return {"bytes": size, "files": len(pinned.files), "first_pin_s": statistics.median(pin),
            "per_plan_ms": statistics.median(cheap) * 1000, "per_resume_s": statistics.median(full),
            "hash_mib_per_s": size / (1 << 20) / statistics.median(full)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for edges in args.edges:
        path, exact = graph(edges)
        figures = {"edges": exact, **measure(path, args.rounds)}
        print(f"{exact:,} edges ({figures['bytes'] / (1 << 20):.1f} MiB, {figures['files']} file(s)): first pin "
              f"{figures['first_pin_s']:.3f} s, per plan {figures['per_plan_ms']:.3f} ms, per resume (every byte "
              f"hashed) {figures['per_resume_s']:.3f} s ({figures['hash_mib_per_s']:.0f} MiB/s); medians of "
              f"{args.rounds}")
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
