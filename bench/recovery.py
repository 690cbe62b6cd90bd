"""Recovery (issue 8, benchmark 4): work lost and time to resume after the driver is killed in
the middle of epoch k, for the library runner and for the bare driver loop.

* library: ``python -m spark_jobs.run_job`` is SIGKILLed (whole process group, as when a
  machine dies) while epoch k's tail writes its partitions (failpoint
  ``tail.partition_written@epoch=k@partition=1=kill-driver``); ``run_job`` is then run again
  and resumes from checkpoint k-1;
* bare loop: the ``localCheckpoint()`` loop (``bench.common.bare_loop``) in a process that is
  SIGKILLed at the same point of epoch k; it has nothing to resume from, so it starts over.

Printed per k: the epochs computed again (work lost), the time from the restart until the
epoch that was killed is done again (time to resume), and the total time against the same
job without a failure. Run::

    .venv/bin/python -m bench.recovery --edges 1000000 --epochs 10 --kill-at 2 5 8
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, ROOT, graph, machine  # noqa: E402

_LIB_EPOCH = re.compile(r"job \S+ epoch (\d+): .* committed")
_BARE_EPOCH = re.compile(r"^bare epoch (\d+) done")


def _env(failpoints: str | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("ITERATIONS_DRIVER_PID", None)
    env.pop("ITERATIONS_FAILPOINTS", None)
    if failpoints:
        env["ITERATIONS_FAILPOINTS"] = failpoints
    return env


def _run(cmd, env, pattern) -> tuple[int, float, dict[int, float], list[str]]:
    """Run to its end (or its death); (exit code, seconds, {epoch: seconds since start}, output)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: kill-driver kills only it
    done_at, lines = {}, []
    for line in proc.stdout:
        lines.append(line)
        m = pattern.search(line)
        if m:
            done_at[int(m.group(1))] = time.perf_counter() - started
    code = proc.wait()
    return code, time.perf_counter() - started, done_at, lines


def library_cmd(path, work, epochs, partitions):
    return [sys.executable, "-m", "spark_jobs.run_job", "--job-id", "recovery", "--body", "pagerank", "--input", path,
            "--checkpoint-root", os.path.join(work, "store"), "--output-path", os.path.join(work, "out"),
            "--max-epochs", str(epochs), "--tolerance", "0", "--num-partitions", str(partitions)]


def bare_cmd(path, work, epochs, partitions, kill_at=None):
    return [sys.executable, "-m", "bench.recovery", "--bare-child", path, os.path.join(work, "out"),
            str(epochs), str(partitions), str(-1 if kill_at is None else kill_at)]


def bare_child(path, output, epochs, partitions, kill_at) -> int:
    """The bare loop, printing a line per epoch; SIGKILLs itself in epoch ``kill_at`` after the
    epoch's work is computed (where the library's tail would write), as a dying machine would."""
    import logging

    from pyspark.sql import functions as F

    from include.contract import EpochContext, InputSpec, resolve_body
    from spark_jobs.session import get_spark

    logging.basicConfig(level=logging.WARNING)
    spark = get_spark("bench-recovery-bare")
    body = resolve_body("pagerank")
    params = body.parse_params({})
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    data = body.load(spark.read.parquet(path), params)
    ctx = EpochContext(0, partitions, params, spark, {}, InputSpec(path), {})
    variables = body.init(data, ctx)
    for epoch in range(epochs):
        new = body.step(variables, data, ctx).variables["ranks"].localCheckpoint(eager=True)
        if epoch == kill_at:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        new.agg(F.sum("delta")).first()
        variables = {"ranks": new.drop("delta")}
        print(f"bare epoch {epoch} done", flush=True)
    variables["ranks"].write.mode("overwrite").parquet(os.path.join(output, "ranks"))
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--bare-child":
        path, output, epochs, partitions, kill_at = sys.argv[2:7]
        return bare_child(path, output, int(epochs), int(partitions), int(kill_at))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--kill-at", type=int, nargs="*", default=[2, 5, 8])
    p.add_argument("--partitions", type=int, default=4)
    args = p.parse_args(argv)

    os.makedirs(DATA, exist_ok=True)
    path, exact = graph(args.edges)
    print(f"machine: {machine()}; PageRank {exact:,} edges, {args.epochs} epochs, {args.partitions} partitions",
          flush=True)
    rows = []

    def fresh():
        return tempfile.mkdtemp(prefix="bench-recovery-", dir=DATA)

    work = fresh()
    code, lib_clean, _, out = _run(library_cmd(path, work, args.epochs, args.partitions), _env(), _LIB_EPOCH)
    shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        raise SystemExit("".join(out[-30:]))
    work = fresh()
    code, bare_clean, _, out = _run(bare_cmd(path, work, args.epochs, args.partitions), _env(), _BARE_EPOCH)
    shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        raise SystemExit("".join(out[-30:]))
    print(f"  without failure: library {lib_clean:.1f} s, bare loop {bare_clean:.1f} s", flush=True)

    for k in args.kill_at:
        work = fresh()
        fp = f"tail.partition_written@epoch={k}@partition=1=kill-driver"
        code1, t1, done1, _ = _run(library_cmd(path, work, args.epochs, args.partitions), _env(fp), _LIB_EPOCH)
        code2, t2, done2, out2 = _run(library_cmd(path, work, args.epochs, args.partitions), _env(), _LIB_EPOCH)
        shutil.rmtree(work, ignore_errors=True)
        if code1 != -signal.SIGKILL or code2 != 0:
            raise SystemExit(f"library kill at {k}: exits {code1}, {code2}\n{''.join(out2[-30:])}")
        summary = json.loads(out2[-1])
        recomputed = sorted(set(summary["epochs_computed"]) & set(done1))  # done before the kill, done again
        lib = (len(recomputed) + 1, done2.get(k, float("nan")), t1 + t2)  # +1: the epoch in flight
        work = fresh()
        code1, b1, bdone1, _ = _run(bare_cmd(path, work, args.epochs, args.partitions, k), _env(), _BARE_EPOCH)
        code2, b2, bdone2, out2 = _run(bare_cmd(path, work, args.epochs, args.partitions), _env(), _BARE_EPOCH)
        shutil.rmtree(work, ignore_errors=True)
        if code1 != -signal.SIGKILL or code2 != 0:
            raise SystemExit(f"bare kill at {k}: exits {code1}, {code2}\n{''.join(out2[-30:])}")
        bare = (len(bdone1) + 1, bdone2[k], b1 + b2)
        rows.append((k, summary["restored_from"], lib, bare))
        print(f"  kill in epoch {k}: library resumed from checkpoint {summary['restored_from']}, recomputed "
              f"{lib[0]} epoch(s), back at epoch {k} {lib[1]:.1f} s after the restart, total {lib[2]:.1f} s; "
              f"bare loop recomputed {bare[0]}, back at epoch {k} after {bare[1]:.1f} s, total {bare[2]:.1f} s",
              flush=True)

    print(f"\nRecovery after a SIGKILL of the driver in epoch k: PageRank {exact:,} edges, {args.epochs} epochs, "
          f"{machine()}")
    print("| k | library: resumed from | epochs recomputed (incl. the one in flight) | restart -> epoch k done | "
          "total / failure-free | bare loop: epochs recomputed | restart -> epoch k done | total / failure-free |")
    print("|---|---|---|---|---|---|---|---|")
    for k, restored, lib, bare in rows:
        print(f"| {k} | checkpoint {restored} | {lib[0]} | {lib[1]:.1f} s | {lib[2]:.1f} s / {lib_clean:.1f} s | "
              f"{bare[0]} | {bare[1]:.1f} s | {bare[2]:.1f} s / {bare_clean:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
