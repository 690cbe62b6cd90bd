"""A body's package reaches the Spark Connect server's Python workers (spark_jobs.session.
ship_body): a body whose step is a Python UDF from its own package, importable by the client
only (the shared server was started with the checkout alone on its path), runs through the
library runner on a Spark Connect session and through a DAG, and both give the arithmetic."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.dags.conftest import airflow
from tests.helpers import read_published, write_dag_file

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXPECTED = {k: k.bit_length() for k in range(1, 41)}


@pytest.fixture
def site(tmp_path):
    """The body's package in a path of its own (the clients', never the server's)."""
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "tests", "data", "halving_body"), site / "halving_body",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return site


# A client's check of a session: whether the server's Python workers import the package
# ("imported", "not importable", or the unexpected error)
PROBE = """
import sys, uuid
from pyspark.sql import SparkSession, functions as F
from halving_body.rules import halve
from spark_jobs.session import ship_body

def probe(spark):
    try:
        return spark.range(3).select(F.udf(halve, "long")("id")).collect() and "imported"
    except Exception as e:
        return "No module named 'halving_body'" in str(e) and "not importable" or repr(e)[:2000]
"""
ALONE = PROBE + """
print(probe(SparkSession.builder.remote(sys.argv[1]).create()))
"""
# A package shipped to one session is on that session's Python path only: the server's Python
# workers are the session's own (Spark keys them by the session's artifacts), so another job's
# session on the same server never imports it. The server's start command keeps that
# (SparkConnectServer applies each session's class loader and artifacts to all its work; the
# same server run as a plugin of a plain Spark application shares one set of Python workers
# between sessions, and a package added to one session was then imported by another:
# bench/RESULTS.md, "A fresh Spark Connect session").
APART = PROBE + """
shipped = SparkSession.builder.remote(f"{sys.argv[1]}/;session_id={uuid.uuid4()}").create()
assert ship_body(shipped, "halving_body:Halving") is not None
print("shipped:", probe(shipped))
other = SparkSession.builder.remote(f"{sys.argv[1]}/;session_id={uuid.uuid4()}").create()
print("other session:", probe(other))
print("shipped again:", probe(shipped), flush=True)
for spark in (other, shipped):  # a client left open blocks the interpreter's exit
    spark.stop()
"""


def test_a_udf_body_runs_on_a_server_without_its_package(airflow_env, connect_url, site, tmp_path):
    # (Spark Connect clients in processes of their own: a process holding a classic session, as
    # this one does, cannot also hold a Connect one)
    env = {**airflow_env, "PYTHONPATH": os.pathsep.join([str(site), airflow_env["PYTHONPATH"]])}

    # the server's Python workers cannot import the package by themselves
    probe = subprocess.run([sys.executable, "-c", ALONE, connect_url], env=env, cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert probe.stdout.strip().splitlines()[-1:] == ["not importable"], (probe.stdout + probe.stderr)[-3000:]

    # the library runner (run_job --remote), its session a Spark Connect client of the shared server
    done = subprocess.run([sys.executable, "-m", "spark_jobs.run_job", "--remote", connect_url, "--job-id", "halving",
                           "--body", "halving_body:Halving", "--input", str(tmp_path / "no-input"),
                           "--checkpoint-root", str(tmp_path / "lib"), "--output-path", str(tmp_path / "lib-out"),
                           "--max-epochs", "20", "--tolerance", "0.5", "--num-partitions", "2"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "TERMINATED", summary
    assert "the body's package halving_body (2 file(s)" in done.stderr, done.stderr[-3000:]
    values = read_published(tmp_path / "lib-out", "values")
    assert dict(zip(values["key"], values["steps"])) == EXPECTED

    # a DAG of it, its tasks with the package on their PYTHONPATH (not the server's)
    dags = write_dag_file(tmp_path / "dags", "halving", "halving_body:Halving", epochs_per_batch=20, job_id="halving",
                          input_path=str(tmp_path / "no-input"), output_path=str(tmp_path / "out"),
                          checkpoint_root=str(tmp_path / "store"), max_epochs=20, tolerance=0.5)
    env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": dags}
    done = airflow(env, "dags", "test", "halving", "--conf", json.dumps({"job_id": "halving-dag"}))
    log = done.stdout + done.stderr
    assert "state=success" in log, log[-6000:]
    assert "the body's package halving_body (2 file(s)" in log, log[-3000:]
    published = read_published(tmp_path / "out" / "halving-dag", "values")
    assert dict(zip(published["key"], published["steps"])) == EXPECTED

    # the package stays its sessions': another session on the same server, while the shipping
    # one is open, cannot import it
    apart = subprocess.run([sys.executable, "-c", APART, connect_url], env=env, cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert apart.stdout.strip().splitlines()[-3:] == [
        "shipped: imported", "other session: not importable", "shipped again: imported"], \
        (apart.stdout + apart.stderr)[-3000:]

