"""A driver JVM that runs out of heap exits (``spark_jobs.session.DRIVER_JAVA_OPTIONS``) instead
of living on half-working: an OutOfMemoryError in the thread that serves a collect's results left
a 5M-edge connected-components run waiting for ever. Once the driver is gone, ``run_job`` says so,
and a second run resumes from the last committed checkpoint. The drivers that exit run in processes
of their own (one SparkContext per process); the resuming run is the library runner on the tests'
session, with the configuration ``run_job`` builds."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from include.checkpoints.head_state import HeadStatus
from include.contract.config import InputSpec, JobConfig
from spark_jobs.runner import IterationRunner
from tests.conftest import ROOT, write_edges_csv

_OUT_OF_HEAP = """
import json, sys, time
from spark_jobs.session import driver_exit_code, get_spark, lost_driver_exit_code
spark = get_spark("oom", driver_memory="512m", conf={"spark.driver.extraJavaOptions": "-Dits.own.option=1"})
spark.sparkContext.setLogLevel("OFF")
args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
before = driver_exit_code(spark)
started = time.monotonic()
other = lost_driver_exit_code(ValueError("not the driver"), spark, wait=60)  # the JVM runs: no wait
other_took = time.monotonic() - started
try:
    spark._jvm.java.nio.ByteBuffer.allocate(1536 * 1024 * 1024)  # on the driver, outside any task
    outcome = "allocated"
    code = None
except Exception as e:
    outcome = type(e).__name__
    code = lost_driver_exit_code(e, spark, wait=30)
print("RESULT " + json.dumps({"args": args, "before": before, "other": other, "other_took": other_took,
                              "outcome": outcome, "code": code}))
"""


@pytest.mark.slow  # a Spark driver of its own
def test_a_driver_out_of_heap_exits_and_keeps_the_options_it_was_given():
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": ROOT}
    env.pop("SPARK_DRIVER_MEMORY", None)
    done = subprocess.run([sys.executable, "-c", _OUT_OF_HEAP], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    got = json.loads(line[len("RESULT "):])
    assert "-XX:+ExitOnOutOfMemoryError" in got["args"] and "-Dits.own.option=1" in got["args"], got["args"]
    assert got["before"] is None, "running"
    assert got["other"] is None and got["other_took"] < 30, "another error, the JVM running: no wait for it"
    # without the option the allocation fails with a Py4JJavaError and the JVM lives on
    assert got["outcome"] != "allocated" and got["code"] == 3, got
    assert "Terminating due to java.lang.OutOfMemoryError" in done.stdout + done.stderr


def test_the_driver_options_are_added_once():
    from spark_jobs.session import DRIVER_JAVA_OPTIONS, driver_java_options

    assert driver_java_options() == DRIVER_JAVA_OPTIONS
    assert driver_java_options("  -Da=1 ") == f"-Da=1 {DRIVER_JAVA_OPTIONS}"
    assert driver_java_options(f"-Da=1 {DRIVER_JAVA_OPTIONS}") == f"-Da=1 {DRIVER_JAVA_OPTIONS}"


def test_only_a_connection_error_is_taken_for_a_lost_driver():
    from py4j.protocol import Py4JError, Py4JNetworkError

    from spark_jobs.session import _connection_error

    def chained(outer: Exception, inner: Exception) -> Exception:
        try:
            try:
                raise inner
            except Exception as e:
                raise outer from e
        except Exception as e:
            return e

    # what a collect whose driver ran out of heap raised (seen): py4j's network error over a reset socket
    assert _connection_error(chained(Py4JNetworkError("Error while sending or receiving"),
                                     ConnectionResetError(104, "Connection reset by peer")))
    assert _connection_error(chained(RuntimeError("reading the Arrow stream"), EOFError()))
    assert _connection_error(ConnectionRefusedError(111, "Connection refused"))
    assert not _connection_error(ValueError("a body's bug"))
    assert not _connection_error(chained(Py4JError("An error occurred while calling o1.x"), KeyError("k")))
    cycle = ValueError("a")
    cycle.__context__ = KeyError("b")
    cycle.__context__.__context__ = cycle
    assert not _connection_error(cycle)


def _jvm_of(pid: int) -> psutil.Process:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if child.name() == "java":
                    return child
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.2)
    raise AssertionError(f"no driver JVM under process {pid}")


@pytest.mark.spark
@pytest.mark.slow  # a run_job process with its own Spark driver
def test_run_job_whose_driver_is_gone_says_so_and_the_next_run_resumes(spark, tmp_path, caplog):
    edges = write_edges_csv(tmp_path / "edges.csv", [(i, (i * 7 + 1) % 30) for i in range(30)])
    point = "epoch.before_write@epoch=2"
    holds = tmp_path / "holds"
    holds.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": ROOT,
           "ITERATIONS_FAILPOINTS": f"{point}=hold", "ITERATIONS_FAILPOINT_DIR": str(holds)}
    cmd = [sys.executable, "-m", "spark_jobs.run_job", "--job-id", "gone", "--body", "pagerank", "--input", edges,
           "--checkpoint-root", str(tmp_path / "store"), "--output-path", str(tmp_path / "out"),
           "--max-epochs", "4", "--tolerance", "0"]
    run = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held = holds / f"{point}.held"
        deadline = time.monotonic() + 300
        while not held.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-4000:]
            time.sleep(0.2)
        _jvm_of(run.pid).send_signal(signal.SIGKILL)  # the driver JVM dies mid-epoch, as out of heap
        (holds / f"{point}.release").touch()
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err[-4000:]
    assert "error: job gone: the Spark driver (JVM) of this run exited with code -9" in err, err[-4000:]
    assert "run again to resume" in err
    # The next run, in this process: the JobConfig and runner options run_job builds from cmd's
    # arguments (its defaults for the rest). The lease is free at once: run_job released it as it
    # ended (its process is gone from this host too, stale for include.runs.ownership): no lease wait.
    config = JobConfig(job_id="gone", body="pagerank", input=InputSpec(edges, None),
                       checkpoint_root=str(tmp_path / "store"), output_path=str(tmp_path / "out"),
                       output_format="parquet", body_params={}, max_epochs=4, tolerance=0.0, num_partitions=None,
                       retain_last=3, retain_batches=None, retain_history=None, checks=None,
                       on_damaged_checkpoint="fail")
    with caplog.at_level(logging.INFO, logger="iterations"):
        again = IterationRunner(config, spark, store_options={}, wait_for_input=None, take_over=False,
                                lease_wait=0.0, rewind_to=None).run(batch_id=None, max_epochs_in_batch=None)
    assert any(r.name == "iterations" and "job gone: restored checkpoint 1" in r.getMessage()
               for r in caplog.records), caplog.text[-4000:]
    assert again.status is HeadStatus.TERMINATED and again.restored_from == 1
    assert again.epochs_computed == [2, 3]
