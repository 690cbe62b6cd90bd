"""``python -m tests.chaos [--seed N] [--faults N] [--kinds a,b]``: start the native stack in a
folder of its own, run three jobs at once under a seeded schedule of faults (tests.chaos.run),
audit, stop the stack, and print the table: faults by kind with their time to recover, and
each job's lost, duplicated, wrong and garbage counts. Exits 1 when anything was lost,
duplicated or wrong, a store kept garbage, a fault could not be cleared or a process of the
stack was left behind."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from tests.chaos.faults import KINDS, Durations, plan


def _span(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    try:
        a, b = float(low), float(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH seconds, got {text!r}") from None
    if not 0 <= a <= b:
        raise argparse.ArgumentTypeError(f"expected 0 <= LOW <= HIGH, got {text!r}")
    return a, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=12, help="how many faults (default 12)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--gap", type=_span, default=Durations.gap, metavar="LOW:HIGH",
                        help="seconds between a fault's clearing and the next fault")
    parser.add_argument("--s3-stopped", type=_span, default=Durations.s3_stopped, metavar="LOW:HIGH")
    parser.add_argument("--disk-full", type=_span, default=Durations.disk_full, metavar="LOW:HIGH")
    parser.add_argument("--home", default=None, help="the stack's folder (default: a new temporary one)")
    parser.add_argument("--report", default=None, help="write the report as JSON here too")
    args = parser.parse_args(argv)
    if args.faults < 1:
        parser.error(f"--faults must be at least 1, got {args.faults}")
    durations = Durations(s3_stopped=args.s3_stopped, disk_full=args.disk_full, gap=args.gap)
    try:
        faults = plan(args.seed, args.faults, tuple(k for k in args.kinds.split(",") if k), durations)
    except ValueError as e:
        parser.error(str(e))

    from stack.services import Stack
    from tests.chaos.run import Chaos, leftovers, save, table
    from tests.dags.conftest import SETTINGS

    home = os.path.abspath(args.home or tempfile.mkdtemp(prefix="iterations-chaos-"))
    trace = os.path.join(home, "trace.jsonl")
    began = time.monotonic()

    def say(text: str) -> None:
        print(f"[chaos {time.monotonic() - began:7.1f}s] {text}", flush=True)

    from include.process import failpoints

    stack = Stack(os.path.join(home, "stack"), extra_env={**SETTINGS, failpoints.TRACE_ENV: trace})
    say(f"starting the stack in {stack.home}; {len(faults)} faults: {', '.join(f.kind for f in faults)}")
    stack.start()
    report: dict = {}
    try:
        chaos = Chaos(stack, os.path.join(stack.home, "inputs", "chaos"), args.seed, trace, log=say)
        report = chaos.run(faults)
    finally:
        stack.stop()
        report["left_behind"] = leftovers(stack.home)
    print(table(report))
    if report["left_behind"]:
        print("left behind:\n  " + "\n  ".join(report["left_behind"]))
    if args.report:
        save(report, args.report)
    print(json.dumps({k: report[k] for k in ("lost", "duplicated", "wrong", "garbage")}))
    bad = report["lost"] or report["duplicated"] or report["wrong"] or report["garbage"] or report["errors"] \
        or report["left_behind"] or any(f["recovered_in"] is None and not f["skipped"] for f in report["faults"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
