"""The PageRank DAG on a real multi-process Spark standalone cluster (a master and two worker
JVMs on loopback, started from the pyspark installation, and a Spark Connect server running as
an application on it), in both Spark modes, with its checkpoints in the S3 store (moto_server),
reached through Airflow connections only, as on a production deployment."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from include.config import JobConfig
from include.runner import IterationRunner
from tests.dags.conftest import airflow
from tests.dags.standalone import StandaloneCluster
from tests.helpers import graph_with_dangling, ranks_of, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = StandaloneCluster(str(tmp_path_factory.mktemp("standalone")))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def cluster_env(airflow_env, cluster, moto_endpoint, mode):
    return {
        **{k: v for k, v in airflow_env.items() if not k.startswith("AWS_")},
        "ITERATIONS_SPARK_MODE": mode,
        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
            {"conn_type": "generic", "host": "127.0.0.1", "port": cluster.connect_port}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": "spark://127.0.0.1", "port": cluster.master_port,
             "extra": {"deploy-mode": "client"}}),
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
            {"conn_type": "aws", "login": "testing-key-id", "password": "testing-secret-key",
             "extra": {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}}),
    }


def dags_test(env, conf) -> str:
    done = airflow(env, "dags", "test", "iterate_pagerank", "--conf", json.dumps(conf))
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "state=success" in out, out[-6000:]
    return out


def published_ranks(moto_endpoint, prefix) -> dict:
    import boto3

    from include.outputs import published

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    current = published(prefix, "ranks", endpoint_url=moto_endpoint)
    got = pd.concat([pd.read_parquet(io.BytesIO(s3.get_object(Bucket=loc.split("/")[2], Key=loc.split("/", 3)[3])["Body"].read()))
                     for loc in current.locations])
    return dict(zip(got["node"], got["rank"]))


# submit mode starts a driver and two executor JVMs per epoch (about a minute each here): fewer epochs
@pytest.mark.parametrize("mode, epochs", [("connect", 4), ("submit", 2)])
def test_pagerank_dag_on_a_standalone_cluster(mode, epochs, cluster, airflow_env, spark, moto_endpoint, bucket,
                                              tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.1, seed=21))
    job = f"pr-cluster-{mode}"
    conf = {"job_id": job, "input_path": edges, "checkpoint_root": f"s3://{bucket}/ckpt",
            "output_path": f"s3://{bucket}/out", "max_epochs": epochs, "tolerance": 0, "num_partitions": 4}
    before = {a["id"] for a in cluster.status()["completedapps"]}
    log = dags_test(cluster_env(airflow_env, cluster, moto_endpoint, mode), conf)
    for epoch in range(epochs):
        assert f"epoch {epoch} committed" in log

    status = cluster.status()
    if mode == "connect":
        assert f"Spark Connect server from connection 'spark_connect_default': sc://127.0.0.1:{cluster.connect_port}" in log
        apps = [a for a in status["activeapps"] if "Connect" in a["name"]]
        assert apps and apps[0]["cores"] == 2, status["activeapps"]
    else:
        ran = [a["name"] for a in status["completedapps"] if a["id"] not in before]
        assert sorted(n for n in ran if n.startswith(f"iterations-{job}-")) == \
            [f"iterations-{job}-{i}" for i in range(epochs + 1)], ran  # the epochs and the finish, each an application
    assert len([w for w in status["workers"] if w["state"] == "ALIVE"]) == 2

    reference = JobConfig(job_id="pr-ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "ref"),
                          max_epochs=epochs, tolerance=0.0, num_partitions=4)
    expected = ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])
    assert published_ranks(moto_endpoint, f"s3://{bucket}/out") == expected
