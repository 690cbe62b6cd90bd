"""What the benchmarks share: generated inputs (cached under .local/bench), the bare driver
loops a user writes today (the baselines), a moto_server for the S3 store, and a sampler of a
process tree's resident memory.

The bare loops run the *same* body functions (``load``, ``init``, ``step``, ``finish``) as the
library, so a difference in time is the runtime's (checkpointing, tail, replay, commit), not a
different PageRank.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, ".local", "bench")


def graph(edges: int, seed: int = 7) -> tuple[str, int]:
    """A generated graph of about ``edges`` edges (10 per node, skewed in-degrees, dangling
    nodes; duplicates dropped), cached: its path and its exact edge count."""
    import pyarrow.parquet as pq

    from spark_jobs.demo import generate_graph

    path = os.path.join(DATA, f"graph-{edges}-{seed}.parquet")
    if not os.path.exists(path):
        # generate_graph drops duplicates and every 17th node's out-edges: ask for more
        generate_graph(path, nodes=max(int(edges * 1.07) // 10, 10), avg_degree=10, seed=seed)
    return path, pq.ParquetFile(path).metadata.num_rows


def points(n: int, seed: int = 7) -> str:
    from spark_jobs.demo import generate_points

    path = os.path.join(DATA, f"points-{n}-{seed}.parquet")
    if not os.path.exists(path):
        generate_points(path, n, seed)
    return path


@dataclass
class LoopTimes:
    total: float = 0.0  # load + epochs + final output written
    epochs: list[float] = field(default_factory=list)
    metrics: list[dict[str, float]] = field(default_factory=list)


def bare_loop(spark, body_name: str, input_path: str, params: dict, epochs: int, partitions: int,
              durable_dir: str | None, output_dir: str) -> LoopTimes:
    """The loop people write today, on the session it is given, with the library's body:
    load, init, then ``epochs`` steps, each evaluated and its metrics collected (the loop
    checks convergence), then the outputs written as Parquet.

    ``durable_dir`` None: each epoch's variables are ``localCheckpoint()``-ed (cut the lineage,
    nothing durable: a crash loses everything). Otherwise each epoch's variables are written as
    Parquet under it and read back (durable by hand: a restart could read the last epoch), and
    each epoch output is appended there too."""
    from pyspark.sql import functions as F

    from include.contract import EpochContext, InputSpec, resolve_body

    body = resolve_body(body_name)
    parsed = body.parse_params(params)
    spec = InputSpec(input_path)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    out = LoopTimes()
    started = time.perf_counter()
    data = body.load(spark.read.parquet(input_path), parsed)

    def ctx(epoch):
        return EpochContext(epoch, partitions, parsed, spark, {}, spec, {})

    variables = body.init(data, ctx(0))
    frames = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        result = body.step(variables, data, ctx(epoch))
        new = {}
        for name, df in result.variables.items():
            if durable_dir is None:
                new[name] = df.localCheckpoint(eager=True)
            else:
                where = os.path.join(durable_dir, name, f"epoch={epoch}")
                df.write.mode("overwrite").parquet(where)
                new[name] = spark.read.parquet(where)
        if durable_dir is not None:
            for name, df in result.outputs.items():
                df.write.mode("append").parquet(os.path.join(durable_dir, "outputs", name))
        metrics = {}
        for head in {h for h, _ in result.metrics.values()}:  # one aggregation per variable
            named = {m: c for m, (h, c) in result.metrics.items() if h == head}
            row = new[head].agg(*[getattr(F, body.metric_aggregations[m])(c).alias(m)  # sum, max, min
                                  for m, c in named.items()]).first()
            metrics.update(row.asDict())
        for name, df in new.items():
            extra = [c for c in df.columns if c in {col for h, col in result.metrics.values() if h == name}]
            variables[name] = df.drop(*extra) if extra else df
        frames += list(new.values())
        out.epochs.append(time.perf_counter() - t0)
        out.metrics.append(metrics)
    for name, df in body.finish(variables, data, ctx(epochs)).items():
        df.write.mode("overwrite").parquet(os.path.join(output_dir, name))
    out.total = time.perf_counter() - started
    for df in [v for v in data.values() if hasattr(v, "unpersist")]:
        df.unpersist()
    return out


def start_moto() -> tuple[Any, str]:
    """moto_server on loopback (the tests' helper) with a ``bench`` bucket; test credentials."""
    import boto3

    from tests.conftest import S3_ENV, start_moto_server

    os.environ.update(S3_ENV)
    proc, url = start_moto_server()
    boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket="bench")
    return proc, url


def s3_bytes(url: str, prefix: str) -> int:
    import boto3

    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix):
        total += sum(o["Size"] for o in page.get("Contents", ()))
    return total


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def resident(procs) -> int:
    """The resident bytes of psutil ``procs``; one that has gone meanwhile counts for nothing."""
    import psutil

    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


class PeakMemory:
    """Samples the resident memory of a process and all its descendants (the Spark JVM and its
    Python workers) every ``interval`` seconds; ``peak`` in bytes."""

    def __init__(self, pid: int | Callable[[], int | None], interval: float = 0.2):
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree_rss(self) -> int:
        import psutil

        pid = self.pid() if callable(self.pid) else self.pid
        if pid is None:
            return 0
        try:
            top = psutil.Process(pid)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            return 0
        return resident(procs)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._tree_rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._tree_rss())


def tree_cpu_seconds(exclude: tuple[int, ...] = ()) -> float:
    """User + system CPU seconds used so far by this process and its descendants (the driver,
    its Spark JVM, the JVM's Python workers, and those of them that ended), except the process
    trees in ``exclude`` (a moto_server): the work a variant did, beside its wall time. Measured
    here, it varies between runs of one variant about as much as wall time (bare loop at 1M
    edges: 34-48 CPU s over 6 runs)."""
    import psutil

    skip: set[int] = set()
    for pid in exclude:
        try:
            skip |= {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        except psutil.Error:
            pass
    top = psutil.Process()
    total = 0.0
    for proc in [top, *top.children(recursive=True)]:
        if proc.pid in skip:
            continue
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        # children_*: the ended (and reaped) children, which are no longer in the tree
        total += t.user + t.system + t.children_user + t.children_system
    return total


def machine() -> str:
    import platform

    import pyspark

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}, "
            f"pyspark {pyspark.__version__} local[2]")
