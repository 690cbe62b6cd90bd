"""The DAGs under the real scheduler (``airflow standalone``: the project's
PreloadingLocalExecutor on SQLite), driven through the REST API and the CLI as an operator of
the system would."""

from __future__ import annotations

import glob
import json
import os
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path

import pytest

from include import failpoints
from include.checkpoint import CheckpointLog
from include.config import JobConfig
from spark_jobs.runner import IterationRunner
from include.store import LocalStore
from tests.dags.airflow_server import AirflowServer, processes_titled
from tests.helpers import graph_with_dangling, ranks_of, read_published, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow_standalone")
    srv = AirflowServer(str(home), str(tmp_path_factory.mktemp("spark_connect_sched")))
    armed = tmp_path_factory.mktemp("failpoints") / "armed"
    armed.write_text("")
    srv.env.update({failpoints.FILE_ENV: str(armed), failpoints.DIR_ENV: str(armed.parent),
                    failpoints.TRACE_ENV: str(armed.parent / "trace.jsonl"), "ITERATIONS_RETRY_DELAY_SECONDS": "2"})
    try:
        yield srv.start()
    finally:
        srv.stop()


def test_a_run_task_marked_failed_stops_its_spark_job_then_the_next_run_resumes_deferred(server, spark, tmp_path):
    """Epoch 1's run task is marked failed from the API while its Spark job runs (its tail held
    by a failpoint in the Spark Connect server's Python worker): the task's on_kill interrupts
    the attempt's Spark job by its tag and aborts the attempt; the held Python worker is gone
    within 10 s. The next run of the job resumes at epoch 1, its alignment waits deferred (no
    worker process) for a report held back, and the job ends equal to the failure-free run."""
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.1, seed=12))
    store = str(tmp_path / "store")
    conf = {"job_id": "pr-cancel", "input_path": edges, "checkpoint_root": store,
            "output_path": str(tmp_path / "out"), "max_epochs": 2, "tolerance": 0, "num_partitions": 2,
            "continuation": False}
    armed = server.env[failpoints.FILE_ENV]
    point = "tail.partition_written@job=pr-cancel@epoch=1@partition=0"
    held = os.path.join(os.path.dirname(armed), f"{point}.held")
    with open(armed, "w") as f:
        f.write(f"{point}=hold")
    try:
        server.unpause("iterate_pagerank")
        run_id = server.trigger("iterate_pagerank", conf)
        deadline = time.monotonic() + 300
        while not os.path.exists(held):
            assert time.monotonic() < deadline, f"epoch 1 never reached its tail: {server.log_tail()}"
            assert server.run_state("iterate_pagerank", run_id) in ("queued", "running"), server.log_tail()
            time.sleep(0.2)
        worker = int(open(held).read())
        quoted = urllib.parse.quote(run_id, safe="")
        server._request("PATCH", f"/api/v2/dags/iterate_pagerank/dagRuns/{quoted}/taskInstances/epoch_1.run",
                        {"new_state": "failed"})
        marked = time.monotonic()
        while _alive(worker):
            assert time.monotonic() - marked < 10, "the Spark job still runs 10 s after its task was marked failed"
            time.sleep(0.1)
        stopped = time.monotonic() - marked
        print(f"the held Spark task's worker was gone {stopped:.1f} s after its task was marked failed")
    finally:
        open(armed, "w").close()
        open(os.path.join(os.path.dirname(armed), f"{point}.release"), "w").close()
    assert server.wait_run("iterate_pagerank", run_id, timeout=300) == "failed"
    task_log = "".join(open(p, errors="replace").read() for p in glob.glob(os.path.join(
        server.home, "logs", "dag_id=iterate_pagerank", f"run_id={run_id}", "task_id=epoch_1.run", "*.log")))
    assert "cancelled (task epoch_1.run was stopped)" in task_log, task_log[-4000:]
    aborted = glob.glob(os.path.join(store, "jobs", "pr-cancel", "aborted", f"{1:010d}", "*"))
    assert len(aborted) == 1 and "cancelled: task epoch_1.run was stopped" in open(aborted[0]).read()
    assert not glob.glob(os.path.join(store, "jobs", "pr-cancel", "checkpoints", f"{1:010d}.json"))

    # The next run resumes at epoch 1. Its alignment sensor finds a report missing (the test
    # holds the sensor, moves a report away, lets it read): it defers to the triggerer, the
    # worker slot free, and the epoch commits once the report is back.
    point = "align.before_read@job=pr-cancel@epoch=1"
    held = os.path.join(os.path.dirname(armed), f"{point}.held")
    with open(armed, "w") as f:
        f.write(f"{point}=hold")
    try:
        again = server.trigger("iterate_pagerank", conf)
        deadline = time.monotonic() + 300
        while not os.path.exists(held):
            assert time.monotonic() < deadline, f"epoch 1's sensor never ran: {server.log_tail()}"
            time.sleep(0.2)
        report = glob.glob(os.path.join(store, "jobs", "pr-cancel", "attempts", f"{1:010d}", "*", "_reports", "*",
                                        "part-00001.json"))
        assert len(report) == 1, report
        os.rename(report[0], tmp_path / "held-back-report.json")
    finally:
        open(armed, "w").close()
        open(os.path.join(os.path.dirname(armed), f"{point}.release"), "w").close()
    deadline = time.monotonic() + 60
    sensor = "epoch_0.align"  # the batch's first epoch group runs the job's epoch 1
    while (ti := server.task_instances("iterate_pagerank", again)[sensor])["state"] != "deferred":
        assert time.monotonic() < deadline and ti["state"] in (None, "queued", "running", "scheduled"), \
            (ti["state"], server.log_tail())
        time.sleep(0.2)
    time.sleep(3)
    ti = server.task_instances("iterate_pagerank", again)[sensor]
    assert ti["state"] == "deferred" and not processes_titled(ti["id"]), "no worker process while it waits"
    os.rename(tmp_path / "held-back-report.json", report[0])
    assert server.wait_run("iterate_pagerank", again, timeout=600) == "success", server.log_tail()
    ids = sorted(int(os.path.basename(p)[:-5]) for p in glob.glob(os.path.join(store, "jobs", "pr-cancel", "checkpoints", "*.json")))
    assert ids == [0, 1, 2], "epochs 0 and 1 and the final checkpoint, each once"
    reference = JobConfig(job_id="pr-ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "ref"),
                          max_epochs=2, tolerance=0.0, num_partitions=2)
    expected = ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])
    got = read_published(tmp_path / "out", "ranks")
    assert dict(zip(got["node"], got["rank"])) == expected, f"resumed exactly (the job stopped {stopped:.1f} s after)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _dates_state(root: str) -> dict[str, bytes]:
    """Every checkpoint manifest, schedule record and publication manifest, by path."""
    out = {}
    for pattern in ("store/jobs/*/checkpoints/*.json", "store/schedules/*/dates/*.json", "out/*/*/_PUBLISHED.json"):
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


@pytest.mark.timeout(1500)  # two backfills of three dates and a recompute: 6 min here, more on a loaded machine
def test_backfill_three_dates_twice_then_recompute_one(server, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(60, 0.08, seed=4))
    conf = {"job_id": "daily", "input_path": edges, "checkpoint_root": str(tmp_path / "store"),
            "output_path": str(tmp_path / "out"), "max_epochs": 40, "tolerance": 1e-3, "num_partitions": 2}
    backfill = ("backfill", "create", "--dag-id", "iterate_pagerank_daily", "--from-date", "2026-01-01",
                "--to-date", "2026-01-03", "--max-active-runs", "1", "--dag-run-conf", json.dumps(conf))

    def run_backfill(*extra: str) -> list[dict]:
        """Create the backfill and wait until it has run all three dates. On SQLite the CLI's writes
        may meet the scheduler's lock, and Airflow cleans up a half-created backfill only for the
        lock errors of PostgreSQL and MySQL: a try can leave a backfill with fewer runs than dates,
        completed by the scheduler two minutes later. Creating it again then runs the missing dates
        (re-running a date changes nothing, which this test checks)."""
        started = datetime.now(timezone.utc)
        deadline = time.monotonic() + 600
        tries = []

        def in_time() -> None:
            assert time.monotonic() < deadline, f"backfill not done in 600 s; CLI tries: {tries}\n{server.log_tail()}"

        while True:
            in_time()
            done = server.cli(*backfill, *extra)
            tries.append(done.returncode if done.returncode == 0 else done.stderr.strip().splitlines()[-1:])
            assert done.returncode == 0 or "database is locked" in done.stderr or \
                "AlreadyRunningBackfill" in done.stderr, done.stdout + done.stderr
            while not all(b["completed_at"] for b in server.get("/api/v2/backfills?dag_id=iterate_pagerank_daily")["backfills"]):
                in_time()
                time.sleep(3)
            # a date (re)run by this backfill ended after it was created
            runs = [r for r in server.runs("iterate_pagerank_daily") if r["run_type"] == "backfill"
                    and r["end_date"] and datetime.fromisoformat(r["end_date"]) > started]
            if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            time.sleep(3)

    server.unpause("iterate_pagerank_daily")
    runs = run_backfill()
    assert [r["state"] for r in runs] == ["success"] * 3, server.log_tail()
    first = _dates_state(str(tmp_path))
    dates = ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z"]
    assert [k for k in first if k.startswith("out/")] == [f"out/{d}/ranks/_PUBLISHED.json" for d in dates]
    generations = {}
    for d in dates:
        record = json.loads(first[f"store/schedules/daily/dates/{d}.json"])
        assert record["current"] == f"daily.{d}" and record["pending"] is None
        generations[d] = json.loads(open(tmp_path / "store" / "schedules" / "daily" / "generations" / f"daily.{d}.json").read())
    assert generations[dates[0]]["started_from"] is None
    for prev, d in zip(dates, dates[1:]):  # each batch warm-starts from the previous one's final checkpoint
        final = CheckpointLog(LocalStore(tmp_path / "store"), f"daily.{prev}").latest_id()
        assert generations[d]["started_from"] == {"job_id": f"daily.{prev}", "checkpoint_id": final}
    cold = CheckpointLog(LocalStore(tmp_path / "store"), f"daily.{dates[0]}").latest_id()
    warm = CheckpointLog(LocalStore(tmp_path / "store"), f"daily.{dates[1]}").latest_id()
    assert warm < cold, f"a warm start converges sooner: {warm} vs {cold} checkpoints"

    # PreloadingLocalExecutor: the scheduler imported Great Expectations before forking its
    # workers, so no commit task imports it again (a LocalExecutor-only speed-up: on the Celery
    # stack each commit task imports it, tests/dags/test_stack.py)
    assert "Preloaded for the task processes in" in open(server.log_path).read(), server.log_tail()
    commits = glob.glob(os.path.join(server.home, "logs", "dag_id=iterate_pagerank_daily", "run_id=*",
                                     "task_id=epoch_*.commit", "*.log"))
    assert commits
    for path in commits:
        text = open(path, errors="replace").read()
        assert "its modules were preloaded" in text and "imported by this process" not in text, (path, text[-3000:])

    again = run_backfill("--reprocess-behavior", "completed")
    assert [r["state"] for r in again] == ["success"] * 3, server.log_tail()
    assert _dates_state(str(tmp_path)) == first, "re-running the batches changes nothing"

    before = read_published(tmp_path / "out" / dates[1], "ranks")
    run_id = server.trigger("iterate_pagerank_daily", {**conf, "batch_date": "2026-01-02T00:00:00+00:00",
                                                       "recompute": True})
    assert server.wait_run("iterate_pagerank_daily", run_id) == "success", server.log_tail()
    record = json.loads(open(tmp_path / "store" / "schedules" / "daily" / "dates" / f"{dates[1]}.json").read())
    assert record == {"date": dates[1], "current": f"daily.{dates[1]}.r1", "pending": None}
    manifest = json.loads(open(tmp_path / "out" / dates[1] / "ranks" / "_PUBLISHED.json").read())
    assert manifest["job_id"] == f"daily.{dates[1]}.r1" and manifest["replaces"] == f"v-daily.{dates[1]}-{warm}"
    after = read_published(tmp_path / "out" / dates[1], "ranks")
    assert dict(zip(after["node"], after["rank"])) == dict(zip(before["node"], before["rank"])), \
        "recomputed from the same starting checkpoint: the same ranks"


def test_a_commit_task_killed_after_its_commit_landed_is_retried_exactly_once(server, spark, tmp_path):
    """The fault sweep's lost-reply case under the real scheduler: the commit task of epoch 1 of
    k-means is SIGKILLed right after its manifest is written (the process dies, not a raised
    error); the scheduler retries it, the retry finds the checkpoint its attempt committed and
    publishes the epoch's output, and the run ends equal to the failure-free run, every
    checkpoint committed once (tests/faults/sweep.audit)."""
    from tests.faults.sweep import Outcome, audit, kmeans_workload

    w = kmeans_workload(tmp_path, seed=2)
    cfg = w.config(tmp_path)
    armed = server.env[failpoints.FILE_ENV]
    point = "commit.after_write@epoch=1"
    with open(armed, "w") as f:
        f.write(f"{point}=kill-once")
    try:
        run_id = server.trigger("iterate_kmeans", {
            "job_id": cfg.job_id, "input_path": cfg.input.path, "checkpoint_root": cfg.checkpoint_root,
            "output_path": cfg.output_path, "max_epochs": cfg.max_epochs, "tolerance": 0,
            "num_partitions": cfg.num_partitions, **cfg.body_params, "continuation": False})
        server.unpause("iterate_kmeans")
        assert server.wait_run("iterate_kmeans", run_id, timeout=600) == "success", server.log_tail()
    finally:
        open(armed, "w").close()
    assert os.path.exists(os.path.join(os.path.dirname(armed), f"{point}.fired")), "the task was killed"
    assert server.task_instances("iterate_kmeans", run_id)["epoch_1.commit"]["try_number"] >= 2
    trace = Path(server.env[failpoints.TRACE_ENV])  # every task process appends its commits and publications
    out = audit(Outcome("killed after its commit", 2), spark, w, cfg, trace, tmp_path)
    assert (out.lost, out.duplicated, out.wrong, out.garbage) == (0, 0, 0, 0), out.detail
