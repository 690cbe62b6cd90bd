"""Commits behind the next epoch (docs/design.md, "Commits behind the next epoch"): epoch k+1
runs while epoch k's checks and commit finish beside it, never commits before k, and is aborted
and redone from what did commit when k does not commit."""

from __future__ import annotations

import time

import pytest

from include.epoch.job import DEFAULT_CHECKS, DataCheckFailed, IterationJob
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of, write_edges

pytestmark = pytest.mark.spark

EPOCHS = 6


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return write_edges(tmp_path_factory.mktemp("graph") / "edges.csv", graph_with_dangling(50, 0.1, seed=11))


@pytest.fixture(scope="module")
def reference(spark, edges, tmp_path_factory):
    """The same job with each epoch committed before the next is planned."""
    cfg = pagerank_config(tmp_path_factory.mktemp("reference"), edges, max_epochs=EPOCHS, tolerance=0.0, retain_last=EPOCHS + 2)
    return IterationRunner(cfg, spark, overlap_commits=False).run()


def test_the_next_epoch_runs_while_an_epoch_commits_and_never_commits_before_it(spark, edges, tmp_path, reference):
    cfg = pagerank_config(tmp_path, edges, max_epochs=EPOCHS, tolerance=0.0, retain_last=EPOCHS + 2)
    job = IterationJob(cfg)
    latest_at_checks: dict[int, int | None] = {}
    beside: list[str] = []

    def watch(plan, decision, reports):
        latest_at_checks[plan.epoch] = job.log.latest_id()
        if plan.epoch == 2:  # epoch 2's checks wait until epoch 3 is planned from epoch 2's state
            deadline = time.monotonic() + 120
            while not job.log.attempt_ids(3):
                assert time.monotonic() < deadline, "epoch 3 was not planned while epoch 2 committed"
                time.sleep(0.02)
            beside.extend(job.log.attempt_ids(3))
            assert job.log.latest_id() == 1, "epoch 2 is not committed while its checks run"

    result = IterationRunner(cfg, spark, checks=DEFAULT_CHECKS + (watch,)).run()
    # each epoch's commit starts once the epoch before has committed
    assert latest_at_checks == {e: (e - 1 if e else None) for e in range(EPOCHS)}
    [attempt] = beside
    assert job.log.load(3).attempt_id == attempt, "the attempt planned beside epoch 2's commit committed epoch 3"
    assert job.log.load(3).parent_id == 2
    assert result.epochs_computed == reference.epochs_computed == list(range(EPOCHS))
    assert [d.metrics for d in result.decisions] == [d.metrics for d in reference.decisions]
    assert ranks_of(result.outputs["ranks"]) == ranks_of(reference.outputs["ranks"]), "bit-for-bit"


def test_a_refused_epoch_aborts_the_epoch_that_ran_beside_it_and_a_rerun_equals_the_uninterrupted_run(
        spark, edges, tmp_path, reference):
    cfg = pagerank_config(tmp_path, edges, max_epochs=EPOCHS, tolerance=0.0, retain_last=EPOCHS + 2)
    job = IterationJob(cfg)

    def refuse(plan, decision, reports):
        if plan.epoch == 2:
            raise DataCheckFailed("epoch 2 refused by the test")

    with pytest.raises(DataCheckFailed, match="epoch 2 refused by the test"):
        IterationRunner(cfg, spark, checks=DEFAULT_CHECKS + (refuse,)).run()
    assert job.log.latest_id() == 1, "nothing after what did commit"
    [(refused, fate)] = job.log.fates(2).items()
    assert fate["reason"].startswith("epoch 2 refused by the test")
    [(beside, fate)] = job.log.fates(3).items()
    assert fate["reason"].startswith("epoch 2 it ran from did not commit (DataCheckFailed: epoch 2 refused"), fate
    assert not job.log.committed_attempt(3)[0]
    assert not [o.key for o in job.store.list(job.log.layout.attempt(3, beside) + "/")
                if not o.key.endswith("_PLAN.json")], "the aborted attempt's files are deleted"

    rerun = IterationRunner(cfg, spark).run()
    assert rerun.restored_from == 1 and rerun.epochs_computed == list(range(2, EPOCHS))
    assert job.log.load(3).attempt_id != beside
    assert [d.metrics for d in rerun.decisions] == [d.metrics for d in reference.decisions[2:]]
    assert ranks_of(rerun.outputs["ranks"]) == ranks_of(reference.outputs["ranks"]), "bit-for-bit"
