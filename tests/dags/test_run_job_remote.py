"""``run_job --remote``: the library runner as a command, its epochs on a Spark Connect server (the
embedded one the DAG tests share), equal to the same job on a local session."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from include.contract.config import JobConfig
from spark_jobs.runner import IterationRunner
from tests.conftest import ROOT
from tests.helpers import graph_with_dangling, ranks_of, read_published, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def run_job(env, *args):
    return subprocess.run([sys.executable, "-m", "spark_jobs.run_job", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_run_job_on_a_spark_connect_server(airflow_env, connect_url, spark, tmp_path):
    url = connect_url
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.12, seed=11))
    args = ["--job-id", "pr-remote", "--body", "pagerank", "--input", edges, "--checkpoint-root",
            str(tmp_path / "store"), "--output-path", str(tmp_path / "out"), "--max-epochs", "4", "--tolerance", "0",
            "--num-partitions", "3"]
    # from $SPARK_REMOTE, as pyspark reads it
    done = run_job({**airflow_env, "SPARK_REMOTE": url}, *args)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "TERMINATED" and summary["epochs_computed"] == [0, 1, 2, 3]
    published = read_published(tmp_path / "out", "ranks")

    reference = JobConfig(job_id="pr-local", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "lib"),
                          max_epochs=4, tolerance=0.0, num_partitions=3)
    assert dict(zip(published["node"], published["rank"])) == \
        ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])

    again = run_job(airflow_env, "--remote", url, *args)  # the flag; a finished job: nothing to do
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["epochs_computed"] == []


def test_run_job_refuses_a_remote_that_is_not_spark_connect(airflow_env, tmp_path):
    done = run_job(airflow_env, "--remote", "spark://master:7077", "--job-id", "x", "--body", "pagerank",
                   "--input", str(tmp_path / "edges.csv"), "--checkpoint-root", str(tmp_path / "store"))
    assert done.returncode == 2
    assert "--remote: Spark Connect URL 'spark://master:7077' is not supported: expected sc://host:port" in done.stderr


TWO_SESSIONS = """
import json, sys
from pyspark.sql import SparkSession
from include.contract.config import JobConfig
from spark_jobs.runner import IterationRunner
url, edges, root = sys.argv[1:]
first = SparkSession.builder.remote(url).create()
first.range(1).collect()
second = SparkSession.builder.remote(url).create()
config = JobConfig(job_id="pr-second", body="pagerank", input=edges, checkpoint_root=root, max_epochs=4,
                   tolerance=0.0, num_partitions=3)
result = IterationRunner(config, second).run()
print(json.dumps({str(r["node"]): r["rank"] for r in result.outputs["ranks"].collect()}))
"""


def test_the_library_runner_on_the_second_connect_session_of_a_process(airflow_env, connect_url, spark, tmp_path):
    """The variables an epoch hands to the next (a Connect localCheckpoint) are bound by pyspark to
    the thread's active session, not to the one that made them: on a process's second session
    the next epoch failed with DATAFRAME_NOT_FOUND until the executor made its session the
    active one (spark_jobs.session.make_active)."""
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.12, seed=12))
    done = subprocess.run([sys.executable, "-c", TWO_SESSIONS, connect_url, edges, str(tmp_path / "store")],
                          env=airflow_env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    reference = JobConfig(job_id="pr-local", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "lib"),
                          max_epochs=4, tolerance=0.0, num_partitions=3)
    assert ranks == ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])


KMEANS_ON_CONNECT = """
import json, sys
import numpy as np
from pyspark.sql import SparkSession
from include.contract.body import resolve_body
from include.contract.config import JobConfig
from spark_jobs.runner import IterationRunner
from spark_jobs.storeio import read_input

url, points, store = sys.argv[1:]
config = JobConfig(job_id="km-784", body="kmeans", input=points, checkpoint_root=store,
                   body_params={"k": 12, "seed": 2}, max_epochs=30, tolerance=1e-9, num_partitions=2)
spark = SparkSession.builder.remote(url).create()
body = resolve_body("kmeans")
params = body.parse_params(config.body_params)
init = body.initial_centroids(body.load(read_input(spark, config.input, 2), params), params)
result = IterationRunner(config, spark).run()
centroids = result.outputs["centroids"].toPandas().sort_values("cluster_id")
assignments = result.outputs["assignments"].toPandas().sort_values("id")
print(json.dumps({"reason": result.decisions[-1].reason, "init": init,
                  "centroids": np.stack(centroids["image"]).tolist(),
                  "labels": assignments["cluster_id"].tolist(), "columns": list(centroids.columns)}))
"""


def test_kmeans_of_784_features_on_spark_connect(airflow_env, connect_url, tmp_path):
    """784 features (an array column) and k=12 through the library runner on a Spark Connect
    session (in a process of its own: a Connect session switches pyspark's functions to Connect
    for the whole process): the plan does not grow with k or the features (one expression per
    feature used to exceed Spark Connect's message depth), and the result is scikit-learn's
    Lloyd from the same initial centroids."""
    import numpy as np
    import pandas as pd
    from sklearn.cluster import KMeans as SkKMeans

    rng = np.random.default_rng(4)
    centers = rng.normal(0, 4, size=(12, 784))
    X = centers[rng.integers(0, 12, size=900)] + rng.normal(0, 1.0, size=(900, 784))
    pd.DataFrame({"id": np.arange(len(X)), "image": list(X)}).to_parquet(tmp_path / "images.parquet")
    done = subprocess.run([sys.executable, "-c", KMEANS_ON_CONNECT, connect_url, str(tmp_path / "images.parquet"),
                           str(tmp_path / "store")], env=airflow_env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["reason"].startswith("converged") and got["columns"] == ["cluster_id", "image"]
    reference = SkKMeans(n_clusters=12, init=np.array(got["init"]), n_init=1, max_iter=100, tol=0.0,
                         algorithm="lloyd").fit(X)
    np.testing.assert_allclose(np.array(got["centroids"]), reference.cluster_centers_, atol=1e-9)
    assert got["labels"] == reference.labels_.tolist()


def test_the_connect_server_exits_when_out_of_heap(connect_url):
    """The embedded server is every epoch's driver: one that ran out of heap exits (its clients
    fail, and the next task starts a new one) instead of serving half-working."""
    import psutil

    port = connect_url.rsplit(":", 1)[1]
    [server] = [p for p in psutil.process_iter(["name", "cmdline"])
                if p.info["name"] == "java" and f"spark.connect.grpc.binding.port={port}" in (p.info["cmdline"] or [])]
    assert "-XX:+ExitOnOutOfMemoryError" in server.info["cmdline"], server.info["cmdline"]


SESSION_TWICE = r"""
import sys
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

class Reader(DataSourceReader):
    def partitions(self):
        return [InputPartition(i) for i in range(2)]
    def read(self, partition):
        for i in range(500):
            yield (partition.value * 500 + i,)

class Numbers(DataSource):
    @classmethod
    def name(cls):
        return "numbers_twice"
    def schema(self):
        return "x long"
    def reader(self, schema):
        return Reader()

def doubled(batches):
    for batch in batches:
        yield batch.set_column(0, "x", batch.column(0).to_numpy() * 2)

spark = SparkSession.builder.remote(sys.argv[1]).create()
spark.dataSource.register(Numbers)
for line in sys.stdin:  # one job per line, its sum printed; the session stays open between them
    total = spark.read.format("numbers_twice").load().mapInArrow(doubled, "x long").groupBy().sum("x").first()[0]
    print(total, flush=True)
spark.stop()
"""


def test_the_servers_idle_python_daemons_are_stopped_and_a_session_gets_new_ones(airflow_env, connect_url,
                                                                                  monkeypatch):
    """pyspark 4.3 keeps a session's Python daemons until the server stops (SPARK-54055);
    spark_jobs.connect_server.reap_idle_daemons stops those with no worker. A daemon with
    workers is never stopped, and a session whose daemons were stopped runs Python again
    (Spark starts new ones)."""
    import time

    from spark_jobs import connect_server

    monkeypatch.setattr(connect_server, "STATE_DIR", airflow_env["ITERATIONS_SPARK_CONNECT_DIR"])
    port = int(connect_url.rsplit(":", 1)[1])
    server = connect_server.server_process(port)
    assert server is not None, "the embedded server, found by its pid file"
    before = {p.pid for p in server.children()}
    client = subprocess.Popen([sys.executable, "-c", SESSION_TWICE, connect_url], env=airflow_env, cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    expected = str(2 * sum(range(1000)))
    try:
        client.stdin.write("go\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == expected, \
            client.stderr.read()[-3000:] if client.poll() is not None else "a wrong sum"

        def daemons():
            return [p for p in connect_server.python_daemons(server) if p.pid not in before]

        working = [d.pid for d in daemons() if d.children()]
        assert working, "the session's Python ran in a daemon's worker"
        assert not set(connect_server.reap_idle_daemons(port, idle=0)) & set(working), "daemons at work are kept"
        deadline = time.monotonic() + 150  # Spark stops a daemon's idle workers after a minute
        while any(d.children() for d in daemons()) and time.monotonic() < deadline:
            time.sleep(2)
        idle = {d.pid for d in daemons()}
        assert idle and not any(d.children() for d in daemons()), "Spark stopped the idle workers"
        assert idle <= set(connect_server.reap_idle_daemons(port, idle=0))
        deadline = time.monotonic() + 30
        while daemons() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not daemons(), "the session's daemons are gone"

        client.stdin.write("again\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == expected, "the same session, after its daemons were stopped"
        assert daemons(), "Spark started a daemon again"
    finally:
        client.stdin.close()
        try:
            client.wait(timeout=120)
        finally:
            if client.poll() is None:
                client.kill()
    assert client.returncode == 0, client.stderr.read()[-3000:]


def test_a_server_on_the_port_that_is_not_this_projects_is_never_used(airflow_env, connect_url, monkeypatch,
                                                                      tmp_path):
    """Another user's server on the default port (here a bare listener, started by the test):
    ``ensure`` never returns it. With the default port it finds this project's own server where
    it recorded it (``server.json``; else it would start one on a free port); with the port set
    by the deployer it fails naming the port. A server is this project's by its pid file and the
    token of its state directory: another checkout's state directory does not own it."""
    import socket

    from spark_jobs import connect_server

    own = int(connect_url.rsplit(":", 1)[1])
    monkeypatch.setattr(connect_server, "STATE_DIR", airflow_env["ITERATIONS_SPARK_CONNECT_DIR"])
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        port = foreign.getsockname()[1]
        monkeypatch.setattr(connect_server, "DEFAULT_PORT", port)
        monkeypatch.setattr(connect_server, "PORT_GIVEN", False)
        assert connect_server.listening(port) and not connect_server.ours(port)
        assert connect_server.ours(own), "the DAG tests' server, by its pid file and token"
        assert connect_server.ensure() == connect_url, "this project's own server, not the one on the port"
        assert connect_server.status().startswith(f"listening on 127.0.0.1:{own} (this project's")
        monkeypatch.setattr(connect_server, "PORT_GIVEN", True)
        with pytest.raises(RuntimeError, match=f"port {port} .*is held by a server this project did not start"):
            connect_server.ensure()
    monkeypatch.setattr(connect_server, "STATE_DIR", str(tmp_path / "other-checkout"))
    assert not connect_server.ours(own), "another state directory's project does not own it"
