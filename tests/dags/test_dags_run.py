"""The example DAGs run end to end with ``airflow dags test`` on the embedded default (warm Spark
Connect session, local checkpoint store), and their outputs equal the references."""

from __future__ import annotations

import io
import json
import os
import re
import time
import uuid

import numpy as np
import pandas as pd
import pytest

from include.contract.body import resolve_body
from include.contract.config import InputSpec, JobConfig
from include.epoch.job import IterationJob
from spark_jobs.runner import IterationRunner
from spark_jobs.storeio import read_input
from tests.dags.conftest import airflow, asset_events
from tests.faults.airflow_sweep import task_tries
from tests.helpers import StatsdListener, graph_with_dangling, lineage_events, ranks_of, read_published, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def published_of(output_path, name):
    from include.publication.outputs import published

    return published(str(output_path), name)


def published_job(output_path, name) -> str:
    return published_of(output_path, name).job_id


def dags_test(env, dag_id, conf):
    done = airflow(env, "dags", "test", dag_id, "--conf", json.dumps(conf))
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert "state=success" in done.stdout + done.stderr
    return done.stdout + done.stderr


def test_iterate_pagerank(airflow_env, spark, tmp_path):
    """PageRank through the DAG equals the library's; each committed epoch sends its figures
    through Airflow's Stats, received here by a StatsD listener on loopback."""
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.12, seed=5))
    conf = {"job_id": "pr-dag", "input_path": edges, "checkpoint_root": str(tmp_path / "store"),
            "output_path": str(tmp_path / "out"), "max_epochs": 4, "tolerance": 0, "num_partitions": 3,
            "damping": 0.85, "retain_last": 10}
    statsd = StatsdListener()
    lineage = tmp_path / "openlineage.jsonl"  # the OpenLineage provider's file transport
    ol_env = {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage),
                                                              "append": True}),
              "AIRFLOW__OPENLINEAGE__NAMESPACE": "iterations-test"}
    try:
        log = dags_test({**airflow_env, **statsd.env(), **ol_env}, "iterate_pagerank", conf)
        time.sleep(0.5)  # the last datagrams
    finally:
        statsd.close()
    lines = [re.search(r"epoch (\d+) committed: feedback=(\d+) l1_delta=(\S+)", line) for line in log.splitlines()]
    committed = {int(m[1]): (int(m[2]), float(m[3])) for m in lines if m}
    assert sorted(committed) == list(range(4)), "one progress line per epoch"
    scoped = "airflow.iterations.iterate_pagerank.pr-dag.epoch"
    for name in ("airflow.iterations.epoch", scoped):  # tagged (tags dropped by plain StatsD) and by name
        assert statsd.values(f"{name}.number", "g") == [0, 1, 2, 3], statsd.lines[:50]
        assert statsd.values(f"{name}.feedback", "g") == [committed[e][0] for e in range(4)]
        assert statsd.values(f"{name}.metric.l1_delta", "g") == pytest.approx([committed[e][1] for e in range(4)], rel=1e-3)
        assert len(statsd.values(f"{name}.duration", "ms")) == 4 and min(statsd.values(f"{name}.duration", "ms")) > 0
        sizes = statsd.values(f"{name}.checkpoint_bytes", "g")
        assert len(sizes) == 4 and min(sizes) > 0
        assert statsd.values(f"{name}.committed", "c") == [1] * 4
    published = read_published(tmp_path / "out", "ranks")
    ours = dict(zip(published["node"], published["rank"]))

    reference = JobConfig(job_id="pr-lib", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "lib"),
                          max_epochs=4, tolerance=0.0, num_partitions=3)
    assert ours == ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])

    job = IterationJob(JobConfig(job_id="pr-dag", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "store")))
    final_id = job.log.latest_id()
    # the publication is an asset event of the output's Asset, through the finish's alias
    uri = (tmp_path / "out" / "ranks").as_uri()
    first = {"job_id": "pr-dag", "checkpoint_id": final_id, "version": f"v-pr-dag-{final_id}", "rows": len(ours),
             "format": "parquet", "replaces": None}
    assert asset_events(airflow_env, uri) == [{"extra": first, "dag_id": "iterate_pagerank", "task_id": "finish",
                                               "run_id": asset_events(airflow_env, uri)[0]["run_id"]}]
    assert f"output {uri}: asset event for version v-pr-dag-{final_id} ({len(ours)} rows)" in log
    first_events = lineage_events(lineage)
    again = dags_test({**airflow_env, **ol_env}, "iterate_pagerank", conf)
    assert "job pr-dag is TERMINATED: epoch 4 is not needed" in again, "a finished job computes nothing"
    assert job.log.latest_id() == final_id, "a second run commits nothing"
    assert dict(zip(*read_published(tmp_path / "out", "ranks")[["node", "rank"]].T.values)) == ours
    assert [e["extra"] for e in asset_events(airflow_env, uri)] == [first], "the same publication: no second event"
    assert f"output {uri}: the asset event of this publication (version v-pr-dag-{final_id}) was emitted" in again

    # recompute from epoch 3 to the same end: a new generation, the outputs replaced by the same ranks
    # lineage: every task's run a child of the one logical job, the edges its input, the ranks
    # its output at the version of the final checkpoint, reported again (not anew) by the
    # second run; nothing of the checkpoint store is ever a dataset
    events = lineage_events(lineage)
    runs = {e["run"]["facets"]["iterations"]["jobRunId"] for e in events}
    assert {e["run"]["facets"]["iterations"]["job"] for e in events} == {"iterations.pr-dag"} and len(runs) == 1
    assert {e["job"]["name"].split(".", 1)[1] for e in first_events if e["eventType"] == "COMPLETE"} >= \
        {"epoch_0.run", "finish", "continue"}
    heads = [e["run"]["facets"]["iterations"] for e in first_events
             if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".run")]
    assert sorted(h["epoch"] for h in heads) == [0, 1, 2, 3]
    assert {(i["namespace"], i["name"]) for e in events for i in e.get("inputs", [])} == {("file", edges)}
    finishes = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == "iterate_pagerank.finish"]
    assert len(finishes) == 2
    for e in finishes:
        [out] = e["outputs"]
        assert (out["namespace"], out["name"]) == ("file", str(tmp_path / "out" / "ranks"))
        assert out["facets"]["version"]["datasetVersion"] == f"v-pr-dag-{final_id}"
        assert out["outputFacets"]["outputStatistics"]["rowCount"] == len(ours)
    store_root = str(tmp_path / "store")
    named = [d["name"] for e in events for d in e.get("inputs", []) + e.get("outputs", [])]
    assert not [n for n in named if n.startswith(store_root)], "checkpoint objects are never datasets"

    rewound = dags_test(airflow_env, "iterate_pagerank", {**conf, "rewind_to": 3})
    assert "generation pr-dag.r1 recomputes it from epoch 3 of pr-dag" in rewound
    assert "job pr-dag.r1: starts from checkpoint 2 of pr-dag (copied, verified): epoch 3 is next" in rewound
    assert [e for e in range(8) if f"epoch {e} committed" in rewound] == [3]
    assert published_job(tmp_path / "out", "ranks") == "pr-dag.r1"
    assert dict(zip(*read_published(tmp_path / "out", "ranks")[["node", "rank"]].T.values)) == ours, \
        "epoch 3 again from checkpoint 2: the ranks of the run it replaced, bit for bit"
    assert job.log.latest_id() == final_id, "the rewound generation is left as it was"
    recomputed = published_of(tmp_path / "out", "ranks")
    assert [e["extra"] for e in asset_events(airflow_env, uri)] == [first, {
        "job_id": "pr-dag.r1", "checkpoint_id": recomputed.checkpoint_id,
        "version": f"v-pr-dag.r1-{recomputed.checkpoint_id}", "rows": recomputed.rows, "format": "parquet",
        "replaces": f"v-pr-dag-{final_id}"}], "the recompute is a publication of its own, naming the one it replaced"


def test_iterate_kmeans_on_digits_in_connect_mode(airflow_env, spark, tmp_path):
    """scikit-learn's bundled digits (1,797 points x 64 features, one array column) through the
    DAG in connect mode (its default) equal scikit-learn's Lloyd from the same initial centroids."""
    from sklearn.cluster import KMeans as SkKMeans
    from sklearn.datasets import load_digits

    X = load_digits().data.astype(float)
    pd.DataFrame({"id": np.arange(len(X)), "pixels": list(X)}).to_parquet(tmp_path / "digits.parquet")
    epochs = 6
    conf = {"job_id": "km-dag", "input_path": str(tmp_path / "digits.parquet"),
            "checkpoint_root": str(tmp_path / "store"), "output_path": str(tmp_path / "out"),
            "max_epochs": epochs, "tolerance": 0.0, "num_partitions": 2, "k": 10, "seed": 7}
    dags_test(airflow_env, "iterate_kmeans", conf)

    body = resolve_body("kmeans")
    params = body.parse_params({"k": 10, "seed": 7})
    init = np.array(body.initial_centroids(body.load(read_input(spark, InputSpec(conf["input_path"]), 2), params), params))
    # the pixels are integers and so are the initial centroids (k-means++ picks points): some
    # points are exactly as far from two of them, and the body's rule (the first of equals)
    # decides. scikit-learn breaks such ties by rounding, so its Lloyd starts from the first
    # step's means, which are no longer integers (no exact ties after it)
    first = np.argmin(((X[:, None, :] - init[None]) ** 2).sum(axis=-1), axis=1)
    after_first = np.array([X[first == c].mean(axis=0) if (first == c).any() else init[c] for c in range(10)])
    reference = SkKMeans(n_clusters=10, init=after_first, n_init=1, max_iter=epochs - 1, tol=0.0,
                         algorithm="lloyd").fit(X)
    assert reference.n_iter_ == epochs - 1, "the job stops at max_epochs, before convergence"
    centroids = read_published(tmp_path / "out", "centroids").sort_values("cluster_id")
    assert list(centroids.columns) == ["cluster_id", "pixels"], "the centroids as the input has the points"
    np.testing.assert_allclose(np.stack(centroids["pixels"]), reference.cluster_centers_, atol=1e-9)
    assignments = read_published(tmp_path / "out", "assignments").sort_values("id")
    assert list(assignments.columns) == ["id", "pixels", "cluster_id"]
    assert (assignments["cluster_id"].to_numpy() == reference.labels_).all()


@pytest.mark.s3
def test_iterate_pagerank_on_s3_through_the_aws_connection(airflow_env, spark, moto_endpoint, bucket, tmp_path):
    """Input, checkpoints and outputs on S3 (moto_server), reached through the Airflow ``aws``
    connection alone: no AWS variables in the environment of the DAG run."""
    import boto3

    graph = graph_with_dangling(25, 0.15, seed=11)
    edges = write_edges(tmp_path / "edges.csv", graph)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.put_object(Bucket=bucket, Key="in/edges.csv", Body=open(edges, "rb").read())
    secret = f"conn-secret-{uuid.uuid4().hex}"  # moto takes any key; this one is grepped for below
    connection = {"conn_type": "aws", "login": "conn-key", "password": secret,
                  "extra": {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}}
    env = {k: v for k, v in airflow_env.items() if not k.startswith("AWS_")}
    env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(connection)
    conf = {"job_id": "pr-s3", "input_path": f"s3://{bucket}/in/edges.csv", "checkpoint_root": f"s3://{bucket}/ckpt",
            "output_path": f"s3://{bucket}/out", "max_epochs": 2, "tolerance": 0, "num_partitions": 2}
    output = dags_test(env, "iterate_pagerank", conf)

    # The secret never leaves the connection: not in the run's output (with the task logs), not
    # in Airflow's home (the SQLite database: XCom, rendered template fields, DAG run conf), not
    # in the Spark Connect server's files, not in any object the job wrote to the store.
    assert secret not in output
    leaks, seen = [], []
    for top in (airflow_env["AIRFLOW_HOME"], airflow_env["ITERATIONS_SPARK_CONNECT_DIR"]):
        for folder, _dirs, files in os.walk(top):
            for name in files:
                with open(os.path.join(folder, name), "rb") as f:
                    data = f.read()
                if secret.encode() in data:
                    leaks.append(os.path.join(folder, name))
                if bucket.encode() in data:
                    seen.append(name)
    # (``dags test`` writes the task logs to its output, checked above, not to files)
    assert "airflow.db" in seen and bucket in output, f"this run's values are where the grep looks: {seen}"
    objects = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
               for o in page.get("Contents", [])]
    assert len(objects) > 20
    leaks += [k for k in objects if secret.encode() in s3.get_object(Bucket=bucket, Key=k)["Body"].read()]
    assert leaks == [], f"the connection's secret appears in {leaks}"

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="ckpt/jobs/pr-s3/checkpoints/")["Contents"]]
    assert [k.rsplit("/", 1)[1] for k in keys] == [f"{i:010d}.json" for i in range(3)]
    from include.publication.outputs import published

    current = published(f"s3://{bucket}/out", "ranks", endpoint_url=moto_endpoint)
    got = pd.concat([pd.read_parquet(io.BytesIO(s3.get_object(Bucket=bucket, Key=loc.split("/", 3)[3])["Body"].read()))
                     for loc in current.locations])
    reference = JobConfig(job_id="pr-ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "ref"),
                          max_epochs=2, tolerance=0.0, num_partitions=2)
    assert dict(zip(got["node"], got["rank"])) == ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])


def test_iterate_pagerank_in_spark_submit_mode(airflow_env, spark, tmp_path):
    """The conventional cluster path: each epoch ``spark-submit spark_jobs/epoch.py`` through the
    apache-spark provider's hook (here against local[2])."""
    env = {**airflow_env, "ITERATIONS_SPARK_MODE": "submit",
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"})}
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(15, 0.2, seed=6))
    conf = {"job_id": "pr-submit", "input_path": edges, "checkpoint_root": str(tmp_path / "store"),
            "output_path": str(tmp_path / "out"), "max_epochs": 1, "tolerance": 0, "num_partitions": 2}
    log = dags_test(env, "iterate_pagerank", conf)
    assert "spark-submit" in log and "epoch 0 committed" in log
    reference = JobConfig(job_id="pr-ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "ref"),
                          max_epochs=1, tolerance=0.0, num_partitions=2)
    got = read_published(tmp_path / "out", "ranks")
    assert dict(zip(got["node"], got["rank"])) == ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])


def test_stop_modes_suspend_by_param_and_drain_by_the_control_dag(airflow_env, spark, tmp_path):
    """Run 1 (stop=suspend): two epochs, then the job is suspended - no continuation, nothing
    but the epochs' own outputs published. The iterations_stop DAG asks for a drain; run 2's
    first head honours it and finish drains: the final checkpoint is taken from epoch 1 and the
    outputs are published at once, equal to a job that ran 2 epochs."""
    from include.checkpoints.lifecycle import StopMode
    from include.publication.outputs import published_increments

    env = {**airflow_env, "ITERATIONS_EPOCHS_PER_BATCH": "2"}
    X = np.random.default_rng(4).normal(size=(120, 2)) + np.repeat([[0, 0], [6, 6], [-6, 6]], 40, axis=0)
    pd.DataFrame({"id": np.arange(len(X)), "x": X[:, 0], "y": X[:, 1]}).to_parquet(tmp_path / "points.parquet")
    conf = {"job_id": "km-stop", "input_path": str(tmp_path / "points.parquet"),
            "checkpoint_root": str(tmp_path / "store"), "output_path": str(tmp_path / "out"),
            "max_epochs": 30, "tolerance": 0, "num_partitions": 2, "k": 3, "seed": 7}
    log = dags_test(env, "iterate_kmeans", {**conf, "stop": "suspend"})
    assert "is suspended at checkpoint 1: trigger the DAG again" in log
    job = IterationJob(JobConfig(job_id="km-stop", body="kmeans", input=conf["input_path"],
                                 checkpoint_root=conf["checkpoint_root"]))
    assert job.log.control.savepoints() == [1] and job.log.latest_id() == 1
    assert published_increments(conf["output_path"], "centroid_history").checkpoints == (("km-stop", 0), ("km-stop", 1))
    assert not (tmp_path / "out" / "centroids").exists(), "suspend publishes no final output"

    control = dags_test(env, "iterations_stop", {"job_id": "km-stop", "checkpoint_root": conf["checkpoint_root"],
                                                 "mode": "drain"})
    assert "asked job km-stop to drain at its next epoch boundary" in control
    assert job.log.control.stop_request() is StopMode.DRAIN

    log = dags_test(env, "iterate_kmeans", conf)
    assert "drain requested: epoch 2 and the rest of the batch are not run" in log
    assert "final checkpoint 2 committed" in log and "job km-stop is TERMINATED: nothing to continue" in log
    final = job.log.latest()
    assert (final.kind, final.epoch, final.lifecycle.stop) == ("final", 1, StopMode.DRAIN)
    assert job.log.control.stop_request() is None

    limited = JobConfig(job_id="km-lib", body="kmeans", input=conf["input_path"], checkpoint_root=str(tmp_path / "lib"),
                        body_params={"k": 3, "seed": 7}, max_epochs=2, tolerance=0.0, num_partitions=2)
    expected = IterationRunner(limited, spark).run().outputs["centroids"].toPandas().sort_values("cluster_id")
    got = read_published(tmp_path / "out", "centroids").sort_values("cluster_id")
    np.testing.assert_allclose(got[["x", "y"]].to_numpy(), expected[["x", "y"]].to_numpy(), rtol=0, atol=1e-9)


def test_incremental_dag_picks_up_files_dropped_while_it_runs(airflow_env, tmp_path):
    """iterate_sgd_incremental: each epoch's wait_input sensor defers until a file arrives;
    files dropped during the run are each processed once; _DONE ends the input and the job."""
    import threading

    from tests.integration.test_incremental import (
        LR,
        check_exactly_once,
        drop_file,
        end_input,
    )

    env = {**airflow_env, "ITERATIONS_EPOCHS_PER_BATCH": "6", "ITERATIONS_INPUT_POLL_SECONDS": "1"}
    inbox = str(tmp_path / "in")
    os.makedirs(inbox)
    conf = {"job_id": "sgd-dag", "input_path": inbox, "checkpoint_root": str(tmp_path / "store"),
            "output_path": str(tmp_path / "out"), "num_partitions": 2, "learning_rate": LR,
            "max_splits_per_epoch": 1}
    stop = threading.Event()
    started = tmp_path / "store" / "jobs" / "sgd-dag" / "batch-starts"

    def writer():  # the first file comes once epoch 0 waits for it; more keep arriving, then the end
        while not started.exists():
            if stop.wait(0.2):
                return
        for i in range(4):
            if stop.wait(3):
                return
            drop_file(inbox, i)
        if not stop.wait(3):
            end_input(inbox)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        log = dags_test(env, "iterate_sgd_incremental", conf)
    finally:
        stop.set()
        thread.join()
    assert "waiting for new input under" in log, "an epoch waited for input"
    assert "-> terminating (end of input)" in log
    check_exactly_once(inbox, conf["output_path"], files=4)


def test_data_checks_refuse_a_round_then_the_fixed_run_goes_on(airflow_env, spark, tmp_path):
    """The job's input is replaced by another graph at the same path between two batches: the
    next run is refused before any Spark work (the input the job pinned changed, InputChanged
    naming the file), without retries. Put back, the job goes on; a run that adds an expectation
    its next round cannot meet has that round's commit refused by the data checks: the task that
    commits it (the run task: commit_in_head) fails at once with the report's summary and a Data
    checks link; epoch 1 stays the latest checkpoint. Without it, the same DAG run again (same
    logical date: the same batch) recomputes epoch 2 and the job ends as if nothing had happened."""
    import sqlite3

    env = {**airflow_env, "ITERATIONS_EPOCHS_PER_BATCH": "2"}
    good = graph_with_dangling(30, 0.12, seed=5)
    edges = write_edges(tmp_path / "edges.csv", good)
    conf = {"job_id": "pr-checked", "input_path": edges, "checkpoint_root": str(tmp_path / "store"),
            "output_path": str(tmp_path / "out"), "max_epochs": 4, "tolerance": 0, "num_partitions": 2,
            "continuation": False}
    first = airflow(env, "dags", "test", "iterate_pagerank", "2026-03-01", "--conf", json.dumps(conf))
    assert "state=success" in first.stdout + first.stderr, (first.stdout + first.stderr)[-3000:]
    assert "continuation is off for this run" in first.stdout + first.stderr, "the job goes on, the run does not"

    good_bytes = open(edges, "rb").read()
    write_edges(tmp_path / "edges.csv", graph_with_dangling(45, 0.12, seed=6))  # the wrong input
    changed = airflow(env, "dags", "test", "iterate_pagerank", "2026-03-02", "--conf", json.dumps(conf))
    log = changed.stdout + changed.stderr
    assert "state=failed" in log and f"input {edges} changed since job pr-checked pinned it" in log, log[-3000:]
    assert f"{edges} was rewritten" in log and "on_input_change=restart" in log
    assert task_tries(log)["epoch_0.run"] == 1, "refused at once, without the task's retries"
    with open(edges, "wb") as f:  # the input put back
        f.write(good_bytes)

    impossible = {"expectations": [{"name": "ranks_tiny", "type": "expect_column_values_to_be_between",
                                    "kwargs": {"column": "ranks.rank.max", "max_value": 1e-9}}]}
    refused = airflow(env, "dags", "test", "iterate_pagerank", "2026-03-02", "--conf",
                      json.dumps({**conf, "checks": impossible}))
    log = refused.stdout + refused.stderr
    assert "state=failed" in log, log[-3000:]
    assert "epoch 2: the data checks refused the attempt" in log
    assert "FAILED  run.ranks_tiny [critical]" in log, log[-3000:]  # the run's own expectation
    assert "clear the tasks of epoch_0 (run, align, commit)" in log
    job = IterationJob(JobConfig(job_id="pr-checked", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "store")))
    assert job.log.latest_id() == 1
    with sqlite3.connect(os.path.join(env["AIRFLOW_HOME"], "airflow.db")) as db:
        links = [json.loads(v) for (v,) in db.execute(
            "select value from xcom where dag_id='iterate_pagerank' and task_id='epoch_0.run' "
            "and key='_link_DataChecksLink'")]
    assert any(link.startswith("file://") and link.endswith("/data_docs.html") and "/checks/0000000002/" in link
               for link in links), links

    # the same refusal with overlap_commits: epoch 2's checks run behind epoch 3's Spark job, in
    # epoch_1.run, which fails at once naming epoch 2; epoch 3's attempt, planned over it, is aborted
    behind_env = {**env, "ITERATIONS_OVERLAP_COMMITS": "1"}
    refused = airflow(behind_env, "dags", "test", "iterate_pagerank", "2026-03-02", "--conf",
                      json.dumps({**conf, "checks": impossible}))
    log = refused.stdout + refused.stderr
    assert "state=failed" in log, log[-3000:]
    assert "epoch 2: its checks and commit are left to the next epoch's head" in log
    assert "committing it behind epoch 3's Spark job" in log
    assert "epoch 2 (committed behind epoch 3): the data checks refused the attempt" in log, log[-3000:]
    assert "FAILED  run.ranks_tiny [critical]" in log
    assert "clear the tasks of epoch_0 (run, align, commit) and the later ones to recompute epoch 2" in log
    assert re.search(r"checkpoint 3: attempt a3-\w+ aborted: epoch 2 it ran from did not commit", log), log[-3000:]
    assert task_tries(log) == {"epoch_0.run": 1, "epoch_1.run": 1}, "refused at once, without retries"
    assert job.log.latest_id() == 1
    assert not job.attempts.live_attempts(3)[0], "nothing of epoch 3 is left to adopt"

    again = airflow(env, "dags", "test", "iterate_pagerank", "2026-03-02", "--conf", json.dumps(conf))
    log = again.stdout + again.stderr
    assert "state=success" in log, log[-3000:]
    assert "epoch 2 committed" in log and "epoch 3 committed" in log
    reference = JobConfig(job_id="pr-ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "lib"),
                          max_epochs=4, tolerance=0.0, num_partitions=2)
    published = read_published(tmp_path / "out", "ranks")
    assert dict(zip(published["node"], published["rank"])) == ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])
