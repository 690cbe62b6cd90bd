"""A warm local Spark session set up for iteration jobs."""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from typing import Mapping

from include.errors import ConfigError
from include.process import (
    DRIVER_PID_ENV,
    PYSPARK_GATEWAY_PORT,
    SPARK_DRIVER_MEMORY,
    SPARK_LOG_LEVEL,
    SPARK_MASTER,
    SPARK_UI_ENABLED,
)

log = logging.getLogger("iterations")


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
    size, include.contract.sizing), else 2g. The driver exits when it runs out of heap
    (``DRIVER_JAVA_OPTIONS``)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault(DRIVER_PID_ENV, str(os.getpid()))
    # Under spark-submit (which starts this driver's JVM and passes its gateway in the
    # environment) the master is spark-submit's --master: the cluster of the `spark_default`
    # connection. Setting one here would override it and run the epoch on local[2].
    launched_by_spark_submit = PYSPARK_GATEWAY_PORT.is_set()
    master = master or SPARK_MASTER.get() or (None if launched_by_spark_submit else "local[2]")
    if master and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session stays on loopback
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = (
        builder
        .config("spark.ui.enabled", SPARK_UI_ENABLED.get())
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.memory", SPARK_DRIVER_MEMORY.get() or driver_memory or "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    builder = builder.config("spark.driver.extraJavaOptions",
                             driver_java_options((conf or {}).get("spark.driver.extraJavaOptions")))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(SPARK_LOG_LEVEL.get())
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


# --- a body's package on a Spark Connect server ----------------------------------------------

#: the project's packages (pyproject.toml): every server of the project has them on its path
PROJECT_PACKAGES = frozenset({"include", "spark_jobs", "iterations"})
#: a body package larger than this is not shipped (it is to be installed on the server)
SHIPPED_PACKAGE_LIMIT = 32 * 1024 * 1024


@dataclass(frozen=True)
class BodyPackage:
    """A body's top-level package (or module) zipped for a session's Python path."""
    name: str     # the top-level package or module
    path: str     # the zip, named by its content: ``<name>-<sha256 prefix>.zip``
    files: int
    size: int     # of the files, before compression


_PACKAGES: dict[tuple, BodyPackage] = {}
_PACKAGES_LOCK = threading.Lock()
_PACKAGES_DIR: list[str] = []


def _package_dir() -> str:
    if not _PACKAGES_DIR:
        _PACKAGES_DIR.append(tempfile.mkdtemp(prefix="iterations-body-"))
        atexit.register(shutil.rmtree, _PACKAGES_DIR[0], True)
    return _PACKAGES_DIR[0]


def _package_files(name: str) -> list[tuple[str, str]] | None:
    """(path, name in the zip) of the files of the top-level package or module ``name``, as
    this process imports it; None when it is not one to ship: the project's own
    (``PROJECT_PACKAGES``), the standard library's, or
    not Python source (a built-in or compiled module, which is installed where it runs)."""
    if name in PROJECT_PACKAGES:
        return None
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package (or a namespace package's portions)
        roots = [os.path.abspath(p) for p in spec.submodule_search_locations]
    elif spec.origin and spec.origin.endswith(".py"):
        roots = [os.path.abspath(spec.origin)]
    else:
        return None
    stdlib = {os.path.join(os.path.abspath(sysconfig.get_paths()[p]), "") for p in ("stdlib", "platstdlib")}
    if any(r.startswith(p) for r in roots for p in stdlib):
        return None
    files = []
    for root in roots:
        if os.path.isfile(root):
            files.append((root, os.path.basename(root)))
            continue
        for where, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for n in sorted(names):
                if n.endswith((".pyc", ".pyo")) or n.startswith("."):
                    continue
                path = os.path.join(where, n)
                files.append((path, os.path.join(name, os.path.relpath(path, root))))
    return files


def body_package(reference: str) -> BodyPackage | None:
    """The top-level package of a body reference (``package.module:Class``) zipped, for the
    Python workers of a Spark Connect server that may not have it (``ship_body``); None for the
    project's own packages and for what cannot be shipped as source (``_package_files``). Made
    once per content in this process; the zip's bytes and name depend on the files' content
    only, so every process adds the same artifact to a session they share. ConfigError, naming
    the package and its size, when it is larger than ``SHIPPED_PACKAGE_LIMIT``."""
    name = reference.partition(":")[0].split(".")[0]
    files = _package_files(name)
    if not files:
        return None
    stats = [(arc, os.stat(path)) for path, arc in files]
    stamp = tuple((arc, st.st_size, st.st_mtime_ns) for arc, st in stats)
    key = (name, stamp)
    with _PACKAGES_LOCK:
        if key in _PACKAGES:
            return _PACKAGES[key]
        size = sum(s for _arc, s, _m in stamp)
        if size > SHIPPED_PACKAGE_LIMIT:
            raise ConfigError(
                f"the body's package {name!r} holds {size / 2**20:.1f} MiB of files, more than the "
                f"{SHIPPED_PACKAGE_LIMIT // 2**20} MiB shipped to a Spark Connect session: install it where the "
                f"server's Python runs instead")
        digest = hashlib.sha256()
        contents = []
        for path, arc in files:
            with open(path, "rb") as f:
                data = f.read()
            digest.update(arc.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
            contents.append((arc, data))
        target = os.path.join(_package_dir(), f"{name}-{digest.hexdigest()[:16]}.zip")
        if not os.path.exists(target):
            tmp = f"{target}.{os.getpid()}.tmp"
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
                for arc, data in contents:
                    z.writestr(zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
            os.replace(tmp, target)
        package = BodyPackage(name, target, len(files), size)
        _PACKAGES[key] = package
        return package


def ship_body(spark, reference: str) -> BodyPackage | None:
    """Put a body's package on the Python path of a Spark Connect session's workers, so that its
    Python UDFs (pickled by reference to the body's module) run on a server that was started
    without it, or on another machine: the package as this process imports it, added as a
    ``pyfile`` artifact (Spark Connect's ``addArtifacts``; adding the same one again is a no-op).
    Nothing for a classic session (its local workers share this interpreter's path; a cluster's
    are given the package with ``--py-files``, docs/cluster.md) or a package ``body_package``
    does not ship. What the package imports besides itself is not shipped."""
    if is_classic(spark):
        return None
    package = body_package(reference)
    if package is not None:
        spark.addArtifacts(package.path, pyfile=True)
        log.info("the body's package %s (%d file(s), %.1f KiB) is on the Spark Connect session's Python path",
                 package.name, package.files, package.size / 1024)
    return package
