"""A warm local Spark session set up for iteration jobs."""

from __future__ import annotations

import os
import sys
from typing import Mapping

from include.failpoints import DRIVER_PID_ENV


# A driver JVM that runs out of heap exits instead of living on: an OutOfMemoryError can kill the
# thread that serves a collect's results to Python (which then waits for ever) or the heartbeats
# of a local executor, and leave the JVM half-working. Exited, its Python side fails at once and
# the run resumes from its last checkpoint.
DRIVER_JAVA_OPTIONS = "-XX:+ExitOnOutOfMemoryError"


def driver_java_options(options: str | None = None) -> str:
    """``options`` (a caller's ``spark.driver.extraJavaOptions``) with ``DRIVER_JAVA_OPTIONS``."""
    options = (options or "").strip()
    return options if DRIVER_JAVA_OPTIONS in options.split() else f"{options} {DRIVER_JAVA_OPTIONS}".strip()


def get_spark(
    app_name: str = "iterations",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    driver_memory: str | None = None,
):
    """Create (or return) the session. Python workers use this interpreter, in which the
    project is installed (``./run.sh``: editable), so they import ``include`` and
    ``spark_jobs``; settings must be in place before the JVM starts. The driver's heap:
    ``SPARK_DRIVER_MEMORY``, else ``driver_memory`` (the library runner's: from the input's
    size, include.sizing), else 2g. The driver exits when it runs out of heap
    (``DRIVER_JAVA_OPTIONS``)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault(DRIVER_PID_ENV, str(os.getpid()))
    # Under spark-submit (which starts this driver's JVM and passes its gateway in the
    # environment) the master is spark-submit's --master: the cluster of the `spark_default`
    # connection. Setting one here would override it and run the epoch on local[2].
    launched_by_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or os.environ.get("SPARK_MASTER") or (None if launched_by_spark_submit else "local[2]")
    if master and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session stays on loopback
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = (
        builder
        .config("spark.ui.enabled", os.environ.get("SPARK_UI_ENABLED", "false"))
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY") or driver_memory or "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    builder = builder.config("spark.driver.extraJavaOptions",
                             driver_java_options((conf or {}).get("spark.driver.extraJavaOptions")))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    return spark


def driver_exit_code(spark=None, wait: float = 0.0) -> int | None:
    """The exit code of the driver JVM this process started for its classic session (``spark``,
    or the process's), once it has exited (waiting up to ``wait`` seconds for one that is
    exiting); None while it runs, or when this process did not start one (Spark Connect,
    spark-submit's driver)."""
    import subprocess

    from pyspark import SparkContext

    if spark is not None and not is_classic(spark):
        return None
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        return proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return None


def lost_driver_exit_code(error: BaseException, spark=None, wait: float = 5.0) -> int | None:
    """The exit code of this process's driver JVM (see ``driver_exit_code``) when ``error`` came
    from losing it, else None. A JVM that has exited answers at once. One that is exiting closes
    its sockets before it ends, so a connection error anywhere in ``error``'s chain (py4j's
    network error, a reset or refused connection, a stream cut short) waits up to ``wait`` seconds
    for it; any other error returns None at once, its traceback not held back."""
    code = driver_exit_code(spark)
    if code is not None or not _connection_error(error):
        return code
    return driver_exit_code(spark, wait=wait)


def _connection_error(error: BaseException | None) -> bool:
    from py4j.protocol import Py4JNetworkError

    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (Py4JNetworkError, ConnectionError, EOFError)):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def is_classic(spark) -> bool:
    """A classic session: its driver runs in this process (a local session, spark-submit's
    driver), so the driver can hold small frames itself; not a Spark Connect client."""
    return type(spark).__module__ == "pyspark.sql.session"


def make_active(spark) -> None:
    """Make ``spark`` this thread's active session, if it is a Spark Connect one. pyspark 4.3
    binds the frame a Connect ``localCheckpoint`` returns (the tail's handoff) to
    ``SparkSession.active()``, the thread's active session or else the process's first one, not
    to the session that ran it: in a process holding several sessions (a notebook's two, a
    batch's and an attempt's, one from before a server restart) that would be the wrong one, and
    the next epoch would fail with DATAFRAME_NOT_FOUND. There is no public setter: the attribute
    is pyspark's own. A classic session binds the frame to its own session: nothing to do."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        return
    from pyspark.sql.connect.session import SparkSession

    active = getattr(SparkSession, "_active_session", None)
    if active is not None:
        active.session = spark


def connect_session(url: str):
    """A session of the Spark Connect server at ``url`` (``sc://host:port``), for the library
    runner (``run_job --remote``): the driver is the server, this process only a client."""
    if not url.startswith("sc://"):
        raise ValueError(f"Spark Connect URL {url!r} is not supported: expected sc://host:port")
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()
