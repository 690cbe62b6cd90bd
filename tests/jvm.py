"""The JVM settings of the test suite, and its class-data archive.

Every JVM the tests start (local Spark sessions, the Spark Connect servers, spark-submit's
drivers, the standalone clusters' daemons and executors) takes ``JAVA_TOOL_OPTIONS`` from the
environment. The suite is bound by CPU on a 2-core machine, so:

- the client compiler alone and the serial collector (``OPTIONS``): most of these JVMs work
  on small data, briefly. The two that live through a worker's whole run (the tests' own
  session, the DAG tests' Spark Connect server: ``tool_options(long_lived=True)``) run
  hundreds of small Spark jobs a minute for half an hour, and there the optimizing compiler
  repays its compile time: they keep the JDK's tiered compilation;
- a class-data-sharing archive (JDK CDS, ``ARCHIVE``): a Spark JVM's start is mostly loading
  and verifying some ten thousand classes out of pyspark's jars. ``python -m tests.jvm``
  (``./run.sh test`` runs it after each install) runs a small PageRank and k-means in a local
  session that writes the classes it loaded to the archive at exit; every later JVM with the
  same class path maps them instead. A JVM whose class path differs (spark-class's launcher,
  the standalone daemons), or an archive that no longer matches the jars or the JDK, loads its
  classes the usual way: the archive is only ever a speed-up, and its messages are switched off.

Speed only: the JVMs run the same code. Figures in bench/RESULTS.md ("Test suite").
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LONG_LIVED = "-XX:+UseSerialGC"
ARCHIVE = os.path.join(sys.prefix, "spark-classes.jsa")  # in the virtual environment it matches
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def tool_options(long_lived: bool = False) -> str:
    """``JAVA_TOOL_OPTIONS`` for the tests' JVMs: ``OPTIONS`` (``LONG_LIVED`` for a JVM that
    serves the whole run), and the archive if it was built."""
    options = LONG_LIVED if long_lived else OPTIONS
    if os.path.isfile(ARCHIVE):
        return f"{options} -XX:SharedArchiveFile={ARCHIVE} {_QUIET}"
    return options


def long_lived_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for starting a JVM that serves the whole run: its ``JAVA_TOOL_OPTIONS`` switched
    to ``tool_options(long_lived=True)`` when they are the suite's default (a user's own are
    kept as they are)."""
    if env.get("JAVA_TOOL_OPTIONS") == tool_options():
        return {**env, "JAVA_TOOL_OPTIONS": tool_options(long_lived=True)}
    return dict(env)


_WORKLOAD = """
import pathlib, sys
import numpy as np, pandas as pd
from spark_jobs.runner import IterationRunner
from spark_jobs.session import get_spark
from tests.helpers import graph_with_dangling, pagerank_config, write_edges
from include.contract.config import JobConfig

spark = get_spark("iterations-class-archive")
work = pathlib.Path(sys.argv[1])
edges = write_edges(work / "edges.csv", graph_with_dangling(30, 0.1, seed=1))
IterationRunner(pagerank_config(work, edges, job_id="pr", max_epochs=3, tolerance=0.0,
                                output_path=str(work / "out")), spark).run()
X = np.random.default_rng(1).normal(size=(60, 2))
pd.DataFrame({"id": np.arange(60), "x": X[:, 0], "y": X[:, 1]}).to_parquet(work / "points.parquet")
IterationRunner(JobConfig(job_id="km", body="kmeans", input=str(work / "points.parquet"),
                          checkpoint_root=str(work / "store"), output_path=str(work / "out-km"),
                          max_epochs=2, tolerance=0.0, num_partitions=2, body_params={"k": 3}), spark).run()
spark.stop()
"""


def build(archive: str = ARCHIVE) -> None:
    """Write the archive: the classes a local session loads for a small job, dumped when its
    JVM exits. Written aside and renamed, so no JVM ever maps a partial archive."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    partial = f"{archive}.{os.getpid()}.partial"
    with tempfile.TemporaryDirectory(prefix="iterations-class-archive-") as work:
        env = {**os.environ, "JAVA_TOOL_OPTIONS": f"{OPTIONS} -XX:ArchiveClassesAtExit={partial} {_QUIET}",
               "PYTHONPATH": root, "PYSPARK_PYTHON": sys.executable, "ITERATIONS_LOCAL_DIR": work,
               "ITERATIONS_ALLOWED_ROOTS": os.path.realpath(work)}
        try:
            ran = subprocess.run([sys.executable, "-c", _WORKLOAD, work], cwd=root, env=env,
                                 capture_output=True, text=True, timeout=600)
            if ran.returncode != 0 or not os.path.isfile(partial):
                raise RuntimeError(f"the class-data archive was not written (exit {ran.returncode}): "
                                   f"{ran.stderr[-3000:]}")
            os.replace(partial, archive)
        finally:
            if os.path.exists(partial):
                os.remove(partial)


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else ARCHIVE
    build(target)
    print(target)
