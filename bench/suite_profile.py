"""Where a run of the test suite spent its time and CPU: worker-seconds and CPU-seconds per area,
per module and per resource, and CPU-seconds per kind of process.

    python -m bench.suite_profile [DIR] [--top N] [--json]

DIR is what the suite's profiling plugin wrote (tests/profiling.py; ``./run.sh test`` writes
``.local/suite-profile`` and prints this report at the end). Worker-seconds are the wall time of
the tests on their worker (setup, call and teardown: a module's servers count in its first
test's setup); CPU-seconds are what the sampler charged to a test (every process of its worker
while it ran). The machine's busy CPU is the whole machine's, from ``/proc/stat``: the suite's
own when nothing else runs. A report, not a check: it never fails a run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections import defaultdict

from tests.profiling import DEFAULT_DIR

#: areas of the suite, for the budget in docs/testing.md: the first whose test matches
AREAS = (
    ("stack", lambda m: m == "tests/dags/test_stack.py"),
    ("cluster", lambda m: m == "tests/dags/test_cluster.py"),
    ("sweeps", lambda m: m.startswith("tests/faults/") or m in ("tests/dags/test_fault_sweep.py",
                                                               "tests/dags/test_params_fuzz.py")),
    ("unit", lambda m: m.startswith("tests/unit/")),
    ("integration", lambda m: m.startswith("tests/integration/")),
    ("DAG runs", lambda m: m.startswith("tests/dags/")),
)

#: resources a test can use, the costliest first: a test counts once, under the first it uses
#: (by its fixtures, or by the processes it started)
RESOURCES = (
    ("the native stack", lambda fx, cpu: "stack" in fx),
    ("the standalone cluster", lambda fx, cpu: "cluster" in fx),
    ("the view's API server", lambda fx, cpu: "api_server" in fx),
    ("cold airflow commands", lambda fx, cpu: cpu.get("python: cold airflow command", 0) >= 5),
    ("warm Airflow and its Connect server", lambda fx, cpu: "airflow_env" in fx or "connect_url" in fx),
    ("Spark drivers of their own", lambda fx, cpu: sum(v for k, v in cpu.items() if k in (
        "jvm: local session driver", "jvm: spark-submit epoch driver", "jvm: Spark Connect server")) >= 2),
    ("the worker's Spark session", lambda fx, cpu: "spark" in fx),
    ("moto_server only", lambda fx, cpu: "moto_endpoint" in fx or "bucket" in fx),
    ("no server (pure Python)", lambda fx, cpu: True),
)


def area_of(module: str) -> str:
    return next(name for name, match in AREAS if match(module))


def load(where: str) -> tuple[dict, dict]:
    """Each test's phases and fixtures (nodeid -> record), and cpu.json (empty if missing)."""
    tests: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(where, "tests-*.jsonl"))):
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                t = tests.setdefault(rec["nodeid"], {"wall": 0.0, "fixtures": [], "worker": rec["worker"],
                                                     "outcome": "passed"})
                t["wall"] += rec["duration"]
                t.setdefault("phases", {})[rec["when"]] = rec["duration"]
                if rec.get("fixtures"):
                    t["fixtures"] = rec["fixtures"]
                if rec["outcome"] != "passed" and not (rec["outcome"] == "skipped" and rec["when"] != "setup"):
                    t["outcome"] = rec["outcome"]
    cpu_path = os.path.join(where, "cpu.json")
    cpu = json.load(open(cpu_path)) if os.path.exists(cpu_path) else {}
    return tests, cpu


def summarise(tests: dict, cpu: dict) -> dict:
    by_test_cpu = cpu.get("by_test", {})
    areas, modules, resources = defaultdict(lambda: [0.0, 0.0, 0]), defaultdict(lambda: [0.0, 0.0, 0]), \
        defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, t in tests.items():
        module = nodeid.split("::", 1)[0]
        kinds = by_test_cpu.get(nodeid, {})
        spent = sum(kinds.values())
        resource = next(name for name, uses in RESOURCES if uses(set(t["fixtures"]), kinds))
        for table, key in ((areas, area_of(module)), (modules, module), (resources, resource)):
            table[key][0] += t["wall"]
            table[key][1] += spent
            table[key][2] += 1
    return {"areas": areas, "modules": modules, "resources": resources}


def _table(title: str, rows: dict, total_wall: float, limit: int | None = None) -> list[str]:
    out = [f"\n{title}", f"  {'':48} {'worker-s':>9} {'share':>6} {'CPU-s':>8} {'tests':>6}"]
    ordered = sorted(rows.items(), key=lambda kv: -kv[1][0])
    for name, (wall, spent, n) in ordered[:limit]:
        share = 100 * wall / total_wall if total_wall else 0.0
        out.append(f"  {name[:48]:48} {wall:9.0f} {share:5.1f}% {spent:8.0f} {n:6d}")
    if limit and len(ordered) > limit:
        rest = ordered[limit:]
        out.append(f"  {f'({len(rest)} more modules)':48} {sum(r[1][0] for r in rest):9.0f}")
    return out


def report(where: str, top: int = 25) -> str:
    tests, cpu = load(where)
    if not tests:
        return f"no suite profile in {where} (run the suite first: ./run.sh test)"
    s = summarise(tests, cpu)
    total_wall = sum(t["wall"] for t in tests.values())
    lines = [f"Suite profile ({where}): {len(tests)} tests, {total_wall:.0f} worker-seconds in tests"]
    if cpu:
        busy, wall = cpu["machine_busy_cpu"], cpu["wall"]
        lines.append(f"  run: {wall / 60:.1f} min wall; machine busy CPU {busy:.0f} s = {busy / 60:.1f} CPU-minutes "
                     f"({busy / wall if wall else 0:.2f} of {cpu['cores']} cores on average); sampled and charged "
                     f"to processes: {cpu['sampled_cpu']:.0f} s")
    lines += _table("By area", s["areas"], total_wall)
    lines += _table("By resource (each test once, under the costliest it uses)", s["resources"], total_wall)
    lines += _table(f"By module (the {top} longest)", s["modules"], total_wall, top)
    if cpu:
        outside = {t: sum(k.values()) for t, k in cpu.get("by_test", {}).items() if t not in tests}
        if outside:
            lines.append("\nCPU-seconds charged to no test (servers between tests, processes of no worker)")
            for name, spent in sorted(outside.items(), key=lambda kv: -kv[1]):
                lines.append(f"  {name[:56]:56} {spent:8.0f}")
        lines.append("\nCPU-seconds by kind of process")
        for kind, spent in cpu["by_kind"].items():
            if spent >= 1:
                lines.append(f"  {kind[:56]:56} {spent:8.0f}")
    slow = sorted(tests.items(), key=lambda kv: -kv[1]["wall"])[:15]
    lines.append("\nThe 15 longest tests (worker-seconds, CPU-seconds)")
    for nodeid, t in slow:
        spent = sum(cpu.get("by_test", {}).get(nodeid, {}).values())
        lines.append(f"  {t['wall']:7.0f} {spent:7.0f}  {nodeid}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("where", nargs="?", default=DEFAULT_DIR, help=f"the profile's directory (default {DEFAULT_DIR})")
    parser.add_argument("--top", type=int, default=25, help="modules to list (default 25)")
    parser.add_argument("--json", action="store_true", help="the summary as JSON instead of tables")
    parser.add_argument("--newer-than", type=float, default=None, metavar="EPOCH",
                        help="report only a profile written after this time (seconds since 1970): "
                             "./run.sh test's own run, not an older one")
    args = parser.parse_args(argv)
    written = os.path.join(args.where, "cpu.json")
    if args.newer_than is not None and not (os.path.exists(written) and os.path.getmtime(written) >= args.newer_than):
        print(f"no suite profile of this run in {args.where} (pytest ran with --suite-profile elsewhere or '')")
        return 0
    if args.json:
        tests, cpu = load(args.where)
        s = summarise(tests, cpu)
        print(json.dumps({k: {n: {"worker_seconds": round(w, 1), "cpu_seconds": round(c, 1), "tests": t}
                              for n, (w, c, t) in v.items()} for k, v in s.items()}, indent=1))
    else:
        print(report(args.where, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
