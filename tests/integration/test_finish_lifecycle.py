"""The finish lifecycle and the two-phase commit of outputs (FLIP-147), with the library runner.

A failure is injected at every step (a failpoint raising where a process would die: nothing
cleans up after it), the job is run again by a fresh runner, and its published outputs must equal
a failure-free run's, each published exactly once: per-epoch increments once per epoch, final
outputs one version, no staged epoch output left behind.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from include.checkpoints.head_state import HeadStatus
from include.checkpoints.lifecycle import OperatorState, StopMode
from include.contract.config import JobConfig
from include.epoch.job import DEFAULT_CHECKS, IterationJob
from include.process import failpoints
from include.process.failpoints import FailpointError
from include.publication.outputs import published, published_increments
from spark_jobs.runner import IterationRunner
from tests.helpers import (
    graph_with_dangling,
    pagerank_config,
    ranks_of,
    read_published,
    write_edges,
)

pytestmark = pytest.mark.spark

K = 3
EPOCHS = 4  # max_epochs with tolerance 0: epochs 0..3, final checkpoint 4


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    from sklearn.datasets import make_blobs

    path = tmp_path_factory.mktemp("points") / "points.parquet"
    X, _ = make_blobs(n_samples=240, centers=K, n_features=2, cluster_std=2.0, random_state=3)
    pd.DataFrame({"id": np.arange(len(X)), "x": X[:, 0], "y": X[:, 1]}).to_parquet(path)
    return str(path)


def kmeans_config(root, points, **kw) -> JobConfig:
    settings = dict(job_id="km", body="kmeans", input=points, checkpoint_root=str(root / "store"),
                    output_path=str(root / "out"), body_params={"k": K, "seed": 7}, max_epochs=EPOCHS,
                    tolerance=0.0, num_partitions=2, retain_last=2)
    settings.update(kw)
    return JobConfig(**settings)


def outputs_of(output_path) -> dict[str, pd.DataFrame]:
    got = {name: read_published(output_path, name).sort_values(key).reset_index(drop=True)
           for name, key in (("centroids", "cluster_id"), ("assignments", "id"))}
    inc = published_increments(str(output_path), "centroid_history")
    got["centroid_history"] = (pd.concat([pd.read_parquet(f) for f in inc.locations])
                               .sort_values(["epoch", "cluster_id"]).reset_index(drop=True))
    return got


def assert_same_outputs(got, expected):
    for name in expected:
        pd.testing.assert_frame_equal(got[name], expected[name], check_exact=False, rtol=0, atol=1e-9)


def assert_published_once(cfg, final_id):
    """Each final output has one version, from the final checkpoint, replacing nothing; the
    per-epoch output has one increment per epoch checkpoint; no staged epoch output is left."""
    for name in ("centroids", "assignments"):
        p = published(cfg.output_path, name)
        assert (p.checkpoint_id, p.manifest["replaces"]) == (final_id, None)
        versions = {e.split("/", 1)[0] for e in os.listdir(os.path.join(cfg.output_path, name))} - {"_PUBLISHED.json"}
        assert versions == {f"v-km-{final_id}"}, versions
    inc = published_increments(cfg.output_path, "centroid_history")
    assert inc.checkpoints == tuple(("km", e) for e in range(EPOCHS)), "one increment per epoch, none twice"
    assert inc.rows == EPOCHS * K
    job = IterationJob(cfg)
    staged = [o.key for o in job.store.list(job.log.layout.attempts()) if "/outputs/centroid_history/" in o.key]
    assert staged == [], "published epoch outputs are released from staging"
    final = job.log.load(final_id)
    lifecycle = job.publisher.lifecycle(final)
    assert all(lifecycle.states[f"sink:{n}"] is OperatorState.PUBLISHED for n in ("centroids", "assignments"))
    assert lifecycle.states["head:centroids"] is OperatorState.FULLY_FINISHED


@pytest.fixture(scope="module")
def reference(spark, points, tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    cfg = kmeans_config(root, points)
    result = IterationRunner(cfg, spark).run()
    assert result.status is HeadStatus.TERMINATED and result.checkpoint_id == EPOCHS
    return cfg, outputs_of(cfg.output_path)


def test_failure_free_run_records_the_lifecycle_in_every_checkpoint(spark, reference):
    cfg, expected = reference
    job = IterationJob(cfg)
    assert_published_once(cfg, EPOCHS)
    last_epoch = job.log.load(EPOCHS - 1, verify="none")  # the epoch that decided termination
    assert last_epoch.lifecycle.states["source"] is OperatorState.END_OF_INPUT
    assert last_epoch.lifecycle.states["head:centroids"] is OperatorState.END_OF_INPUT
    assert last_epoch.lifecycle.states["sink:assignments"] is OperatorState.RUNNING
    assert last_epoch.lifecycle.states["sink:centroid_history"] is OperatorState.RUNNING
    assert set(job.log.publications.of(EPOCHS - 1)) == {"centroid_history"}, "its epoch output is published"
    final = job.log.load(EPOCHS)
    assert final.lifecycle.all_fully_finished and final.lifecycle.stop is None
    assert len(expected["centroid_history"]) == EPOCHS * K


@pytest.mark.parametrize("point", [
    "publish.after_output@checkpoint=1@output=centroid_history",  # an epoch committed, its output not recorded
    "publish.before_output@checkpoint=2@output=centroid_history",  # an epoch committed, nothing published
    "finish.before_final_checkpoint",  # between finish (outputs staged) and the final checkpoint
    "finish.after_final_checkpoint",  # between the final checkpoint and publication
    "publish.before_output@checkpoint=4@output=centroids",  # during publication: assignments done
    "publish.after_output@checkpoint=4@output=assignments",  # during publication: written, not recorded
])
def test_failure_at_every_step_publishes_exactly_once(spark, points, reference, tmp_path, point):
    """Also the fault sweep's finish/publication scenario (tests/faults/sweep.py, which CI runs
    here: the same failure points): its audit of the store and of the trace every run appends to
    finds nothing lost, duplicated, wrong or left behind."""
    from tests.faults.sweep import Outcome, Workload, audit, environment

    cfg = kmeans_config(tmp_path, points)
    trace = tmp_path / "trace.jsonl"
    failpoints.configure(f"{point}=raise")
    try:
        with pytest.raises(FailpointError), environment(**{failpoints.TRACE_ENV: str(trace)}):
            IterationRunner(cfg, spark).run()
    finally:
        failpoints.configure("")
    job = IterationJob(cfg)
    crashed_at = job.log.latest_id()
    with environment(**{failpoints.TRACE_ENV: str(trace)}):
        resumed = IterationRunner(cfg, spark).run()
    assert resumed.status is HeadStatus.TERMINATED and resumed.checkpoint_id == EPOCHS
    assert resumed.restored_from == crashed_at
    # nothing done before the crash is done again: epochs after it only, finish at most once
    assert resumed.epochs_computed == list(range(crashed_at + 1, EPOCHS))
    assert len(job.log.attempt_ids(EPOCHS)) == 1, "one finish attempt: no finish was redone"
    assert_published_once(cfg, EPOCHS)
    assert_same_outputs(outputs_of(cfg.output_path), reference[1])

    with environment(**{failpoints.TRACE_ENV: str(trace)}):
        again = IterationRunner(cfg, spark).run()  # a run after publication publishes nothing again
    assert again.epochs_computed == [] and again.status is HeadStatus.TERMINATED
    assert_published_once(cfg, EPOCHS)
    workload = Workload("kmeans", points, EPOCHS, cfg.body_params)
    out = audit(Outcome("finish/publication failures", 1, runs=3, faults=1, detail=point), spark, workload, cfg,
                trace, tmp_path, expected={n: reference[1][n] for n in ("centroids", "assignments")})
    assert (out.lost, out.duplicated, out.wrong, out.garbage) == (0, 0, 0, 0), out


def test_a_finished_source_is_never_read_again(spark, points, tmp_path):
    """Crash after the final checkpoint, then remove the input: the restore only publishes."""
    import shutil

    mine = str(tmp_path / "points.parquet")
    shutil.copy(points, mine)
    cfg = kmeans_config(tmp_path, mine)
    failpoints.configure("finish.after_final_checkpoint=raise")
    try:
        with pytest.raises(FailpointError):
            IterationRunner(cfg, spark).run()
    finally:
        failpoints.configure("")
    os.remove(mine)
    resumed = IterationRunner(cfg, spark).run()
    assert resumed.status is HeadStatus.TERMINATED and resumed.epochs_computed == []
    assert set(resumed.published) == {"centroids", "assignments"}
    assert_published_once(cfg, EPOCHS)


def test_delta_outputs_one_version_per_publication_across_a_crash(spark, points, reference, tmp_path):
    from deltalake import DeltaTable

    cfg = kmeans_config(tmp_path, points, output_format="delta")
    failpoints.configure("publish.after_output@checkpoint=4@output=assignments=raise;"
                         "publish.after_output@checkpoint=2@output=centroid_history=raise")
    try:
        with pytest.raises(FailpointError):  # after epoch 2's append, before it was recorded
            IterationRunner(cfg, spark).run()
        with pytest.raises(FailpointError):  # after assignments' Delta commit, before the record
            IterationRunner(cfg, spark).run()
    finally:
        failpoints.configure("")
    assert IterationRunner(cfg, spark).run().status is HeadStatus.TERMINATED
    IterationRunner(cfg, spark).run()
    history = DeltaTable(os.path.join(cfg.output_path, "centroid_history"))
    assert history.version() == EPOCHS - 1, "one appended version per epoch (versions 0..3)"
    got = history.to_pandas().sort_values(["epoch", "cluster_id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, reference[1]["centroid_history"], check_exact=False, rtol=0, atol=1e-9)
    for name, key in (("centroids", "cluster_id"), ("assignments", "id")):
        table = DeltaTable(os.path.join(cfg.output_path, name))
        assert table.version() == 0, f"{name}: one version for the one published batch"
        got = table.to_pandas().sort_values(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, reference[1][name], check_exact=False, rtol=0, atol=1e-9)
    # Spark reads the table's files with its Parquet reader
    files = DeltaTable(os.path.join(cfg.output_path, "assignments")).file_uris()
    assert spark.read.parquet(*files).count() == 240


# --- stop modes ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return write_edges(tmp_path_factory.mktemp("graph") / "edges.csv", graph_with_dangling(40, 0.1, seed=4))


def test_suspend_then_resume_equals_an_uninterrupted_run(spark, edges, tmp_path):
    reference = IterationRunner(pagerank_config(tmp_path / "ref", edges, max_epochs=8, tolerance=0.0,
                                                output_path=str(tmp_path / "ref" / "out")), spark).run()
    cfg = pagerank_config(tmp_path, edges, max_epochs=8, tolerance=0.0, retain_last=1,
                          output_path=str(tmp_path / "out"))
    job = IterationJob(cfg)

    def suspend_while_running(plan, decision, reports):
        if plan.epoch == 2:
            job.stopping.request_stop("suspend", requested_by="test")

    # each epoch commits before the next is planned: the request made during epoch 2's commit is
    # seen at the boundary right after it (with commits behind, at that one or the next)
    first = IterationRunner(cfg, spark, checks=DEFAULT_CHECKS + (suspend_while_running,),
                            overlap_commits=False).run()
    assert first.status is HeadStatus.SUSPENDED and first.suspended_at == 2
    assert first.epochs_computed == [0, 1, 2], "honoured at the next epoch boundary"
    assert first.published == {} and not os.path.exists(tmp_path / "out"), "nothing flushed or published"
    assert job.log.control.stop_request() is None and job.log.control.savepoints() == [2]

    resumed = IterationRunner(cfg, spark).run()
    assert resumed.restored_from == 2 and resumed.epochs_computed == list(range(3, 8))
    assert resumed.status is HeadStatus.TERMINATED
    assert ranks_of(resumed.outputs["ranks"]) == ranks_of(reference.outputs["ranks"]), "bit-for-bit"
    assert job.log.load(2).checkpoint_id == 2, "retention keeps the savepoint (retain_last=1)"


def test_a_suspend_requested_while_a_commit_runs_behind_is_taken_at_a_committed_epoch(spark, edges, tmp_path):
    """Commits behind the next epoch: a request made during epoch 2's commit (its checks) is
    honoured at the first boundary that sees it, after epoch 2 or after epoch 3 that ran beside
    that commit; either way the run suspends at a committed checkpoint, with nothing in flight,
    and resumes to the uninterrupted run's ranks."""
    reference = IterationRunner(pagerank_config(tmp_path / "ref", edges, max_epochs=8, tolerance=0.0), spark).run()
    cfg = pagerank_config(tmp_path, edges, max_epochs=8, tolerance=0.0)
    job = IterationJob(cfg)

    def suspend_while_committing(plan, decision, reports):
        if plan.epoch == 2:
            job.stopping.request_stop("suspend", requested_by="test")

    first = IterationRunner(cfg, spark, checks=DEFAULT_CHECKS + (suspend_while_committing,)).run()
    assert first.status is HeadStatus.SUSPENDED and first.suspended_at in (2, 3)
    assert first.epochs_computed == list(range(first.suspended_at + 1))
    assert job.log.latest_id() == first.suspended_at and job.log.control.savepoints() == [first.suspended_at]
    assert job.attempts.live_attempts(first.suspended_at + 1) == ([], []), "nothing planned past the savepoint"
    resumed = IterationRunner(cfg, spark).run()
    assert resumed.epochs_computed == list(range(first.suspended_at + 1, 8))
    assert ranks_of(resumed.outputs["ranks"]) == ranks_of(reference.outputs["ranks"]), "bit-for-bit"


def test_suspend_before_a_run_starts_no_epoch(spark, edges, tmp_path):
    cfg = pagerank_config(tmp_path, edges, max_epochs=8, tolerance=0.0)
    IterationRunner(cfg, spark).run(max_epochs_in_batch=2)
    IterationJob(cfg).stopping.request_stop("suspend")
    result = IterationRunner(cfg, spark).run()
    assert result.status is HeadStatus.SUSPENDED and result.epochs_computed == [] and result.suspended_at == 1


def test_drain_finishes_and_publishes_now(spark, edges, tmp_path):
    """A drain requested while epoch 2 commits: finish at checkpoint 2, publish at once; the
    result is the one a job limited to 3 epochs gives."""
    cfg = pagerank_config(tmp_path, edges, max_epochs=30, tolerance=0.0, output_path=str(tmp_path / "out"))
    job = IterationJob(cfg)

    def drain_while_running(plan, decision, reports):
        if plan.epoch == 2:
            job.stopping.request_stop("drain")

    result = IterationRunner(cfg, spark, checks=DEFAULT_CHECKS + (drain_while_running,),
                             overlap_commits=False).run()
    assert result.status is HeadStatus.TERMINATED and result.epochs_computed == [0, 1, 2]
    final = job.log.latest()
    assert (final.kind, final.checkpoint_id, final.epoch) == ("final", 3, 2)
    assert final.lifecycle.stop is StopMode.DRAIN and final.lifecycle.all_fully_finished
    assert job.log.control.stop_request() is None, "the request is consumed"
    assert published(cfg.output_path, "ranks").checkpoint_id == 3, "published immediately"

    limited = IterationRunner(pagerank_config(tmp_path / "ref", edges, max_epochs=3, tolerance=0.0), spark).run()
    drained = read_published(cfg.output_path, "ranks").set_index("node")["rank"].to_dict()
    assert drained == ranks_of(limited.outputs["ranks"])
