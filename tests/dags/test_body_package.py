"""A body's package reaches the Spark Connect server's Python workers (spark_jobs.session.
ship_body): a body whose step is a Python UDF from its own package, importable by the client
only (the shared server was started with the checkout alone on its path), runs through the
library runner on a Spark Connect session and through a DAG, and both give the arithmetic."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from include.config import JobConfig
from spark_jobs.runner import IterationRunner
from tests.conftest import ROOT
from tests.dags.conftest import airflow
from tests.helpers import read_published

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXPECTED = {k: k.bit_length() for k in range(1, 41)}

DAG_FILE = '''# an Airflow DAG (Airflow's safe mode parses files that say "airflow" and "dag")
from iterations.dag_factory import iteration_dag, job_params

dag = iteration_dag(
    dag_id="halving",
    body="halving_body:Halving",
    params=job_params(job_id="halving", input_path={input!r}, output_path={output!r}, checkpoint_root={store!r},
                      max_epochs=20, tolerance=0.5),
    epochs_per_batch=20,
)
'''


@pytest.fixture
def site(tmp_path):
    """The body's package in a path of this test process only."""
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "tests", "data", "halving_body"), site / "halving_body",
                    ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(site))
    yield site
    sys.path.remove(str(site))
    for name in [m for m in sys.modules if m == "halving_body" or m.startswith("halving_body.")]:
        del sys.modules[name]


def test_a_udf_body_runs_on_a_server_without_its_package(airflow_env, connect_url, site, tmp_path):
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from halving_body.rules import halve

    spark = SparkSession.builder.remote(connect_url).create()
    try:
        # the server's Python workers cannot import the package by themselves
        with pytest.raises(Exception, match="No module named 'halving_body'"):
            spark.range(3).select(F.udf(halve, "long")("id")).collect()
    finally:
        spark.stop()

    # the library runner, its session a Spark Connect client of the shared server
    spark = SparkSession.builder.remote(connect_url).create()
    try:
        config = JobConfig(job_id="halving", body="halving_body:Halving", input=str(tmp_path / "no-input"),
                           checkpoint_root=str(tmp_path / "lib"), max_epochs=20, tolerance=0.5, num_partitions=2)
        result = IterationRunner(config, spark).run()
        assert result.status.value == "TERMINATED" and result.decisions[-1].reason.startswith("converged")
        values = result.outputs["values"].toPandas()
        assert dict(zip(values["key"], values["steps"])) == EXPECTED
    finally:
        spark.stop()

    # a DAG of it, its tasks with the package on their PYTHONPATH (not the server's)
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "halving_dag.py").write_text(DAG_FILE.format(
        input=str(tmp_path / "no-input"), output=str(tmp_path / "out"), store=str(tmp_path / "store")))
    env = {**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
           "PYTHONPATH": os.pathsep.join([str(site), airflow_env["PYTHONPATH"]])}
    done = airflow(env, "dags", "test", "halving", "--conf", json.dumps({"job_id": "halving-dag"}))
    log = done.stdout + done.stderr
    assert "state=success" in log, log[-6000:]
    assert "the body's package halving_body (2 file(s)" in log, log[-3000:]
    published = read_published(tmp_path / "out" / "halving-dag", "values")
    assert dict(zip(published["key"], published["steps"])) == EXPECTED

