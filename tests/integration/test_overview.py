"""include.runs.overview against stores filled by real PageRank runs: every epoch's status, metric,
feedback count, size and retention as the checkpoints say, batches, checks, events, the finish
and publication, and not one byte written to the store."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from include.errors import ConfigError
from include.publication.outputs import published
from include.runs.overview import JobNotFound, ReadOnlyStore, ReadOnlyViolation, check_report, job_overview, list_jobs
from include.store import LocalStore
from tests.helpers import B1_EPOCHS, FINISHED_JOB, REFUSED_JOB, tree

pytestmark = pytest.mark.spark


def test_finished_job_is_what_its_checkpoints_say(view_stores):
    before = tree(view_stores.root)
    store = LocalStore(view_stores.root)
    view = job_overview(store, FINISHED_JOB)
    assert tree(view_stores.root) == before, "reading the overview wrote to the store"

    log = CheckpointLog(store, FINISHED_JOB)
    final = log.latest(verify="full")
    assert final.kind == "final" and view.status == "TERMINATED"
    manifests = [log.load(i) for i in log.checkpoint_ids() if i != final.checkpoint_id]
    assert [e.epoch for e in view.epochs] == [m.epoch for m in manifests] == list(range(final.epoch + 1))
    decisions = view_stores.batches["b1"].decisions + view_stores.batches["b2"].decisions
    assert [d.metrics for d in decisions] == [e.metrics for e in view.epochs]
    for e, m in zip(view.epochs, manifests):
        assert e.metrics == m.decision.metrics and e.feedback == m.decision.feedback_count > 0
        assert e.attempt_id == m.attempt_id and e.batch_id == m.batch_id and e.committed_at == m.committed_at
        manifest_size = os.path.getsize(store.local_path(log.layout.checkpoint(m.checkpoint_id)))
        assert e.size_bytes == manifest_size + sum(f.size for f in m.objects) and e.objects == len(m.objects)
        assert [(a.attempt_id, a.status) for a in e.attempts] == [(m.attempt_id, "committed")]
        [check] = e.checks
        assert check.success and check.attempt_id == m.attempt_id and check.counts["failed"] == 0
        assert e.retention.startswith("kept")
    assert view.metric == "l1_delta" and decisions[-1].reason.startswith("converged: l1_delta")
    assert view.epochs[-1].terminated and view.epochs[-1].reason == decisions[-1].reason

    # b2 resumed from b1's last checkpoint: restored; every other epoch committed
    last = B1_EPOCHS - 1
    assert {e.epoch: e.status for e in view.epochs} == {
        e.epoch: ("restored" if e.epoch == last else "committed") for e in view.epochs}
    assert view.epochs[last].restored_by == ["b2"]
    b1, b2 = view.batches
    assert (b1.batch_id, b1.epochs, b1.restored_from, b1.final_checkpoint) == ("b1", list(range(B1_EPOCHS)), None, last)
    assert (b2.batch_id, b2.restored_from, b2.final_checkpoint) == ("b2", last, final.checkpoint_id)
    assert b2.epochs == list(range(B1_EPOCHS, final.epoch + 1))
    assert view.epochs[last].retention == "kept (final of batch b1)"

    # the alignment coordinator's decision on epoch k-1 is released to epoch k, one event per partition
    for e, m in zip(view.epochs, manifests):
        [events] = e.events
        assert events.coordinator == "alignment" and events.end_seq == m.coordinators["alignment"]["seq"]
        assert events.count == (0 if e.epoch == 0 else m.num_partitions)

    f = view.finish
    assert (f.checkpoint_id, f.epoch, f.attempt_id) == (final.checkpoint_id, final.epoch, final.attempt_id)
    [ranks] = f.outputs
    current = published(view_stores.output_path, "ranks")
    assert (ranks.name, ranks.state) == ("ranks", "PUBLISHED")
    assert ranks.rows == current.rows == 62  # the graph's nodes, dangling ones included
    assert ranks.location == os.path.join(view_stores.output_path, "ranks") and current.checkpoint_id == final.checkpoint_id
    assert f.lifecycle["sink:ranks"] == "PUBLISHED" and f.lifecycle["head:ranks"] == "FULLY_FINISHED"
    [finish_check] = f.checks
    assert finish_check.success and finish_check.kind == "final"


def test_refused_epoch_retired_epoch_and_the_reports(view_stores):
    before = tree(view_stores.root)
    store = LocalStore(view_stores.root)
    view = job_overview(store, REFUSED_JOB)
    epoch = view_stores.refused_epoch
    media, page = check_report(store, REFUSED_JOB, epoch, view_stores.refused_attempt)
    assert tree(view_stores.root) == before, "reading wrote to the store"

    assert view.status == "RUNNING" and view.finish is None
    assert [(e.epoch, e.status, e.retention) for e in view.epochs] == [
        (0, "committed", "retired"), (1, "committed", "kept (last retained)"), (2, "committed", "kept (latest)"),
        (3, "aborted", None), (4, "aborted", None)]
    assert view.retired_checkpoints == [0] and view.kept_checkpoints == [1, 2]
    log = CheckpointLog(store, REFUSED_JOB)
    history = log.latest().head_state.feedback_counts()
    assert [e.feedback for e in view.epochs[:3]] == [history[0], history[1], history[2]]
    # retention took its data; the retired marker kept its decision
    assert view.epochs[0].size_bytes is None and set(view.epochs[0].metrics) == {"l1_delta"}
    assert view.epochs[0].attempt_id.startswith("a0-") and view.epochs[0].batch_id == "r1"
    assert [b.epochs for b in view.batches] == [[0, 1, 2]]

    # epoch 4 ran beside epoch 3's commit (commits behind the next epoch): aborted with it
    [beside] = view.epochs[epoch + 1].attempts
    assert beside.status == "aborted" and beside.reason.startswith(f"epoch {epoch} it ran from did not commit"), \
        beside.reason
    refused = view.epochs[epoch]
    [attempt] = refused.attempts
    assert (attempt.attempt_id, attempt.status) == (view_stores.refused_attempt, "aborted")
    assert attempt.reason.startswith(f"data checks of epoch {epoch}")
    [check] = refused.checks
    assert not check.success and check.counts["failed"] >= 1
    assert any("FAILED" in p and "ranks.rank" in p for p in check.problems), check.problems
    assert check.html_key == log.layout.checks(epoch, attempt.attempt_id) + "/data_docs.html"
    assert media == "text/html" and page == store.get(check.html_key)


def test_a_damaged_manifest_is_listed_once_as_damaged_with_why(tmp_path):
    """Issue 64: a manifest the log refuses was listed as kept and as retired at once, with no
    word of the damage. It is neither: its epoch is ``damaged``, with the log's reason."""
    from tests.unit.checkpoints.test_checkpoint_log import write_attempt

    store = LocalStore(tmp_path / "store")
    log = CheckpointLog(store, "pr-damaged")
    for epoch in range(4):
        log.commit(write_attempt(log, epoch, f"a{epoch}", epoch - 1 if epoch else None))
    log.retention.collect_garbage(2)  # 0 and 1 retired
    key = log.layout.checkpoint(2)
    damaged = store.get(key).replace(b'"num_partitions": 2', b'"num_partitions": 3')
    assert damaged != store.get(key)
    store.put(key, damaged)  # damaged in place: it no longer matches its own checksum

    view = job_overview(store, "pr-damaged")
    assert (view.kept_checkpoints, view.retired_checkpoints, view.damaged_checkpoints) == ([3], [0, 1], [2])
    assert [(e.epoch, e.status, e.retention) for e in view.epochs] == [
        (0, "committed", "retired"), (1, "committed", "retired"), (2, "damaged", None), (3, "committed", "kept (latest)")]
    damaged = view.epochs[2]
    assert damaged.damage == f"manifest {store.location(key)} fails its own checksum: it was damaged"
    assert damaged.metrics == {} and damaged.size_bytes is None and damaged.attempt_id is None
    assert view.to_dict()["damaged_checkpoints"] == [2]


def test_an_attempt_in_flight_is_running_with_its_inbox(view_stores, tmp_path):
    root = str(tmp_path / "store")
    shutil.copytree(view_stores.root, root)
    refused = json.loads(LocalStore(root).get(
        CheckpointLog(LocalStore(root), REFUSED_JOB).layout.checkpoint(2)))["body"]["params"]
    edges = os.path.join(os.path.dirname(view_stores.root), "edges.csv")  # the input the job pinned
    config = JobConfig(job_id=REFUSED_JOB, body="tests.faulty_bodies:FaultyPageRank", input=edges,
                       checkpoint_root=root, tolerance=0.0, max_epochs=10, retain_last=2, num_partitions=3,
                       body_params=refused)
    plan = IterationJob(config).attempts.plan_epoch("r2")  # recorded, its Spark job not started
    view = job_overview(LocalStore(root), REFUSED_JOB)
    running = view.epochs[plan.epoch]
    assert running.status == "running"
    assert [(a.status, a.batch_id) for a in running.attempts if a.attempt_id == plan.attempt_id] == [("running", "r2")]
    [events] = running.events
    assert events.events == plan.events["alignment"] and events.count == len(plan.events["alignment"]) == 3
    assert all(e["payload"] == {"type": "globally_aligned", "epoch": 2, "terminated": False, "reason": ""}
               for e in events.events)


def test_errors_name_the_bad_value_and_writes_are_refused(view_stores, tmp_path):
    store = LocalStore(view_stores.root)
    assert list_jobs(store) == sorted([FINISHED_JOB, REFUSED_JOB])
    with pytest.raises(JobNotFound, match="'no-such-job'"):
        job_overview(store, "no-such-job")
    with pytest.raises(ConfigError, match="invalid job_id '../jobs'"):
        job_overview(store, "../jobs")
    with pytest.raises(ConfigError, match="metric 'rmse' is not reported by job pr-view; its metrics: l1_delta"):
        job_overview(store, FINISHED_JOB, metric="rmse")
    ro = ReadOnlyStore(store)
    for write in (lambda: ro.put("x", b""), lambda: ro.put_if_absent("x", b""), lambda: ro.delete(["x"])):
        with pytest.raises(ReadOnlyViolation, match="read-only"):
            write()


def test_retired_epochs_keep_their_decisions_for_the_chart(view_stores, spark, tmp_path):
    """The finished job run again with retention 2: the epochs it retired show the same metrics,
    feedback counts, termination and batches as the run that kept them all."""
    from spark_jobs.runner import IterationRunner

    kept = job_overview(LocalStore(view_stores.root), FINISHED_JOB)
    original = CheckpointLog(LocalStore(view_stores.root), FINISHED_JOB).load(0)
    edges = os.path.join(os.path.dirname(view_stores.root), "edges.csv")  # fill_view_stores' graph
    config = JobConfig(job_id=FINISHED_JOB, body="pagerank", input=edges, checkpoint_root=str(tmp_path / "store"),
                       tolerance=1e-3, max_epochs=40, body_params={"damping": 0.5}, retain_last=2,
                       num_partitions=original.num_partitions)
    IterationRunner(config, spark).run(batch_id="b1", max_epochs_in_batch=B1_EPOCHS)
    IterationRunner(config, spark).run(batch_id="b2")
    view = job_overview(LocalStore(str(tmp_path / "store")), FINISHED_JOB)

    retired = [e for e in view.epochs if e.retention == "retired"]
    assert len(retired) >= len(view.epochs) - 3, [(e.epoch, e.retention) for e in view.epochs]
    assert [(e.epoch, e.metrics, e.feedback, e.terminated, e.reason, e.batch_id) for e in view.epochs] == \
        [(e.epoch, e.metrics, e.feedback, e.terminated, e.reason, e.batch_id) for e in kept.epochs]
    assert all(e.attempt_id and e.committed_at for e in retired)
    # summaries written before they kept the epoch's history read the same
    store = LocalStore(str(tmp_path / "store"))
    log = CheckpointLog(store, FINISHED_JOB)
    for e in retired:
        summary = log.retention.retired_summary(e.epoch)
        assert summary.pop("history") is not None
        store.put(log.layout.retired(e.epoch), json.dumps(summary).encode())
    older = job_overview(store, FINISHED_JOB)
    assert [(e.epoch, e.metrics, e.feedback, e.terminated, e.reason, e.batch_id) for e in older.epochs] == \
        [(e.epoch, e.metrics, e.feedback, e.terminated, e.reason, e.batch_id) for e in kept.epochs]
    assert [(b.batch_id, b.epochs, b.restored_from) for b in view.batches] == \
        [(b.batch_id, b.epochs, b.restored_from) for b in kept.batches]


def test_every_attempt_of_an_epoch_stays_in_its_history_with_why_and_who(spark, tmp_path):
    """Epoch 1 of a job had three attempts: one whose task died with it planned (an Airflow
    run's, fenced by the next run), one that failed in its Spark job, and the one that
    committed. After retention retired the epoch (its attempts' own records collected), the
    overview still lists all three, with what became of each, who ran it, the attempt that
    committed instead, and the committed attempt's phases; and the page shows them."""
    from include.checkpoints.checkpoint_log import ABANDONED
    from include.process import failpoints
    from plugins.iterations.views.page import job_page
    from spark_jobs.runner import IterationRunner
    from tests.helpers import graph_with_dangling, pagerank_config, write_edges

    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.1, seed=3))
    config = pagerank_config(tmp_path, edges, job_id="pr-history", tolerance=0.0, max_epochs=4, retain_last=1)
    IterationRunner(config, spark).run(batch_id="b1", max_epochs_in_batch=1)
    airflow_run = {"dag_id": "iterate_pagerank", "run_id": "manual__2026-11-29T00:00:00+00:00",
                   "task_id": "epoch_1.run", "try_number": 1}
    orphan = IterationJob(config).attempts.plan_epoch("manual__2026-11-29T00_00_00_00_00", run=airflow_run)  # its task died
    failpoints.configure("epoch.before_write@epoch=1=raise")
    try:
        with pytest.raises(Exception, match="epoch.before_write"):
            IterationRunner(config, spark).run(batch_id="b2")
    finally:
        failpoints.configure("")
    result = IterationRunner(config, spark).run(batch_id="b3")
    assert result.final is not None and 1 in result.epochs_computed
    store = LocalStore(config.checkpoint_root)
    log = CheckpointLog(store, "pr-history")
    assert log.attempt_ids(1) == [] and log.fates(1) == {}, "the attempts' own records are collected"

    view = job_overview(store, "pr-history")
    epoch = next(e for e in view.epochs if e.epoch == 1)
    assert epoch.retention == "retired"
    by_status = {}
    for a in epoch.attempts:
        by_status.setdefault(a.status, []).append(a)
    [won] = by_status["committed"]
    assert won.attempt_id == epoch.attempt_id and won.run["runner"] == "library" and won.why is None
    assert len(by_status["aborted"]) == 2 and "superseded" not in by_status
    died = next(a for a in by_status["aborted"] if a.attempt_id == orphan.attempt_id)
    assert died.reason.startswith(ABANDONED) and died.run == airflow_run
    assert died.why == "its task was killed, lost or timed out before the attempt ended"
    assert died.ran_by == "task epoch_1.run try 1 of run manual__2026-11-29T00:00:00+00:00 of DAG iterate_pagerank"
    [failed] = [a for a in by_status["aborted"] if a is not died]
    assert failed.why.startswith("failed: FailpointError") and failed.run["runner"] == "library"
    assert {died.superseded_by, failed.superseded_by} == {won.attempt_id}
    assert set(epoch.phases) == {"restore", "step", "alignment", "checks", "commit"}
    assert all(v >= 0 for v in epoch.phases.values()) and epoch.phases["step"] > 0

    html = job_page(view, config.checkpoint_root, "/iterations/")
    for text in (orphan.attempt_id, "its task was killed, lost or timed out before the attempt ended",
                 f"superseded by <code>{won.attempt_id}</code>", "by epoch_1.run try 1", "by library runner",
                 'data-phase="step"', "retired (data deleted)"):
        assert text in html, text
