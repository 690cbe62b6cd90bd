"""The production stack, run here (``./run.sh stack``, stack/): Airflow on PostgreSQL with the
CeleryExecutor and Redis, two Celery workers that play two machines (their own host names, temp
and local folders; nothing forked from the scheduler), a Spark standalone cluster with a Spark
Connect server, and moto_server as the S3 store. Started and stopped with the real command; the
DAG runs driven through the REST API; the faults of a deployment: a Celery worker killed while an
epoch's run task is on it, PostgreSQL restarted in the middle of a batch, the triggerer restarted
while an alignment sensor is deferred. Each job ends equal to the failure-free run, and nothing
of the stack is left running after ``stop``."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.store import LocalStore
from stack.procs import listening, session_members
from stack.services import Stack
from tests.conftest import ROOT
from tests.dags.airflow_server import StackApi, processes_titled
from tests.dags.conftest import CHECKPOINTS, EPOCHS_PER_BATCH, OUTPUTS
from tests.helpers import (
    armed,
    failure_free_ranks,
    graph_with_dangling,
    lineage_events,
    read_published,
    s3_checkpoint_ids,
    s3_published_ranks,
    wait_held,
    write_edges,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]



@pytest.fixture(scope="module")
def holds(stack_holds):
    return stack_holds


@pytest.fixture(scope="module")
def api(stack):
    client = StackApi(stack)
    client.unpause("iterate_pagerank")
    return client


def _s3(stack: Stack):
    import boto3

    return boto3.client("s3", endpoint_url=stack.s3_endpoint, region_name="us-east-1",
                        aws_access_key_id="stack-key-id", aws_secret_access_key=stack.state["secrets"]["s3_secret"])


def _keys(stack: Stack, bucket: str, prefix: str) -> list[str]:
    pages = _s3(stack).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _job(stack: Stack, job: str, seed: int, epochs: int = 5) -> tuple[dict, str]:
    edges = write_edges(os.path.join(stack.home, "inputs", f"{job}.csv"), graph_with_dangling(120, 0.04, seed=seed))
    return {"job_id": job, "input_path": edges, "checkpoint_root": CHECKPOINTS, "output_path": f"{OUTPUTS}/{job}",
            "max_epochs": epochs, "tolerance": 0, "num_partitions": 2}, edges


def _runs_of(api: StackApi, job: str, dag_id: str = "iterate_pagerank") -> list[dict]:
    return [r for r in api.runs(dag_id) if (r.get("conf") or {}).get("job_id") == job]


def _wait_job(api: StackApi, job: str, batches: int, timeout: float = 900,
              dag_id: str = "iterate_pagerank") -> list[dict]:
    """The job's DAG runs once ``batches`` of them succeeded (AssertionError when one fails)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = _runs_of(api, job, dag_id)
        failed = [r["dag_run_id"] for r in runs if r["state"] == "failed"]
        assert not failed, f"runs {failed} of {job} failed: {api.log_tail()}"
        if len(runs) >= batches and all(r["state"] == "success" for r in runs):
            return runs
        assert time.monotonic() < deadline, f"{job} not done in {timeout:.0f}s: {[(r['dag_run_id'], r['state']) for r in runs]}"
        time.sleep(2)


def _finish_events(api: StackApi, dag_id: str, uri: str) -> list[dict]:
    """The asset events the finish tasks of ``dag_id`` emitted for the Asset ``uri``."""
    got = api.get(f"/api/v2/assets/events?source_dag_id={dag_id}&source_task_id=finish&limit=1000")
    return [e for e in got["asset_events"] if e["uri"] == uri]


def test_a_job_of_two_batches_with_a_celery_worker_killed_mid_epoch(stack, api, holds, spark, tmp_path):
    """Epoch 1's run task is on a Celery worker when that worker's machine dies (every process
    of the worker: its pool, the task supervisor, the task process). The scheduler notices the
    missing heartbeat, the task runs again on the other worker with a new attempt, the killed
    attempt never commits, and the continuations carry the job to its end. Then a fork of the
    finished job (``_fork_of``)."""
    job = "pr-stack-killed"
    conf, edges = _job(stack, job, seed=31, epochs=3)
    run_id = api.trigger("iterate_pagerank", conf)

    task, plans = "epoch_1.run", f"ckpt/jobs/{job}/attempts/{1:010d}/"
    deadline = time.monotonic() + 400
    while True:
        assert time.monotonic() < deadline, f"{task} never ran: {api.log_tail()}"
        ti = api.task_instances("iterate_pagerank", run_id).get(task, {})
        assert ti.get("state") not in ("success", "failed"), f"{task} ended before its worker could be killed"
        started = [k for k in _keys(stack, "iterations-checkpoints", plans) if k.endswith("/_PLAN.json")]
        if ti.get("state") == "running" and started:  # the attempt is recorded: its Spark job is under way
            break
        time.sleep(0.1)
    victim = ti["hostname"]
    assert victim in ("worker-1", "worker-2"), ti
    killed_attempt = started[0].split("/")[-2]
    assert stack.kill(f"airflow-{victim}"), f"no process of {victim} to kill"
    try:
        runs = _wait_job(api, job, batches=2)
    finally:
        stack.restart(f"airflow-{victim}")

    assert len(runs) == 2, [r["dag_run_id"] for r in runs]
    tis = api.task_instances("iterate_pagerank", run_id)
    assert tis[task]["try_number"] >= 2, "the killed task ran again"
    assert tis[task]["hostname"] != victim, "the retry ran on the other worker"
    hosts = {ti["hostname"] for run in runs for ti in api.task_instances("iterate_pagerank", run["dag_run_id"]).values()
             if ti["state"] == "success"}
    # where Celery places the other tasks is its own choice: the victim may have run none of them
    # (seen in CI); the killed try on one worker and its retry on the other is what the job needs
    assert hosts and hosts <= {"worker-1", "worker-2"}, hosts

    assert s3_checkpoint_ids(stack.s3_endpoint, "iterations-checkpoints", job) == list(range(4)), \
        "epochs 0..2 and the final checkpoint, each once"
    body = _s3(stack).get_object(Bucket="iterations-checkpoints", Key=f"ckpt/jobs/{job}/checkpoints/{1:010d}.json")
    assert json.loads(body["Body"].read())["attempt_id"] != killed_attempt, "the killed attempt is fenced"
    assert s3_published_ranks(stack.s3_endpoint, f"{OUTPUTS}/{job}") == \
        failure_free_ranks(spark, edges, 3, tmp_path, 2), "bit for bit"

    # OpenLineage: the continuation made the second batch's run a child of its continue task
    # (the provider's parent information in the run's conf, which the closed conf accepts); every
    # task of both batches names the one logical job; the killed epoch's retry adds no output
    last_conf = next(r for r in runs if r["dag_run_id"] != run_id)["conf"]
    assert last_conf["openlineage"]["parentJobName"] == "iterate_pagerank.continue", last_conf
    events = lineage_events(os.path.join(holds, "openlineage.jsonl"))
    ours = [e for e in events if e["run"]["facets"]["iterations"]["job"] == f"iterations.{job}"]
    assert {e["run"]["facets"]["iterations"]["jobRunId"] for e in ours} == {ours[0]["run"]["facets"]["iterations"]["jobRunId"]}
    assert {e["job"]["name"] for e in ours} >= {"iterate_pagerank.epoch_0.run", "iterate_pagerank.finish"}
    versions = {d["facets"]["version"]["datasetVersion"] for e in ours for d in e.get("outputs", [])}
    assert versions == {f"v-{job}-3"}, "one output version: the final checkpoint's"

    # The variables kept in the batch's Spark Connect session reach the next task on whichever
    # worker it lands: epoch 1's run task (its retry or the killed try) and the last batch's
    # finish (it publishes) took them over instead of reading the checkpoint back
    last = next(r for r in runs if r["dag_run_id"] != run_id)
    for run, task_id in ((run_id, "epoch_1.run"), (last["dag_run_id"], "finish")):
        text = "".join(open(p, errors="replace").read() for p in glob.glob(os.path.join(
            api.home, "logs", "dag_id=iterate_pagerank", f"run_id={run}", f"task_id={task_id}", "*.log")))
        assert "'ranks' taken over from the Spark Connect session" in text, (run, task_id, text[-3000:])
        # the task logs the workers keep read as sentences: no callsite (loc=file.py:123) on a line
        assert "loc=" not in text and '"loc"' not in text, (run, task_id, text[-3000:])

    # the job goes on as a fork of its checkpoint 1 at another damping (the scenario of
    # docs/airflow.md "Forking a job" on S3 and Celery): only read, the fork's epoch numpy's
    _fork_of(stack, api, job, conf, graph_with_dangling(120, 0.04, seed=31))


def test_postgresql_then_the_triggerer_restarted_in_the_middle_of_a_batch(stack, api, holds, spark, tmp_path):
    """Epoch 1's run task is held once its Spark job has ended (``head.after_run``; epoch 0 is
    committed). PostgreSQL stops (every backend with it) and starts again on its data while the
    task waits: the scheduler, the triggerer, the Celery workers and the task reconnect (a
    component that exits on the lost connection, as the scheduler may, is started again by its
    supervisor, the compose file's ``restart: always``). Then a report of the attempt is held
    back by the test and the task released: it leaves the epoch to the alignment sensor, which
    defers. The triggerer is restarted while it waits, the new one takes the trigger over, and
    the commit task commits the epoch once the report is back. The batch ends as the
    failure-free run does.

    (PostgreSQL is restarted while a task is held, not at a moment picked by polling the store:
    a task instance that Celery starts while the database is down is only found lost after the
    scheduler's heartbeat timeout, five minutes, and retried then. Airflow's behaviour, which
    costs time, not results.)"""
    job = "pr-stack-restarts"
    conf, edges = _job(stack, job, seed=32, epochs=2)
    with armed(holds, f"head.after_run@job={job}@epoch=1") as point:
        run_id = api.trigger("iterate_pagerank", conf)
        wait_held(holds, point, timeout=400, context=api.log_tail)  # epoch 1's Spark job ended
        assert 0 in s3_checkpoint_ids(stack.s3_endpoint, "iterations-checkpoints", job)
        stack.restart("postgres")
        reports = [k for k in _keys(stack, "iterations-checkpoints", f"ckpt/jobs/{job}/attempts/{1:010d}/")
                   if "/_reports/" in k and k.endswith("part-00001.json")]
        assert len(reports) == 1, reports
        s3 = _s3(stack)
        held_back = s3.get_object(Bucket="iterations-checkpoints", Key=reports[0])["Body"].read()
        s3.delete_object(Bucket="iterations-checkpoints", Key=reports[0])

    sensor = "epoch_1.align"
    try:
        deadline = time.monotonic() + 120
        while (ti := api.task_instances("iterate_pagerank", run_id)[sensor])["state"] != "deferred":
            assert time.monotonic() < deadline and ti["state"] in (None, "queued", "running", "scheduled"), \
                (ti["state"], api.log_tail())
            time.sleep(0.2)
        stack.restart("airflow-triggerer")
        time.sleep(3)
        assert api.task_instances("iterate_pagerank", run_id)[sensor]["state"] == "deferred", "still waiting"
        # the task process (titled by Airflow's task runner) is gone: the worker slot is free. A
        # Celery pool process keeps its last task's supervisor title until its next task
        assert not processes_titled(f"airflow worker -- {ti['id']}"), "no task process while it waits"
    finally:  # put back whatever happens: the job's run must not hold the DAG's one active run
        s3.put_object(Bucket="iterations-checkpoints", Key=reports[0], Body=held_back)

    runs = _wait_job(api, job, batches=1)
    assert len(runs) == 1, [r["dag_run_id"] for r in runs]
    assert all(stack.running().values()), stack.running()
    assert s3_checkpoint_ids(stack.s3_endpoint, "iterations-checkpoints", job) == list(range(3))
    assert s3_published_ranks(stack.s3_endpoint, f"{OUTPUTS}/{job}") == \
        failure_free_ranks(spark, edges, 2, tmp_path, 2)
    states = {t: ti["state"] for t, ti in api.task_instances("iterate_pagerank", run_id).items()}
    assert (states["epoch_0.align"], states["epoch_0.commit"]) == ("skipped", "skipped"), states
    assert (states["epoch_1.align"], states["epoch_1.commit"]) == ("success", "success"), states
    assert "1 partition report(s) missing when the Spark job ended (ranks/1)" in \
        _task_log(api, "iterate_pagerank", run_id, "epoch_1.run")
    # only a triggerer resumes a deferred task: the one started after the report was held back did


def _task_log(api: StackApi, dag_id: str, run_id: str, task_id: str) -> str:
    return "".join(open(p, errors="replace").read() for p in glob.glob(os.path.join(
        api.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}", f"task_id={task_id}", "*.log")))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_run_task_marked_failed_stops_its_spark_job_then_the_next_run_resumes(stack, api, holds, spark, tmp_path):
    """Epoch 1's run task is marked failed from the API while its Spark job runs (its tail held
    by a failure point in a Python worker of the Spark Connect server's executors): the task's
    on_kill, run by the Celery worker's task supervisor, interrupts the attempt's Spark job by
    its tag and aborts the attempt; the held Python worker is gone within 10 s. The next run of
    the job resumes at epoch 1 and ends equal to the failure-free run."""
    job = "pr-stack-cancel"
    work = os.path.join(stack.home, "inputs", job)  # under the stack's allowed roots (the local dir is no DAG's)
    edges = write_edges(os.path.join(work, "edges.csv"), graph_with_dangling(40, 0.1, seed=12))
    store = os.path.join(work, "store")
    conf = {"job_id": job, "input_path": edges, "checkpoint_root": store, "output_path": os.path.join(work, "out"),
            "max_epochs": 2, "tolerance": 0, "num_partitions": 2, "continuation": False}
    with armed(holds, f"tail.partition_written@job={job}@epoch=1@partition=0") as point:
        run_id = api.trigger("iterate_pagerank", conf)
        worker = wait_held(holds, point, timeout=300, context=api.log_tail,
                           alive=lambda: api.run_state("iterate_pagerank", run_id) in ("queued", "running"))
        quoted = urllib.parse.quote(run_id, safe="")
        api._request("PATCH", f"/api/v2/dags/iterate_pagerank/dagRuns/{quoted}/taskInstances/epoch_1.run",
                     {"new_state": "failed"})
        marked = time.monotonic()
        while _alive(worker):
            assert time.monotonic() - marked < 10, "the Spark job still runs 10 s after its task was marked failed"
            time.sleep(0.1)
        stopped = time.monotonic() - marked
        print(f"the held Spark task's worker was gone {stopped:.1f} s after its task was marked failed")
    assert api.wait_run("iterate_pagerank", run_id, timeout=300) == "failed"
    assert "cancelled (task epoch_1.run was stopped)" in _task_log(api, "iterate_pagerank", run_id, "epoch_1.run")
    aborted = glob.glob(os.path.join(store, "jobs", job, "aborted", f"{1:010d}", "*"))
    assert len(aborted) == 1 and "cancelled: task epoch_1.run was stopped" in open(aborted[0]).read()
    assert not os.path.exists(os.path.join(store, "jobs", job, "checkpoints", f"{1:010d}.json"))

    again = api.trigger("iterate_pagerank", conf)
    assert api.wait_run("iterate_pagerank", again, timeout=600) == "success", api.log_tail()
    ids = sorted(int(os.path.basename(p)[:-5]) for p in glob.glob(os.path.join(store, "jobs", job, "checkpoints", "*.json")))
    assert ids == [0, 1, 2], "epochs 0 and 1 and the final checkpoint, each once"
    got = read_published(os.path.join(work, "out"), "ranks")
    assert dict(zip(got["node"], got["rank"])) == failure_free_ranks(spark, edges, 2, tmp_path, 2), \
        f"resumed exactly (the job stopped {stopped:.1f} s after)"


def _dates_state(root: str) -> dict[str, bytes]:
    """Every checkpoint manifest, schedule record and publication manifest, by path."""
    out = {}
    for pattern in ("store/jobs/*/checkpoints/*.json", "store/schedules/*/dates/*.json", "out/*/*/_PUBLISHED.json"):
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


def test_backfill_three_dates_then_the_last_again_then_recompute_one(stack, api):
    """``airflow backfill create`` of three dates of the daily PageRank on PostgreSQL: each date's
    batch warm-starts from the previous date's final checkpoint and publishes under its date; a
    backfill of the last date again (``--reprocess-behavior completed``) changes nothing; a
    recompute of the middle date replaces its outputs atomically with what the same starting
    checkpoint gives."""
    work = os.path.join(stack.home, "inputs", "daily")  # under the stack's allowed roots
    edges = write_edges(os.path.join(work, "edges.csv"), graph_with_dangling(60, 0.08, seed=4))
    dag = "iterate_pagerank_daily"
    conf = {"job_id": "daily", "input_path": edges, "checkpoint_root": os.path.join(work, "store"),
            "output_path": os.path.join(work, "out"), "max_epochs": 1, "tolerance": 0,
            "num_partitions": 2}  # one epoch a date: the warm start is seen in its first

    def run_backfill(*extra: str, since: str = "2026-01-01") -> list[dict]:
        """Create the backfill of the dates from ``since`` to the third; its runs once every one of them ended."""
        created = api.cli("backfill", "create", "--dag-id", dag, "--from-date", since, "--to-date", "2026-01-03",
                          "--max-active-runs", "1", "--dag-run-conf", json.dumps(conf), *extra)
        assert created.returncode == 0, created.stdout + created.stderr
        backfill = max(api.get(f"/api/v2/backfills?dag_id={dag}")["backfills"], key=lambda b: b["id"])
        deadline = time.monotonic() + 600
        while not api.get(f"/api/v2/backfills/{backfill['id']}")["completed_at"]:
            assert time.monotonic() < deadline, f"backfill not done in 600 s: {api.log_tail()}"
            time.sleep(2)
        created_at = datetime.fromisoformat(backfill["created_at"])  # the dates it (re)ran ended after it was made
        return [r for r in api.runs(dag) if r["run_type"] == "backfill"
                and r["end_date"] and datetime.fromisoformat(r["end_date"]) > created_at]

    api.unpause(dag)
    runs = run_backfill()
    assert [r["state"] for r in runs] == ["success"] * 3, api.log_tail()
    first = _dates_state(work)
    dates = ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z"]
    assert [k for k in first if k.startswith("out/")] == [f"out/{d}/ranks/_PUBLISHED.json" for d in dates]
    generations, store = {}, LocalStore(os.path.join(work, "store"))
    for d in dates:
        record = json.loads(first[f"store/schedules/daily/dates/{d}.json"])
        assert record["current"] == f"daily.{d}" and record["pending"] is None
        generations[d] = json.loads(open(os.path.join(work, "store", "schedules", "daily", "generations",
                                                      f"daily.{d}.json")).read())
    assert generations[dates[0]]["started_from"] is None
    for prev, d in zip(dates, dates[1:]):  # each batch warm-starts from the previous one's final checkpoint
        final = CheckpointLog(store, f"daily.{prev}").latest_id()
        assert generations[d]["started_from"] == {"job_id": f"daily.{prev}", "checkpoint_id": final}
    first_delta = {d: CheckpointLog(store, f"daily.{d}").load(0, verify="none").decision.metrics["l1_delta"]
                   for d in dates}
    assert first_delta[dates[1]] < first_delta[dates[0]] / 2, f"a warm start moves the ranks less: {first_delta}"

    # each worker imported Great Expectations before its pool forked (iterations.celery_preload),
    # so no task that committed an epoch (the run task: commit_in_head) imported it itself
    for worker in ("worker-1", "worker-2"):
        assert "Preloaded for the task processes in" in open(stack.log(f"airflow-{worker}")).read(), worker
    logs = glob.glob(os.path.join(api.home, "logs", f"dag_id={dag}", "run_id=*", "task_id=epoch_*", "*.log"))
    commits = [p for p in logs if re.search(r"epoch \d+ committed", open(p, errors="replace").read())]
    assert commits
    for path in commits:
        text = open(path, errors="replace").read()
        assert "its modules were preloaded" in text and "imported by this process" not in text, (path, text[-3000:])

    # the last date again: it warm-starts from the second's final checkpoint again
    again = run_backfill("--reprocess-behavior", "completed", since="2026-01-03")
    assert [r["state"] for r in again] == ["success"], api.log_tail()
    assert _dates_state(work) == first, "re-running the batches changes nothing"

    before = read_published(os.path.join(work, "out", dates[1]), "ranks")
    middle = CheckpointLog(store, f"daily.{dates[1]}").latest_id()
    run_id = api.trigger(dag, {**conf, "batch_date": "2026-01-02T00:00:00+00:00", "recompute": True})
    assert api.wait_run(dag, run_id) == "success", api.log_tail()
    record = json.loads(open(os.path.join(work, "store", "schedules", "daily", "dates", f"{dates[1]}.json")).read())
    assert record == {"date": dates[1], "current": f"daily.{dates[1]}.r1", "pending": None}
    manifest = json.loads(open(os.path.join(work, "out", dates[1], "ranks", "_PUBLISHED.json")).read())
    assert manifest["job_id"] == f"daily.{dates[1]}.r1" and manifest["replaces"] == f"v-daily.{dates[1]}-{middle}"
    after = read_published(os.path.join(work, "out", dates[1]), "ranks")
    assert dict(zip(after["node"], after["rank"])) == dict(zip(before["node"], before["rank"])), \
        "recomputed from the same starting checkpoint: the same ranks"


def test_a_task_killed_after_its_commit_landed_is_retried_exactly_once(stack, api, holds, spark, tmp_path):
    """The fault sweep's lost-reply case on Celery: the task that commits epoch 1 of k-means (its
    run task: commit_in_head) is SIGKILLed right after the manifest is written (the process
    dies, not a raised error); the scheduler retries it, the retry finds the epoch committed,
    reports it restored and publishes the epoch's output, the continuation ends the job, and the
    job equals the failure-free run with every checkpoint committed once
    (tests/faults/sweep.audit)."""
    from pathlib import Path

    from tests.faults.sweep import Outcome, audit, kmeans_workload

    work = Path(stack.home) / "inputs" / "kmeans-killed"  # under the stack's allowed roots
    w = kmeans_workload(work, seed=2)
    cfg = w.config(work, job_id="km-stack-killed")
    with armed(holds, "commit.after_write@epoch=1", "kill-once") as point:
        api.unpause("iterate_kmeans")
        run_id = api.trigger("iterate_kmeans", {
            "job_id": cfg.job_id, "input_path": cfg.input.path, "checkpoint_root": cfg.checkpoint_root,
            "output_path": cfg.output_path, "max_epochs": cfg.max_epochs, "tolerance": 0,
            "num_partitions": cfg.num_partitions, **cfg.body_params})
        _wait_job(api, cfg.job_id, batches=-(-cfg.max_epochs // EPOCHS_PER_BATCH), dag_id="iterate_kmeans")
    assert os.path.exists(os.path.join(holds, f"{point}.fired")), "the task was killed"
    assert api.task_instances("iterate_kmeans", run_id)["epoch_1.run"]["try_number"] >= 2
    out = audit(Outcome("killed after its commit", 2), spark, w, cfg, Path(holds) / "trace.jsonl", tmp_path)
    assert (out.lost, out.duplicated, out.wrong, out.garbage) == (0, 0, 0, 0), out.detail


def test_a_finish_killed_after_it_published_makes_one_asset_event_and_one_downstream_run(stack, api, holds):
    """The outputs are Assets: the finish of a PageRank job is SIGKILLed right after it published
    its ranks (before Airflow heard it succeed: no asset event yet); the scheduler retries it,
    the retry finds the output published and emits the publication's one asset event, and the
    DAG scheduled on iterate_pagerank's outputs (pagerank_published) runs once, reading the
    version the event names as the output's current one. A second run of the finished job
    publishes nothing new and emits nothing."""
    job = "pr-stack-asset"
    conf, _ = _job(stack, job, seed=37, epochs=1)  # one batch: it ends with the finish
    uri = f"{OUTPUTS}/{job}/ranks"
    api.unpause("pagerank_published")
    with armed(holds, f"publish.after_output@job={job}", "kill-once") as point:
        run_id = api.trigger("iterate_pagerank", conf)
        assert api.wait_run("iterate_pagerank", run_id) == "success", api.log_tail()
    assert os.path.exists(os.path.join(holds, f"{point}.fired")), "the finish was killed after it published"
    assert api.task_instances("iterate_pagerank", run_id)["finish"]["try_number"] == 2

    def events() -> list[dict]:
        return _finish_events(api, "iterate_pagerank", uri)

    published = json.loads(_s3(stack).get_object(Bucket="iterations-outputs", Key=f"{job}/ranks/_PUBLISHED.json")["Body"].read())
    [event] = events()
    assert (event["source_dag_id"], event["source_task_id"], event["source_run_id"]) == ("iterate_pagerank", "finish", run_id)
    assert event["extra"] == {"job_id": job, "checkpoint_id": published["checkpoint_id"], "version": published["version"],
                              "rows": published["rows"], "format": "parquet", "replaces": None}

    def downstream() -> list[dict]:
        runs = api.runs("pagerank_published")
        return [r for r in runs if any(e["asset_id"] == event["asset_id"] for e in api.get(
            f"/api/v2/dags/pagerank_published/dagRuns/{urllib.parse.quote(r['dag_run_id'], safe='')}/upstreamAssetEvents"
        )["asset_events"])]

    deadline = time.monotonic() + 300
    while not (runs := downstream()) or runs[0]["state"] not in ("success", "failed"):
        assert time.monotonic() < deadline, f"no run of pagerank_published for {uri}: {api.runs('pagerank_published')}"
        time.sleep(2)
    [run] = runs  # the event triggered one run (which may also have taken events of the module's
    assert run["run_type"] == "asset_triggered" and run["state"] == "success", run  # earlier jobs, queued)
    quoted = urllib.parse.quote(run["dag_run_id"], safe="")
    read = api.get(f"/api/v2/dags/pagerank_published/dagRuns/{quoted}/taskInstances/read_publication/xcomEntries/"
                   "return_value")["value"]
    assert [r for r in read if r["uri"] == uri] == [{
        "uri": uri, "job_id": job, "checkpoint_id": published["checkpoint_id"], "version": published["version"],
        "rows": published["rows"], "replaces": None, "current": True, "current_version": published["version"],
        "files": len(published["files"])}]

    again = api.trigger("iterate_pagerank", conf)  # the job is finished: its finish finds the publication done
    assert api.wait_run("iterate_pagerank", again) == "success", api.log_tail()
    assert [e["id"] for e in events()] == [event["id"]], "no second event of the same publication"
    time.sleep(5)  # a scheduler loop or two: no second downstream run either
    assert len(downstream()) == 1


def test_a_publication_is_approved_on_the_staged_data_exactly_once(stack, api, holds):
    """Write, audit, publish on the stack (iterate_pagerank_reviewed): the finish stages the ranks
    as a version no reader sees and the review task asks the user ``reviewer`` (Airflow's
    human-in-the-loop, deferred to the triggerer: no process waits) with the staged data's
    review. The admin, who triggered the run, may not answer (403). Rejected: the staged version
    deleted, the output location as it was, no asset event. Triggered again: asked again, the
    finish SIGKILLed right after staging and retried; approved, the publish task SIGKILLed right
    after the switch and retried: one version, one asset event."""
    dag, job = "iterate_pagerank_reviewed", "pr-stack-reviewed"
    conf, _ = _job(stack, job, seed=41, epochs=1)  # one batch: it ends with the finish
    uri, manifest = f"{OUTPUTS}/{job}/ranks", f"{job}/ranks/_PUBLISHED.json"
    api.unpause(dag)

    def path(run_id: str, task: str) -> str:
        return f"/api/v2/dags/{dag}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/{task}"

    def asked(run_id: str) -> dict:
        deadline = time.monotonic() + 400
        while (ti := api.task_instances(dag, run_id).get("review", {})).get("state") != "deferred":
            assert ti.get("state") not in ("success", "failed", "skipped"), f"the review ended without asking: {ti}"
            assert time.monotonic() < deadline, f"the review never asked: {ti}, {api.log_tail()}"
            time.sleep(2)
        assert not processes_titled(f"{run_id} review"), "no process waits for the answer"
        return api.get(f"{path(run_id, 'review')}/-1/hitlDetails")

    def answer(run_id: str, option: str, user: str) -> None:
        request = urllib.request.Request(stack.url + f"{path(run_id, 'review')}/-1/hitlDetails", method="PATCH",
                                         data=json.dumps({"chosen_options": [option]}).encode(),
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {stack.token(user)}"})
        with urllib.request.urlopen(request, timeout=30):
            pass

    def events() -> list[dict]:
        got = api.get(f"/api/v2/assets/events?source_dag_id={dag}&limit=1000")
        return [e for e in got["asset_events"] if e["uri"] == uri]

    def objects() -> dict[str, str]:
        pages = _s3(stack).get_paginator("list_objects_v2").paginate(Bucket="iterations-outputs", Prefix=f"{job}/")
        return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}

    before = objects()
    first = api.trigger(dag, conf)
    request = asked(first)
    assert request["subject"] == f"Publish the outputs of job {job}?" and request["options"] == ["Approve", "Reject"]
    assert request["assigned_users"] == [{"id": "reviewer", "name": "reviewer"}], "not the admin, who triggered it"
    body = request["body"]
    escaped_version = "v-" + job + "-"  # as the Markdown shows it: every "-" escaped
    assert "**ranks** → " + escaped_version.replace("-", "\\-") in body and "schema `node " in body, body
    assert "Nothing is published there yet" in body and "Data checks of the final checkpoint" in body, body
    assert "Top 10 by rank:" in body, body
    staged = objects()
    assert staged and all("/ranks/v-" in k for k in staged) and manifest not in staged, staged
    with pytest.raises(urllib.error.HTTPError) as refused:
        answer(first, "Approve", "admin")
    assert refused.value.code == 403, "the user who triggered the run may not approve it"
    answer(first, "Reject", "reviewer")
    assert api.wait_run(dag, first) == "success", api.log_tail()
    assert objects() == before, "rejected: the output location as it was, nothing staged behind"
    assert events() == []
    result = api.get(f"{path(first, 'publish')}/xcomEntries/return_value")["value"]
    assert result["status"] == "SUSPENDED" and result["rejected"] == "rejected by reviewer", result

    with armed(holds, f"publish.after_stage@job={job}", "kill-once") as staging:
        second = api.trigger(dag, conf)
        asked(second)
    assert os.path.exists(os.path.join(holds, f"{staging}.fired")), "the finish was killed after it staged"
    assert api.task_instances(dag, second)["finish"]["try_number"] == 2
    with armed(holds, f"publish.after_output@job={job}", "kill-once") as switch:
        answer(second, "Approve", "reviewer")
        assert api.wait_run(dag, second) == "success", api.log_tail()
    assert os.path.exists(os.path.join(holds, f"{switch}.fired")), "the publish was killed after the switch"
    assert api.task_instances(dag, second)["publish"]["try_number"] == 2
    published = json.loads(_s3(stack).get_object(Bucket="iterations-outputs", Key=manifest)["Body"].read())
    [event] = events()
    assert (event["source_task_id"], event["source_run_id"]) == ("publish", second)
    assert event["extra"]["version"] == published["version"] and published["replaces"] is None
    versions = {k.split("/")[2] for k in objects() if k.startswith(f"{job}/ranks/v-")}
    assert versions == {published["version"]}, "one version: nothing staged left beside it"


def _fork_of(stack: Stack, api: StackApi, parent: str, conf: dict, graph) -> None:
    """fork_from on the stack (S3 store, Celery), from a finished job of this module: a fork of
    the parent's checkpoint 1 at another damping. The fork's epoch 2 equals numpy's from the
    parent's checkpoint 1; every object of the parent's directory is as it was (same keys, same
    ETags); the fork's asset event names its parent."""
    import io

    import numpy as np
    import pandas as pd

    from include.checkpoints.checkpoint_log import CheckpointLog
    from include.store import open_store
    from tests.integration.test_forks import pagerank_steps

    fork, prefix = f"{parent}-fork", f"ckpt/jobs/{parent}/"

    def parent_objects() -> dict[str, str]:
        pages = _s3(stack).get_paginator("list_objects_v2").paginate(Bucket="iterations-checkpoints", Prefix=prefix)
        return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}

    before = parent_objects()
    fork_conf = {**conf, "job_id": fork, "output_path": f"{OUTPUTS}/{fork}", "fork_from": f"{parent}:1",
                 "damping": 0.6}
    run_id = api.trigger("iterate_pagerank", fork_conf)
    assert api.wait_run("iterate_pagerank", run_id) == "success", api.log_tail()
    assert parent_objects() == before, "the parent's store is only read"

    store = open_store(CHECKPOINTS, endpoint_url=stack.s3_endpoint, region="us-east-1", access_key_id="stack-key-id",
                       secret_access_key=stack.state["secrets"]["s3_secret"])

    def ranks(job: str, checkpoint: int) -> dict:
        manifest = CheckpointLog(store, job).load(checkpoint, verify="full")
        frame = pd.concat(pd.read_parquet(io.BytesIO(store.get(f.key))) for f in manifest.variables["ranks"].files)
        return dict(zip(frame["node"], frame["rank"]))

    [want] = pagerank_steps(graph, ranks(parent, 1), 0.6, 1)
    got = ranks(fork, 2)
    assert got.keys() == want.keys() and max(abs(got[k] - want[k]) for k in want) < 1e-12
    assert np.isclose(sum(want.values()), 1.0)
    assert max(abs(got[k] - r) for k, r in ranks(parent, 2).items()) > 1e-6, "not the parent's own epoch 2"
    [event] = [e for e in api.get("/api/v2/assets/events?source_dag_id=iterate_pagerank&limit=1000")["asset_events"]
               if e["uri"] == f"{OUTPUTS}/{fork}/ranks"]
    assert event["extra"]["forked_from"] == {"job_id": parent, "checkpoint_id": 1, "epoch": 1}


def test_a_dag_scheduled_on_its_input_runs_a_batch_per_publication(stack, api):
    """iterate_pagerank_on_asset is scheduled on its input's Asset: an upstream publishes the
    edges (an output: versions behind a manifest) and announces each version with an asset event
    (here through the REST API, as any producer may). Each event starts a run with no logical
    date; its batch is dated by when it was due (run_after), reads the version the event named -
    that one only, though the older version is kept beside it - records what arrived, warm-starts
    from the previous batch and publishes under its date."""
    import networkx as nx

    from include.publication.outputs import output_uri
    from include.runs.schedule import batch_date
    from tests.helpers import publish_edges

    dag, job = "iterate_pagerank_on_asset", "pagerank_on_asset"
    local = os.path.join(stack.home, "local")  # the stack's ITERATIONS_LOCAL_DIR: the DAG's defaults
    graph, home = os.path.join(local, "graph"), os.path.join(local, "dags", dag)  # the DAG's own directory
    store = os.path.join(home, "store")
    uri = output_uri(graph, "edges")
    # regular graphs: uniform ranks are the fixed point, so each batch converges in a batch of epochs
    versions = [nx.DiGraph([(i, (i + 1) % 10) for i in range(10)]),
                nx.DiGraph([(i, (i + d) % 10) for i in range(10) for d in (1, 9)])]
    api.unpause(dag)
    [asset] = [a for a in api.get("/api/v2/assets?limit=100")["assets"] if a["uri"] == uri]
    dates: list[str] = []
    for n, g in enumerate(versions, start=1):
        manifest = publish_edges(graph, g, job="upstream", checkpoint=n)
        known = {r["dag_run_id"] for r in api.runs(dag)}
        api.post("/api/v2/assets/events", {"asset_id": asset["id"], "extra": {
            k: manifest[k] for k in ("job_id", "checkpoint_id", "version", "rows")}})
        deadline = time.monotonic() + 600
        while not (new := [r for r in api.runs(dag) if r["dag_run_id"] not in known and r["run_type"] == "asset_triggered"]):
            assert time.monotonic() < deadline, f"no asset-triggered run of {dag}: {api.runs(dag)}"
            time.sleep(2)
        [run] = new
        assert run["logical_date"] is None
        assert api.wait_run(dag, run["dag_run_id"]) == "success", api.log_tail()
        date = batch_date(datetime.fromisoformat(run["run_after"]))
        deadline = time.monotonic() + 600  # the batch's continuation runs, if it took more than one
        while json.loads(open(os.path.join(store, "schedules", job, "dates", f"{date}.json")).read())["current"] is None:
            assert time.monotonic() < deadline and not [r for r in api.runs(dag) if r["state"] == "failed"], api.log_tail()
            time.sleep(2)
        generation = f"{job}.{date}"
        pin = json.loads(open(os.path.join(store, "jobs", generation, "input.json")).read())
        assert (pin["uri"], pin["version"], pin["rows"]) == (uri, manifest["version"], g.number_of_edges())
        record = json.loads(open(os.path.join(store, "schedules", job, "generations", f"{generation}.json")).read())
        [arrived] = record["arrived"]
        assert (arrived["uri"], arrived["version"], arrived["source"]) == (uri, manifest["version"], "the REST API")
        assert arrived["ignored"] == ["from_rest_api"]
        if dates:  # warm-started from the previous batch's final checkpoint
            assert record["started_from"]["job_id"] == f"{job}.{dates[-1]}"
        published = read_published(os.path.join(home, "output", job, date), "ranks")  # <default>/<job>/<date>
        assert sorted(published["node"]) == list(range(10))
        head_log = open(glob.glob(os.path.join(api.home, "logs", f"dag_id={dag}", f"run_id={run['dag_run_id']}",
                                               "task_id=epoch_0.run", "attempt=*.log"))[0], errors="replace").read()
        assert f"arrived: {uri}: version {manifest['version']} of job upstream" in head_log
        dates.append(date)
    assert dates == sorted(set(dates)), dates
    assert len(os.listdir(os.path.join(graph, "edges"))) == 3, "both versions were kept: only the pinned one was read"


def test_an_incremental_job_on_its_input_asset_ends_each_batch_when_the_input_is_taken(stack, api):
    """iterate_sgd_on_asset: files dropped into the input and announced by an asset event start a
    batch of the one job; it processes the new files and ends its batch at the first epoch with
    none (no sensor waits, no continuation); the next event's batch goes on with the same job;
    the end marker ends the job, which publishes: every file processed once."""
    import pandas as pd

    from include.publication.outputs import output_uri
    from tests.integration.test_incremental import drop_file, end_input

    dag, job = "iterate_sgd_on_asset", "sgd_on_asset"
    local = os.path.join(stack.home, "local")
    inbox = os.path.join(local, "incoming_on_asset")
    uri = output_uri(local, "incoming_on_asset")
    api.unpause(dag)
    [asset] = [a for a in api.get("/api/v2/assets?limit=100")["assets"] if a["uri"] == uri]

    def announce(files: list[str]) -> list[dict]:
        """Post the event; the runs it started, once they all ended."""
        known = {r["dag_run_id"] for r in api.runs(dag)}
        api.post("/api/v2/assets/events", {"asset_id": asset["id"], "extra": {"files": files}})
        deadline = time.monotonic() + 600
        while not [r for r in api.runs(dag) if r["dag_run_id"] not in known and r["run_type"] == "asset_triggered"]:
            assert time.monotonic() < deadline, f"no asset-triggered run of {dag}: {api.runs(dag)}"
            time.sleep(2)
        while [r for r in api.runs(dag) if r["state"] in ("queued", "running")]:
            assert time.monotonic() < deadline, api.log_tail()
            time.sleep(2)
        runs = [r for r in api.runs(dag) if r["dag_run_id"] not in known]
        assert [r["state"] for r in runs] == ["success"] * len(runs), api.log_tail()
        return runs

    first = announce([os.path.basename(drop_file(inbox, i)) for i in range(3)])
    last = first[-1]["dag_run_id"]
    tis = api.task_instances(dag, last)
    assert (tis["finish"]["state"], tis["continue"]["state"]) == ("skipped", "skipped"), tis
    ended = [t for t, ti in tis.items() if t.endswith(".wait_input") and ti["state"] == "success"][-1]
    log = _task_log(api, dag, last, ended)
    assert "no new input under" in log and "the batch ends here" in log, log[-2000:]
    home = os.path.join(local, "dags", dag)  # the DAG's own directory: its default store and outputs
    store = LocalStore(os.path.join(home, "store"))
    after_first = CheckpointLog(store, job).latest_id()

    dropped = os.path.basename(drop_file(inbox, 3))
    end_input(inbox)
    second = announce([dropped, "_DONE"])
    head = _task_log(api, dag, second[0]["dag_run_id"], "epoch_0.run")
    assert f"arrived: {uri}: no version named" in head and "keys not read: files, from_rest_api" in head, head[-3000:]
    assert CheckpointLog(store, job).load(after_first + 1, verify="none").parent_id == after_first, \
        "the second event's batch went on with the same job"
    splits = read_published(os.path.join(home, "output", job), "splits")
    assert sorted(splits["split"]) == [f"batch-{i:03d}.parquet" for i in range(4)], "each file once"
    assert isinstance(splits, pd.DataFrame) and splits["rows"].sum() == 4 * 40


def test_a_short_chaos_schedule_loses_nothing(stack, holds):
    """A short schedule of tests.chaos on the stack (``python -m tests.chaos`` runs the long one
    on a stack of its own): three jobs at once (PageRank on S3 over batches, k-means on a small
    filesystem, an incremental job with files arriving) while the scheduler, Redis and the Spark
    master are SIGKILLed and started again, the S3 endpoint stops answering and the k-means
    store's filesystem fills up. Every job ends equal to its failure-free run, every checkpoint
    committed and every output published once with one asset event, every file taken once, no
    garbage left, and an epoch commits after each fault."""
    from tests.chaos.faults import Durations, plan
    from tests.chaos.run import Chaos, table

    kinds = ("scheduler", "redis", "spark-master", "s3-stopped", "disk-full")
    faults = plan(5, len(kinds), kinds, Durations(restart_delay=(2, 5), s3_stopped=(20, 30), disk_full=(15, 20),
                                                  gap=(5, 15)))
    chaos = Chaos(stack, os.path.join(stack.home, "inputs", "chaos"), 5, os.path.join(holds, "trace.jsonl"))
    report = chaos.run(faults)
    print(table(report))
    assert (report["lost"], report["duplicated"], report["wrong"], report["garbage"]) == (0, 0, 0, 0), table(report)
    assert report["errors"] == [], table(report)
    assert {j["lane"] for j in report["jobs"]} == {"pagerank", "kmeans", "sgd"}, table(report)
    skipped = [f["kind"] for f in report["faults"] if f["skipped"]]
    assert skipped in ([], ["disk-full"]), table(report)  # a tmpfs needs root
    assert all(f["recovered_in"] is not None for f in report["faults"] if not f["skipped"]), table(report)
    assert all(stack.running().values()), stack.running()


def test_stop_leaves_nothing_running(stack):
    """``./run.sh stack stop`` (here ``python -m stack stop``, from another process than the one
    that started the stack) stops every process of every service, and frees every port."""
    sessions, ports, home = {n: s.sid for n, s in stack.sessions().items()}, dict(stack.ports), stack.home
    assert sessions and all(session_members(sid) for sid in sessions.values()), stack.running()
    done = subprocess.run([sys.executable, "-m", "stack", "stop", "--home", home], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {name: session_members(sid) for name, sid in sessions.items() if session_members(sid)} == {}
    assert [name for name, port in ports.items() if listening(port)] == []
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ")
            except OSError:
                continue
            if home.encode() in argv:
                left.append((int(entry), argv[:200]))
    assert left == [], left
    assert Stack(home).running() == {}
    again = subprocess.run([sys.executable, "-m", "stack", "status", "--home", home], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 1 and "no stack recorded" in again.stdout, again.stdout
