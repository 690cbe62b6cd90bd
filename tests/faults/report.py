"""The full fault-injection sweep: every scenario of tests/faults/sweep.py over several seeds,
then one row per scenario (runs, faults injected, lost, duplicated, wrong results, refused,
epochs recomputed by recoveries), plus the fuzzed DAG params (refused bad inputs).

    .venv/bin/python -m tests.faults.report                 # seeds 1 2 3, everything
    .venv/bin/python -m tests.faults.report --seeds 1 2 3 4 5 --only "kill in epoch" "zombie attempt"
    .venv/bin/python -m tests.faults.report --no-s3 --no-processes --no-fuzz
    .venv/bin/python -m tests.faults.report --airflow --seeds 1 2   # also each failure point of the
                                                                   # Airflow path alone (airflow dags test)
    .venv/bin/python -m tests.faults.report --airflow-only --no-fuzz --seeds 1   # the Airflow rows alone

Runs on a local Spark session, a moto_server it starts for the S3 scenario, and temporary
directories it deletes. Exit status 1 if any row has lost, duplicated or wrong work.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from tests.faults.sweep import PROCESS_SCENARIOS, S3_SCENARIO, SCENARIOS, Outcome, s3_faults

COLUMNS = ("runs", "faults", "lost", "duplicated", "wrong", "refused", "recomputed")


def table(rows: dict[str, list[Outcome]], fuzz: dict[str, int] | None) -> str:
    width = max([34, *(len(name) for name in rows)])
    head = f"{'scenario':{width}} {'seeds':>5} " + " ".join(f"{c:>10}" for c in COLUMNS)
    lines = [head, "-" * len(head)]
    for name, outs in rows.items():
        sums = {c: sum(getattr(o, c) for o in outs) for c in COLUMNS}
        sums["recomputed"] = max((o.recomputed for o in outs), default=0)  # the worst recovery
        lines.append(f"{name:{width}} {len(outs):>5} " + " ".join(f"{sums[c]:>10}" for c in COLUMNS))
    if fuzz is not None:
        lines.append(f"{'fuzzed DAG params (bad inputs)':{width}} {'-':>5} {fuzz['runs']:>10} {'-':>10} "
                     f"{0:>10} {0:>10} {fuzz['escaped']:>10} {fuzz['refused']:>10} {'-':>10}")
    lines.append("recomputed: the most epochs one recovery computed again (max over seeds)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--only", nargs="+", default=None, help="scenario names (default: all)")
    p.add_argument("--no-s3", action="store_true", help="skip the S3 scenario (moto_server)")
    p.add_argument("--no-processes", action="store_true", help="skip two run_job processes at once")
    p.add_argument("--no-fuzz", action="store_true", help="skip fuzzing the DAG params")
    p.add_argument("--fuzz-examples", type=int, default=300)
    p.add_argument("--airflow", action="store_true",
                   help="also every failure point of tests/faults/airflow_sweep.py alone, through airflow dags test "
                        "(10-20 s per point and seed)")
    p.add_argument("--airflow-only", action="store_true",
                   help="only the Airflow path's rows (--airflow without the library's scenarios)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    from tests.conftest import S3_ENV

    os.environ.update(S3_ENV)
    from spark_jobs.session import get_spark

    scenarios = dict(SCENARIOS)
    if not args.no_processes:
        scenarios.update(PROCESS_SCENARIOS)
    if not args.no_s3:
        scenarios[S3_SCENARIO] = None
    if args.airflow_only:
        args.airflow, scenarios = True, {}
    if args.only:
        unknown = sorted(set(args.only) - set(scenarios))
        if unknown:
            raise SystemExit(f"unknown scenario(s) {unknown}; known: {sorted(scenarios)}")
        scenarios = {k: v for k, v in scenarios.items() if k in args.only}
    spark = get_spark("iterations-fault-sweep")
    moto = None
    rows: dict[str, list[Outcome]] = {}
    failed = False
    started = time.monotonic()
    try:
        if S3_SCENARIO in scenarios:
            from tests.conftest import start_moto_server

            moto, endpoint = start_moto_server()
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="sweep")
        for name, scenario in scenarios.items():
            for seed in args.seeds:
                work = Path(tempfile.mkdtemp(prefix="fault-sweep-"))
                t0 = time.monotonic()
                try:
                    if name == S3_SCENARIO:
                        out = s3_faults(spark, work, seed, moto_endpoint=endpoint, bucket="sweep")
                    else:
                        out = scenario(spark, work, seed)
                except Exception as e:  # a scenario that breaks counts as wrong, and is shown
                    traceback.print_exc()
                    out = Outcome(name, seed, wrong=1, detail=f"{type(e).__name__}: {e}"[:300])
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                rows.setdefault(name, []).append(out)
                failed |= not out.ok
                print(f"[{time.monotonic() - started:6.0f}s] {name} seed {seed}: "
                      + " ".join(f"{c}={getattr(out, c)}" for c in COLUMNS)
                      + f" ({time.monotonic() - t0:.1f}s) {out.detail[:160]}", flush=True)
        if args.airflow:
            failed |= airflow_rows(rows, args.seeds, started)
        fuzz = None
        if not args.no_fuzz:
            from tests.faults.fuzz_params import fuzz_all

            fuzz = fuzz_all(examples=args.fuzz_examples)
            failed |= fuzz["escaped"] > 0
    finally:
        if moto is not None:
            moto.terminate()
        spark.stop()
    print()
    print(table(rows, fuzz))
    print(f"\n{sum(len(v) for v in rows.values())} scenario runs in {time.monotonic() - started:.0f}s")
    return 1 if failed else 0


def add_row(rows: dict[str, list[Outcome]], out: Outcome, started: float, t0: float) -> bool:
    """Add a DAG run's outcome to its row and print it; True if it lost, duplicated or got
    something wrong."""
    out.facts = {}  # the run's log and what it recorded: not kept for the table
    rows.setdefault(out.scenario, []).append(out)
    print(f"[{time.monotonic() - started:6.0f}s] {out.scenario} seed {out.seed}: "
          + " ".join(f"{c}={getattr(out, c)}" for c in COLUMNS)
          + f" ({time.monotonic() - t0:.1f}s) {out.detail[:160]}", flush=True)
    return not out.ok


def airflow_rows(rows: dict[str, list[Outcome]], seeds: list[int], started: float) -> bool:
    """Each failure point of the Airflow path alone (a seeded epoch and partition), one
    ``airflow dags test`` run per point and seed, in an Airflow home of its own; True if any
    run lost, duplicated or got something wrong."""
    import random

    from tests.faults.airflow_sweep import POINTS, SHAPES, airflow_env, point_for, reached, run_dag, run_events_dag

    home = Path(tempfile.mkdtemp(prefix="fault-sweep-airflow-"))
    for sub in ("fired", "connect"):
        (home / sub).mkdir()
    (home / "armed").write_text("")
    env = airflow_env(home / "airflow", home / "connect", home / "fired", home / "armed")
    from tests import warm_airflow
    from tests.conftest import ROOT

    server = warm_airflow.WarmAirflow(env, ROOT)  # each run forked from one warm Airflow
    warm_airflow.SERVERS.append(server)
    failed = False
    try:
        # the three shapes of the DAG: commit_in_head on (iteration_dag's default), off, and overlap_commits
        def prefix(shape: str) -> str:  # the default shape's rows as before the others: "airflow: <point>"
            return "airflow: " if shape == "default shape" else f"airflow, {shape}: "

        for template, shape in ((t, s) for t in POINTS for s in SHAPES if reached([t], *SHAPES[s])):
            commit_in_head, overlap = SHAPES[shape]
            name = prefix(shape) + template.split("@")[0]
            for seed in seeds:
                point = point_for(template, random.Random(f"{template}:{seed}"))
                work = Path(tempfile.mkdtemp(prefix="fault-sweep-", dir=home))
                t0 = time.monotonic()
                try:
                    out = run_dag(env, work, seed, [point], name, commit_in_head=commit_in_head,
                                  overlap_commits=overlap)
                    if out.faults != 1:
                        out.wrong += 1
                        out.detail += f"; {point} fired {out.faults} times"
                except Exception as e:
                    traceback.print_exc()
                    out = Outcome(name, seed, wrong=1, detail=f"{type(e).__name__}: {e}"[:300])
                failed |= add_row(rows, out, started, t0)
        # the coordinator-events DAG (a subtask-only and a coordinator-only failure), each shape
        for shape, (commit_in_head, overlap) in SHAPES.items():
            name = prefix(shape) + "coordinator events"
            for seed in seeds:
                work = Path(tempfile.mkdtemp(prefix="fault-sweep-", dir=home))
                t0 = time.monotonic()
                try:
                    out = run_events_dag(env, work, seed, commit_in_head, name, overlap_commits=overlap)
                    if out.faults != 2:
                        out.wrong += 1
                        out.detail += f"; {out.faults} of the 2 failures fired"
                except Exception as e:
                    traceback.print_exc()
                    out = Outcome(name, seed, wrong=1, detail=f"{type(e).__name__}: {e}"[:300])
                failed |= add_row(rows, out, started, t0)
    finally:
        import subprocess

        warm_airflow.SERVERS.remove(server)
        server.close()
        subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], env=env, capture_output=True,
                       timeout=120)
        shutil.rmtree(home, ignore_errors=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
