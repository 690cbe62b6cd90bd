"""The PageRank DAG on a real multi-process Spark standalone cluster, run by ``airflow dags test``
(a warm Airflow of the tests' own, tests/dags/conftest.py) in both Spark modes: the native
stack's cluster (tests/dags/conftest.py ``stack``: a master and two worker JVMs on loopback,
started from the pyspark installation, and a Spark Connect server running as an application on
it), reached through Airflow connections only, as on a production deployment, with checkpoints
in the S3 store (moto_server); and the cluster's faults: a worker lost in the middle of an
epoch, the driver of an epoch killed, the Spark Connect server restarted between epochs, each
ending with the failure-free run's result."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from include.process.failpoints import DIR_ENV
from stack.services import Stack
from stack.spark import StandaloneCluster, group_of
from tests.dags.conftest import airflow, start_airflow
from tests.helpers import (
    armed,
    failure_free_ranks,
    graph_with_dangling,
    release_hold,
    s3_checkpoint_ids,
    s3_published_ranks,
    wait_held,
    write_edges,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]

# Where the fault tests stop a task (once) so the test can act while it is in the middle of
# its work: the stack's Spark workers carry the armed points to every executor (``armed``);
# each names its test's job only.
WORKER_LOST_AT = "tail.partition_written@job=pr-worker-lost@epoch=1@partition=1"
DRIVER_KILLED_AT = "tail.partition_written@job=pr-driver-killed@epoch=0@partition=1"
CONNECT_RESTART_AT = "commit.after_release@job=pr-connect-restart@epoch=1"


class StackCluster:
    """The stack's Spark cluster as these tests act on it: its master's status and ports, the
    machine of one of its workers lost (every process of the worker's session) and started again,
    the Spark Connect server restarted (``Stack.kill`` and ``Stack.restart``)."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.spark: StandaloneCluster = stack.spark()
        self.workdir = self.spark.workdir
        self.connect_port, self.master_port = self.spark.connect_port, self.spark.master_port

    def status(self) -> dict:
        return self.spark.status()

    def alive_workers(self) -> int:
        return self.spark.alive_workers()

    def wait_workers(self, count: int) -> None:
        self.spark.wait_workers(count)

    def worker_running(self, pid: int) -> str:
        """The worker (``worker-1``, ``worker-2``) whose executor runs process ``pid``: its session
        leads the process groups of the worker's JVM and, under it, its executors."""
        workers = {session.sid: name[len("spark-"):] for name, session in self.stack.sessions().items()
                   if name.startswith("spark-worker-")}
        found = group_of(pid, workers)
        if found is None:
            raise LookupError(f"process {pid} does not run under a Spark worker of the stack ({workers})")
        return found

    def lose_worker(self, name: str, also: int) -> None:
        """A worker's machine dies: SIGKILL the process group of ``also`` (a Python worker's daemon
        leads its own), then every process of the worker's session, no goodbye to the master."""
        try:
            os.killpg(os.getpgid(also), signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.stack.kill(f"spark-{name}")

    def start_worker(self, name: str) -> None:
        self.stack.restart(f"spark-{name}")

    def restart_connect(self) -> None:
        self.stack.restart("spark-connect")


@pytest.fixture(scope="module")
def cluster(stack):
    return StackCluster(stack)


@pytest.fixture(scope="module")
def holds(stack_holds):
    return stack_holds


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


# --- faults ------------------------------------------------------------------------------------


def start_dags_test(env, conf, log_path):
    return start_airflow(env, "dags", "test", "iterate_pagerank", "--conf", json.dumps(conf), log_path=log_path)


def finished(proc: subprocess.Popen, log_path, timeout: float = 900) -> str:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    out = open(log_path).read()
    assert proc.returncode == 0 and "state=success" in out, out[-8000:]
    return out


def held(holds: str, spec: str, proc: subprocess.Popen, log_path, timeout: float = 600) -> int:
    """Wait until a task stops at the hold ``spec``; the pid of the process holding."""
    return wait_held(holds, spec, alive=lambda: proc.poll() is None, timeout=timeout,
                     context=lambda: open(log_path).read()[-6000:])


def fault_conf(job, edges, bucket, epochs) -> dict:
    return {"job_id": job, "input_path": edges, "checkpoint_root": f"s3://{bucket}/ckpt",
            "output_path": f"s3://{bucket}/out-{job}", "max_epochs": epochs, "tolerance": 0, "num_partitions": 4}


def test_a_worker_lost_in_the_middle_of_an_epoch(cluster, holds, airflow_env, spark, moto_endpoint, bucket,
                                                 tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.1, seed=22))
    epochs, log_path = 2, tmp_path / "dags_test.log"  # the worker lost in the second one, epoch 1
    victim = None
    with armed(holds, WORKER_LOST_AT):
        proc = start_dags_test(cluster_env(airflow_env, cluster, moto_endpoint, "connect"),
                               fault_conf("pr-worker-lost", edges, bucket, epochs), log_path)
        try:
            pid = held(holds, WORKER_LOST_AT, proc, log_path)  # a task of epoch 1's tail, its file written
            victim = cluster.worker_running(pid)
            cluster.lose_worker(victim, also=pid)
            log = finished(proc, log_path)
        finally:
            if proc.poll() is None:
                proc.kill()
            if victim is not None:
                cluster.start_worker(victim)
                cluster.wait_workers(2)
    spark_log = open(os.path.join(cluster.workdir, "connect.log"), errors="replace").read()
    assert "Lost executor" in spark_log and "worker lost" in spark_log
    # Spark ran the lost task again on the other worker: no Airflow retry, one attempt per epoch
    assert log.count("[DAG TEST] starting task_id=epoch_1.run ") == 1
    for epoch in range(epochs):
        assert len(attempts_of(log, epoch)) == 1, f"epoch {epoch} ran once"
    assert s3_checkpoint_ids(moto_endpoint, bucket, "pr-worker-lost") == list(range(epochs + 1))
    assert s3_published_ranks(moto_endpoint, f"s3://{bucket}/out-pr-worker-lost") == \
        failure_free_ranks(spark, edges, epochs, tmp_path, 4)


def attempts_of(log: str, epoch: int) -> list[str]:
    return re.findall(rf"epoch {epoch}: attempt (a{epoch}-[0-9a-f]+);", log)


def committed_attempt(moto_endpoint, bucket, job, checkpoint_id) -> str:
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    body = s3.get_object(Bucket=bucket, Key=f"ckpt/jobs/{job}/checkpoints/{checkpoint_id:010d}.json")["Body"].read()
    return json.loads(body)["attempt_id"]


def driver_processes(job: str) -> list[int]:
    """The driver of an epoch started by spark-submit: its JVM and the Python program it runs."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"spark_jobs/epoch.py") for a in argv) and job.encode() in argv:
                pids.append(int(entry))
    return pids


def test_the_driver_of_an_epoch_killed(cluster, holds, airflow_env, spark, moto_endpoint, bucket, tmp_path):
    """Submit mode: each epoch (and the finish) is an application of its own on the cluster,
    its driver started by spark-submit. Epoch 0's driver is killed while its tail runs: Airflow
    retries the task with a new attempt, a new application."""
    job, epochs, log_path = "pr-driver-killed", 1, tmp_path / "dags_test.log"
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.1, seed=23))
    before = {a["id"] for a in cluster.status()["completedapps"]}
    with armed(holds, DRIVER_KILLED_AT):  # released at the end: the killed attempt's task may write on, fenced
        proc = start_dags_test(cluster_env(airflow_env, cluster, moto_endpoint, "submit"),
                               fault_conf(job, edges, bucket, epochs), log_path)
        held(holds, DRIVER_KILLED_AT, proc, log_path)  # epoch 0's tail is running on the cluster
        drivers = driver_processes(job)
        assert drivers, "no driver process found"
        for pid in drivers:
            os.kill(pid, signal.SIGKILL)
    log = finished(proc, log_path)

    first, second = attempts_of(log, 0)  # the Airflow retry of epoch_0.run made a new attempt
    assert log.count("[DAG TEST] starting task_id=epoch_0.run ") == 2
    assert committed_attempt(moto_endpoint, bucket, job, 0) == second != first
    assert s3_checkpoint_ids(moto_endpoint, bucket, job) == list(range(epochs + 1)), "each checkpoint committed once"
    ran = [a["name"] for a in cluster.status()["completedapps"] if a["id"] not in before]
    assert sorted(ran) == [f"iterations-{job}-{i}" for i in (0, 0, 1)], ran  # epoch 0 twice, the finish
    assert cluster.alive_workers() == 2
    assert s3_published_ranks(moto_endpoint, f"s3://{bucket}/out-{job}") == \
        failure_free_ranks(spark, edges, epochs, tmp_path, 4)


def test_the_dag_in_connect_mode_with_its_server_restarted_between_epochs(cluster, holds, airflow_env, spark,
                                                                           moto_endpoint, bucket, tmp_path):
    """Connect mode: every epoch runs on the Spark Connect server the ``spark_connect_default``
    connection names, an application of the cluster with its two cores. The server is
    restarted after epoch 1 commits: the next epoch runs on the new application, and no epoch
    runs twice."""
    job, epochs, log_path = "pr-connect-restart", 3, tmp_path / "dags_test.log"
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.1, seed=24))
    env = {**cluster_env(airflow_env, cluster, moto_endpoint, "connect"),
           "ITERATIONS_FAILPOINTS": f"{CONNECT_RESTART_AT}=hold", DIR_ENV: holds}
    proc = start_dags_test(env, fault_conf(job, edges, bucket, epochs), log_path)
    try:
        held(holds, CONNECT_RESTART_AT, proc, log_path)  # epoch 1 committed, epoch 2 not started
        apps = [a for a in cluster.status()["activeapps"] if "Connect" in a["name"]]
        cluster.restart_connect()
    finally:
        release_hold(holds, CONNECT_RESTART_AT)
    log = finished(proc, log_path)

    assert f"Spark Connect server from connection 'spark_connect_default': sc://127.0.0.1:{cluster.connect_port}" in log
    status = cluster.status()
    now = [a for a in status["activeapps"] if "Connect" in a["name"]]
    assert len(apps) == len(now) == 1 and apps[0]["id"] != now[0]["id"], "a new Spark Connect application"
    assert apps[0]["cores"] == now[0]["cores"] == 2, (apps, now)
    assert len([w for w in status["workers"] if w["state"] == "ALIVE"]) == 2
    for epoch in range(epochs):
        assert f"epoch {epoch} committed" in log
        assert len(attempts_of(log, epoch)) == 1, f"epoch {epoch} ran once"
    assert s3_checkpoint_ids(moto_endpoint, bucket, job) == list(range(epochs + 1))
    assert s3_published_ranks(moto_endpoint, f"s3://{bucket}/out-{job}") == \
        failure_free_ranks(spark, edges, epochs, tmp_path, 4)


def test_the_master_killed_and_started_again_keeps_the_connect_application(cluster):
    """Found by the chaos run (tests.chaos, ``spark-master``): a master SIGKILLed and started
    again by its supervisor forgot the Spark Connect server's application; the workers,
    registering again, killed its executors, and every later Spark job of the server waited for
    executors that never came. With its recovery folder the new master reads the application
    and the workers back: the same application keeps its cores, and a Spark job through the
    server completes."""
    def connect_apps() -> list[dict]:
        try:
            return [a for a in cluster.status()["activeapps"] if "Connect" in a["name"]]
        except OSError:  # the master is starting
            return []

    [before] = connect_apps()
    assert cluster.stack.kill("spark-master")
    cluster.stack.restart("spark-master")
    deadline = time.monotonic() + 180
    while not ([a["id"] for a in connect_apps()] == [before["id"]] and cluster.alive_workers() == 2
               and cluster.status().get("status") == "ALIVE"):
        assert time.monotonic() < deadline, f"the application and the workers not back: {cluster.status()}"
        time.sleep(1)
    query = ("from pyspark.sql import SparkSession; "
             f"s = SparkSession.builder.remote('sc://127.0.0.1:{cluster.connect_port}').getOrCreate(); "
             "print(s.range(0, 1000, 1, 4).selectExpr('sum(id) AS n').collect()[0].n)")
    done = subprocess.run([sys.executable, "-c", query], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.split()[-1] == "499500", done.stderr[-3000:]
    [after] = connect_apps()
    assert after["cores"] == before["cores"] == 2, (before, after)


def test_the_master_binds_exactly_its_ports_or_chooses_again(tmp_path, monkeypatch):
    """Another process holding a port picked free a moment before (the race that once made a
    Spark driver's UI answer for the master): a port the caller gave fails the start, naming
    it; a port left to choose is chosen again. The master never moves to the next port, where
    its clients would not look for it."""
    import socket

    import stack.spark

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        given = StandaloneCluster(str(tmp_path / "given"), master_port=port)
        os.makedirs(given.workdir)
        with pytest.raises(RuntimeError, match=f"ports {port} and "):
            given.start_master()
        assert "master" not in given.procs

        picks = iter([port])
        real = stack.spark.free_port
        monkeypatch.setattr(stack.spark, "free_port", lambda: next(picks, None) or real())
        chosen = StandaloneCluster(str(tmp_path / "chosen"))
        os.makedirs(chosen.workdir)
        try:
            chosen.start_master()
            assert port not in (chosen.master_port, chosen.master_ui)
            assert chosen.status()["url"] == chosen.master_url
        finally:
            chosen.stop()
    finally:
        taken.close()
