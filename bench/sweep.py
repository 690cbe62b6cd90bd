"""Scaling to 50M edges (issue 48, item 2): PageRank, connected components and k-means at the
sizes users bring before they move to a cluster, through the library (``run_job``, its own
local Spark driver) and through ``airflow dags test`` on the embedded default (a warm Spark
Connect server shared by the runs), with the settings derived from each input's size
(include.contract.sizing: nothing is passed but the job).

Per run: the median epoch after the first, the first epoch (it loads and caches the input), the
finish (the last epoch's commit until the run ended: final checkpoint, publication), the peak
resident memory of every process tree by kind (the Spark JVM; the Python workers it forks; the
Python process that runs the job: ``run_job``'s driver, or the Airflow task process, which under
``dags test`` runs every task in itself), the bytes one epoch's checkpoint holds, and the median
epoch per input unit relative to the smallest size of the same body and runner (1.00: linear).
The Spark Connect server outlives a run: its peak is the peak so far (sizes run in ascending
order). Run::

    .venv/bin/python -m bench.sweep                          # everything: about an hour here
    .venv/bin/python -m bench.sweep --only pagerank --sizes 1000000 5000000 --runners library
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import DATA, ROOT, graph, machine  # noqa: E402

# (body, input unit, default sizes, params)
JOBS = {
    "pagerank": ("edges", [1_000_000, 5_000_000, 20_000_000, 50_000_000], {}),
    "components": ("edges", [5_000_000, 20_000_000], {}),
    "kmeans": ("points x 16", [10_000_000], {"k": 8}),
}
FEATURES = 16
KINDS = ("JVM", "Python workers", "job / task process")
_EPOCH = re.compile(r"job \S+ epoch (\d+): .* ([0-9.]+)s (?:committed|adopted)")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")
_TASK = re.compile(r"\[DAG TEST\] (starting|end task) task_id=(\S+)")


def points(n: int, seed: int = 7) -> tuple[str, int]:
    """``n`` points of ``FEATURES`` features in 8 blobs (id, f0..f15), written in chunks of 1M
    rows (never the whole table in memory), cached."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(DATA, f"points-{n}-{FEATURES}-{seed}.parquet")
    if not os.path.exists(path):
        rng = np.random.default_rng(seed)
        centers = rng.uniform(-20, 20, size=(8, FEATURES))
        tmp = path + ".tmp"
        writer = None
        for start in range(0, n, 1_000_000):
            m = min(1_000_000, n - start)
            xy = centers[rng.integers(0, len(centers), m)] + rng.normal(0, 2.0, size=(m, FEATURES))
            table = pa.table({"id": np.arange(start, start + m, dtype=np.int64),
                              **{f"f{i}": xy[:, i] for i in range(FEATURES)}})
            writer = writer or pq.ParquetWriter(tmp, table.schema)
            writer.write_table(table)
        writer.close()
        os.replace(tmp, path)
    return path, n


def data(body: str, size: int) -> tuple[str, int]:
    return points(size) if body == "kmeans" else graph(size)


class Peaks:
    """Peak resident memory of process trees, by kind, sampled every 0.2 s; ``roots()`` gives
    the trees' top processes (it may change: a server started by the run)."""

    def __init__(self, roots):
        self.roots = roots
        self.peak = dict.fromkeys(KINDS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def kind(proc) -> str:
        name = proc.name()
        if name == "java":
            return "JVM"
        cmd = " ".join(proc.cmdline())
        return "Python workers" if "pyspark.daemon" in cmd or "pyspark.worker" in cmd else "job / task process"

    def sample(self) -> None:
        import psutil

        now = dict.fromkeys(KINDS, 0)
        seen = set()
        for pid in self.roots():
            try:
                top = psutil.Process(pid)
                procs = [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
            for p in procs:
                if p.pid in seen:
                    continue
                seen.add(p.pid)
                try:
                    now[self.kind(p)] += p.memory_info().rss
                except psutil.Error:
                    pass
        for k in KINDS:
            self.peak[k] = max(self.peak[k], now[k])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.2)

    def __enter__(self) -> "Peaks":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def checkpoint_bytes(store: str, job_id: str) -> int:
    """The bytes the job's latest epoch checkpoint holds (its variables' files)."""
    from include.checkpoints import CheckpointLog
    from include.store import LocalStore

    log = CheckpointLog(LocalStore(store), job_id)
    for cid in reversed(log.checkpoint_ids()):
        manifest = log.load(cid, verify="none")
        if manifest.kind == "epoch":
            return sum(ref.size for ref in manifest.objects)
    return 0


def exit_on_sigterm() -> None:
    """A SIGTERM (``kill``, a CI timeout) ends the sweep as an exception would: the run it
    watches is stopped and the embedded Connect server too (main's ``finally``), instead of
    both living on."""
    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def _watch(cmd: list[str], env: dict, roots_extra=lambda: []) -> tuple[int, list[tuple[float, str]], dict, float]:
    """Run ``cmd``; its output lines with the time each arrived, its peaks, its wall time. If the
    sweep stops first (an error, SIGTERM), ``cmd`` is terminated (killed after 60 s)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        with Peaks(lambda: [proc.pid, *roots_extra()]) as peaks:
            for line in proc.stdout:
                lines.append((time.perf_counter() - started, line))
            code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return code, lines, peaks.peak, time.perf_counter() - started


def library(body: str, path: str, epochs: int, params: dict, work: str) -> dict:
    store = os.path.join(work, "store")
    cmd = [sys.executable, "-m", "spark_jobs.run_job", "--job-id", "sweep", "--body", body, "--input", path,
           "--checkpoint-root", store, "--output-path", os.path.join(work, "out"), "--max-epochs", str(epochs),
           "--tolerance", "0", *[a for k, v in params.items() for a in ("--param", f"{k}={json.dumps(v)}")]]
    env = {**os.environ, "PYTHONPATH": ROOT}
    for name in ("ITERATIONS_DRIVER_PID", "SPARK_DRIVER_MEMORY"):
        env.pop(name, None)
    code, lines, peak, wall = _watch(cmd, env)
    epochs_at = [(t, int(m.group(1)), float(m.group(2))) for t, line in lines if (m := _EPOCH.search(line))]
    text = "".join(line for _, line in lines)
    if code != 0 or len(epochs_at) < 2 or '"status": "TERMINATED"' not in text:  # converged early: fewer
        print(text[-5000:], file=sys.stderr)
        raise SystemExit(f"run_job of {body} on {path} exited {code} after {len(epochs_at)} epoch(s)")
    summary_at = next(t for t, line in lines if line.startswith("{") and '"status"' in line)
    heap = re.search(r"a local driver's heap (\d+g)", text)
    parts = re.search(r": (\d+) partitions \(", text)
    return {"epochs": [s for _, _, s in epochs_at], "finish": summary_at - epochs_at[-1][0], "wall": wall,
            "peak": peak, "checkpoint": checkpoint_bytes(store, "sweep"),
            "settings": f"{parts.group(1) if parts else '?'} partitions, heap {heap.group(1) if heap else '?'}"}


def dags_test(env: dict, body: str, path: str, epochs: int, params: dict, work: str, server) -> dict:
    dag = {"pagerank": "iterate_pagerank", "components": "iterate_components", "kmeans": "iterate_kmeans"}[body]
    store = os.path.join(work, "store")
    conf = {"job_id": "sweep", "input_path": path, "checkpoint_root": store, "output_path": os.path.join(work, "out"),
            "max_epochs": epochs, "tolerance": 0, "num_partitions": None, "continuation": False, **params}
    cmd = [os.path.join(os.path.dirname(sys.executable), "airflow"), "dags", "test", dag, "--conf", json.dumps(conf)]
    code, lines, peak, wall = _watch(cmd, env, server)
    text = "".join(line for _, line in lines)
    if code != 0 or "state=success" not in text:
        saved = os.path.join(DATA, f"sweep-{dag}-failed.log")
        with open(saved, "w") as f:
            f.write(text)
        raise SystemExit(f"dags test {dag} on {path} exited {code}; its output: {saved}")
    starts, spans = {}, {}
    for _, line in lines:
        m, task = _STAMP.match(line), _TASK.search(line)
        if m and task:
            t = dt.datetime.fromisoformat(m.group(1)).timestamp()
            if task.group(1) == "starting":
                starts[task.group(2)] = t
            elif task.group(2) in starts:
                spans[task.group(2)] = t - starts[task.group(2)]
    runs = sorted((int(re.search(r"\d+", k).group()), v) for k, v in spans.items() if k.endswith(".run"))
    if len(runs) < 2:
        raise SystemExit(f"dags test {dag}: {len(runs)} epoch task(s) in the log, 2 or more expected")
    parts = re.search(r": (\d+) partitions \(", text)
    return {"epochs": [v for _, v in runs[:epochs]], "finish": spans.get("finish", float("nan")), "wall": wall,
            "peak": peak, "checkpoint": checkpoint_bytes(store, "sweep"),
            "settings": f"{parts.group(1) if parts else '?'} partitions, server heap {env.get('SERVER_HEAP', '?')}"}


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f}" if n >= 10 * 2**20 else f"{n / 2**20:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", choices=list(JOBS), default=list(JOBS))
    p.add_argument("--sizes", type=int, nargs="*", default=None, help="instead of each body's default sizes")
    p.add_argument("--runners", nargs="*", choices=["library", "dags"], default=["library", "dags"])
    p.add_argument("--epochs", type=int, default=4)
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error(f"--epochs must be >= 2 (the first epoch also loads the input), got {args.epochs}")
    exit_on_sigterm()
    os.makedirs(DATA, exist_ok=True)
    from include.contract import server_heap

    print(f"machine: {machine()}; {args.epochs} epochs per run; settings from each input's size", flush=True)
    rows = []
    env, server_pid, home = None, None, None
    if "dags" in args.runners:
        from bench.orchestration import AIRFLOW, airflow_env
        from tests.conftest import free_port

        home = tempfile.mkdtemp(prefix="airflow-", dir=DATA)
        env = {**airflow_env(home, free_port()), "SERVER_HEAP": server_heap()}
        env.pop("SPARK_DRIVER_MEMORY", None)
        env["ITERATIONS_ALLOWED_ROOTS"] = DATA  # the runs' stores and outputs are under it
        subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)

    def server() -> list[int]:
        """The embedded Spark Connect server of the bench's Airflow, once it runs."""
        import psutil

        nonlocal server_pid
        if server_pid is None or not psutil.pid_exists(server_pid):
            server_pid = None
            port = f"spark.connect.grpc.binding.port={env['ITERATIONS_SPARK_CONNECT_PORT']}"
            for proc in psutil.process_iter(["name", "cmdline"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                # the server's JVM: not the scripts nor the launcher JVM that start it
                if proc.info["name"] == "java" and port in cmd and "org.apache.spark.deploy.SparkSubmit" in cmd:
                    server_pid = proc.pid
        return [] if server_pid is None else [server_pid]

    try:
        for body in args.only:
            unit, sizes, params = JOBS[body]
            for size in sorted(args.sizes or sizes):
                path, exact = data(body, size)
                for runner in args.runners:
                    work = tempfile.mkdtemp(prefix="bench-sweep-", dir=DATA)
                    try:
                        got = (library(body, path, args.epochs, params, work) if runner == "library"
                               else dags_test(env, body, path, args.epochs, params, work, server))
                    finally:
                        shutil.rmtree(work, ignore_errors=True)
                    later = got["epochs"][1:]
                    row = {"body": body, "unit": unit, "size": exact, "runner": runner, **got,
                           "median": statistics.median(later), "input_bytes": os.path.getsize(path)}
                    rows.append(row)
                    print(f"  {body} {exact:,} {unit}, {runner} ({got['settings']}): epochs "
                          + ", ".join(f"{s:.1f}" for s in got["epochs"]) + " s; "
                          f"epoch 0 {got['epochs'][0]:.1f} s, "
                          f"median epoch {row['median']:.2f} s, finish {got['finish']:.1f} s, wall {got['wall']:.1f} s, "
                          f"checkpoint {mib(got['checkpoint'])} MiB, "
                          + ", ".join(f"{k} {mib(v)} MiB" for k, v in got["peak"].items()), flush=True)
    finally:
        if env is not None:
            subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], env=env, cwd=ROOT,
                           capture_output=True)
            shutil.rmtree(home, ignore_errors=True)

    print(f"\n{machine()}; {args.epochs} epochs per run; peaks in MiB (the Connect server's: so far)")
    print("| body | size | runner | settings | first epoch | median epoch | finish | JVM peak | Python workers "
          "peak | job / task process peak | checkpoint per epoch | median epoch per unit / smallest's |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = min((x for x in rows if x["body"] == r["body"] and x["runner"] == r["runner"]), key=lambda x: x["size"])
        ratio = (r["median"] / r["size"]) / (base["median"] / base["size"])
        print(f"| {r['body']} | {r['size']:,} {r['unit']} | {r['runner']} | {r['settings']} | {r['epochs'][0]:.1f} s | "
              f"{r['median']:.2f} s | {r['finish']:.1f} s | {mib(r['peak']['JVM'])} | {mib(r['peak']['Python workers'])} | "
              f"{mib(r['peak']['job / task process'])} | {mib(r['checkpoint'])} MiB | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
