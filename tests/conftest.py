"""Shared fixtures: one local Spark session per test session, a moto_server S3 endpoint over
real HTTP, and helpers to write small inputs."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The embedded defaults (local store, outputs) of this test process, never the checkout's .local:
# parallel workers (pytest-xdist) must not share a job's default store.
os.environ.setdefault("ITERATIONS_LOCAL_DIR", tempfile.mkdtemp(prefix="iterations-local-"))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from stack.procs import free_port  # noqa: E402  (tests import it from here)
from tests.jvm import long_lived_env, tool_options  # noqa: E402

# py4j logs from __del__ at interpreter exit, after pytest closed its streams.
# Parallel workers (./run.sh test: pytest-xdist, --dist loadscope) take whole modules, the
# longest first (each worker is handed two to start with), so the longest ones do not run last.
# Modules not listed follow in collection order. Modules sharing a server run on one worker
# (SHARED_SCOPES): the Iterations view's API server, and the native stack, whose Spark cluster
# the cluster tests run on (tests/dags/conftest.py).
LONGEST_FIRST = (
    "tests/dags/test_stack.py", "tests/dags/test_dags_run.py", "tests/dags/test_cluster.py",
    "tests/faults/test_sweep.py", "tests/integration/test_pagerank.py", "tests/dags/test_run_conf_limits.py",
    "tests/integration/test_phases_in_processes.py", "tests/dags/test_commit_in_head.py",
    "tests/dags/test_run_job_remote.py", "tests/dags/test_fault_sweep.py", "tests/integration/test_incremental.py",
    "tests/dags/test_iterations_view.py",
)
SHARED_SCOPES = {"tests/dags/test_iterations_browser.py": "tests/dags/test_iterations_view.py",
                 "tests/dags/test_cluster.py": "tests/dags/test_stack.py"}


def _module(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return SHARED_SCOPES.get(module, module)


#: JAVA_TOOL_OPTIONS as the user started the suite (None: the suite sets its own, pytest_configure)
USER_JAVA_TOOL_OPTIONS = os.environ.get("JAVA_TOOL_OPTIONS")


def pytest_configure(config):
    # Every JVM the tests start: the client compiler, the serial collector and the class-data
    # archive ./run.sh builds (tests/jvm.py says why). Speed only; a user's JAVA_TOOL_OPTIONS is
    # kept. Set when pytest starts, not when this module is imported: the benchmarks import its
    # helpers (start_moto_server, free_port) and must measure the JVMs users run.
    os.environ.setdefault("JAVA_TOOL_OPTIONS", tool_options())
    # The embedded Spark Connect servers the tests start (one per xdist worker, more in the
    # README and UI tests) run small data: 2g each, not a quarter of the machine each, which
    # left a 24 GiB machine without page cache while the slowest modules overlapped.
    os.environ.setdefault("ITERATIONS_SPARK_CONNECT_MEMORY", "2g")


def pytest_collection_modifyitems(config, items):
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))  # stable: order kept within


@pytest.hookimpl(optionalhook=True)  # a plain `pytest -p no:xdist` run has no such hook
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        """loadscope, with SHARED_SCOPES merged and the collection's order kept."""

        def _split_scope(self, nodeid):
            return _module(nodeid)

    config.option.loadscopereorder = False
    return ByModule(config, log)


logging.getLogger("py4j").setLevel(logging.WARNING)
# Airflow imported by a test must never write into the user's ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="iterations-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# The DAG tests give runs paths under the temporary directory and random moto buckets.
os.environ.setdefault("ITERATIONS_ALLOWED_ROOTS", f"{os.path.realpath(tempfile.gettempdir())},s3://")

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing-key-id",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.session import get_spark

    before = os.environ.get("JAVA_TOOL_OPTIONS")
    os.environ.update(long_lived_env(dict(os.environ)))  # the JVM pyspark starts reads them
    try:
        session = get_spark("iterations-tests")
    finally:
        if before is not None:
            os.environ["JAVA_TOOL_OPTIONS"] = before
    yield session
    session.stop()


def start_moto_server() -> tuple[subprocess.Popen, str]:
    """A moto_server process on a free loopback port, and its URL, once it accepts connections
    (RuntimeError if it does not within 30 s). Also used by tests/faults/report.py."""
    port = free_port()
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if not exe:
        raise RuntimeError("moto_server not installed (pip install 'moto[server]')")
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto_server did not start")


@pytest.fixture(scope="session")
def moto_endpoint():
    """A moto_server process on a free loopback port; stopped at the end of the session."""
    try:
        proc, url = start_moto_server()
    except RuntimeError as e:
        pytest.fail(str(e))
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session", autouse=True)
def s3_environment():
    """Test credentials in the environment before any Spark JVM starts, so executors see them."""
    old = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def bucket(moto_endpoint):
    import boto3

    name = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def write_edges_csv(path, edges) -> str:
    with open(path, "w") as f:
        f.write("src,dst\n")
        for u, v in edges:
            f.write(f"{u},{v}\n")
    return str(path)


@pytest.fixture(scope="session")
def view_stores(spark, tmp_path_factory):
    """Checkpoint stores filled by real PageRank runs (tests.helpers.ViewStores), shared by the
    Iterations view's tests."""
    from tests.helpers import fill_view_stores

    return fill_view_stores(spark, tmp_path_factory.mktemp("view"))
