"""The Python processes a Spark Connect server keeps after its client sessions end.

Every epoch task of a DAG on the embedded default is a short-lived Spark Connect client: one
session per task. Spark gives each session's Python workers a factory of their own (keyed by the
session's artifact UUID), and in pyspark 4.3 a factory and its ``pyspark.daemon`` process live
until the server stops (SPARK-54055). This starts a server like the embedded one (local[2],
2g), runs ``--sessions`` client processes one after another, each reading a Python data source
and running a ``mapInArrow`` (what an epoch's store reads and bodies do), and prints the server's
descendant processes and their resident memory after each session and once idle. With
``--reap``, ``spark_jobs.connect_server.reap_idle_daemons`` (what every epoch task on the embedded
server calls) runs before each count.

    python -m bench.connect_workers --sessions 6
    python -m bench.connect_workers --sessions 6 --no-daemon   # spark.python.use.daemon=false
    python -m bench.connect_workers --sessions 6 --reap --idle 30 45 60
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import psutil

from bench.common import resident
from spark_jobs import connect_server
from spark_jobs.connect_server import _env, spark_home
from tests.conftest import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CLIENT = r'''
import sys, time
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

class Reader(DataSourceReader):
    def partitions(self):
        return [InputPartition(i) for i in range(2)]
    def read(self, partition):
        for i in range(1000):
            yield (partition.value * 1000 + i,)

class Source(DataSource):
    @classmethod
    def name(cls):
        return "bench_connect_workers"
    def schema(self):
        return "x long"
    def reader(self, schema):
        return Reader()

def same(batches):
    yield from batches

started = time.monotonic()
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
spark.dataSource.register(Source)
mapped = spark.read.format("bench_connect_workers").load().mapInArrow(same, "x long")
mapped.groupBy((mapped.x % 7).alias("k")).count().count()
spark.stop()
print(f"{time.monotonic() - started:.2f}")
'''


def descendants(server: psutil.Process, port: int | None = None) -> tuple[int, float, int]:
    """(processes, their resident MiB, daemons stopped first): with ``port``, the server's idle
    daemons are stopped first, as an epoch task does."""
    reaped = connect_server.reap_idle_daemons(port) if port is not None else []
    if reaped:
        psutil.wait_procs([p for p in server.children() if p.pid in reaped], timeout=30)
    kids = server.children(recursive=True)
    return len(kids), resident(kids) / 2**20, len(reaped)


def _stopped(reaped: int, reap: bool) -> str:
    return f" (after stopping {reaped} idle daemons)" if reap else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=6)
    p.add_argument("--no-daemon", action="store_true", help="spark.python.use.daemon=false")
    p.add_argument("--idle", type=float, nargs="*", default=[30.0, 45.0], help="seconds idle, then count again")
    p.add_argument("--reap", action="store_true",
                   help="stop the idle daemons before each count (spark_jobs.connect_server.reap_idle_daemons)")
    args = p.parse_args(argv)
    if args.sessions < 1:
        p.error(f"--sessions must be >= 1, got {args.sessions}")
    port = free_port()
    state = tempfile.mkdtemp(prefix="bench-connect-workers-")
    env = {**_env(), "SPARK_PID_DIR": state, "SPARK_LOG_DIR": state, "SPARK_IDENT_STRING": f"bench{port}"}
    connect_server.STATE_DIR = state  # where reap_idle_daemons finds the server's pid file
    reap_port = port if args.reap else None
    subprocess.run(["bash", os.path.join(spark_home(), "sbin", "start-connect-server.sh"), "--master", "local[2]",
                    "--driver-memory", "2g", "--conf", f"spark.connect.grpc.binding.port={port}",
                    "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false",
                    "--conf", f"spark.python.use.daemon={'false' if args.no_daemon else 'true'}"],
                   env=env, check=True, capture_output=True)
    try:
        server = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if server is None:
                server = next((proc for proc in psutil.process_iter(["name", "cmdline"])
                               if proc.info["name"] == "java"
                               and f"binding.port={port}" in " ".join(proc.info["cmdline"] or [])), None)
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            print(f"the server did not listen on {port}; its logs are in {state}", file=sys.stderr)
            return 1
        print(f"Spark Connect server pid {server.pid}, spark.python.use.daemon={not args.no_daemon}", flush=True)
        times = []
        for i in range(args.sessions):
            ran = subprocess.run([sys.executable, "-c", CLIENT, f"sc://127.0.0.1:{port}"], capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": ROOT})
            if ran.returncode != 0:
                print(ran.stderr[-3000:], file=sys.stderr)
                return 1
            times.append(float(ran.stdout.split()[-1]))
            count, rss, reaped = descendants(server, reap_port)
            print(f"session {i + 1}: {times[-1]:.2f} s; the server's descendant processes {count}, "
                  f"resident {rss:,.0f} MiB{_stopped(reaped, args.reap)}", flush=True)
        for idle in args.idle:
            time.sleep(idle)
            count, rss, reaped = descendants(server, reap_port)
            print(f"then {idle:.0f} s idle: {count} processes, {rss:,.0f} MiB{_stopped(reaped, args.reap)}",
                  flush=True)
        print(f"session times (s): {', '.join(f'{t:.2f}' for t in times)}")
        return 0
    finally:
        subprocess.run(["bash", os.path.join(spark_home(), "sbin", "stop-connect-server.sh")], env=env,
                       capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
