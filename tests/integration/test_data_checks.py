"""Data checks between rounds on Spark: a body made to produce bad data at epoch k has its
commit refused (the attempt aborted, the previous checkpoint still the latest, the report
naming the failing expectation kept in the store); once the input is fixed the same job goes
on and ends where a run without the fault ends. A warning does not block and is kept."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.contract.config import JobConfig
from include.epoch.job import DataCheckFailed, IterationJob
from include.errors import ConfigError
from include.store import LocalStore
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, ranks_of, write_edges

pytestmark = pytest.mark.spark

EPOCHS = 3
FAULT_AT = 1


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return write_edges(tmp_path_factory.mktemp("checks") / "edges.csv", graph_with_dangling(40, 0.1, seed=11))


@pytest.fixture(scope="module")
def reference_ranks(spark, edges, tmp_path_factory):
    cfg = JobConfig(job_id="ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path_factory.mktemp("ref")),
                    max_epochs=EPOCHS, tolerance=0.0, num_partitions=3)
    return ranks_of(IterationRunner(cfg, spark).run().outputs["ranks"])


def check_results(store_root: str, job_id: str, epoch: int) -> list[dict]:
    log = CheckpointLog(LocalStore(store_root), job_id)
    prefix = log.layout.checks(epoch, "x").rsplit("/", 1)[0] + "/"
    found = [o.key for o in log.store.list(prefix) if o.key.endswith("validation.json")]
    return [json.loads(log.store.get(k)) for k in sorted(found)]


EXPECTED_FAILURE = {
    "nan": "ranks_finite",
    "lost_mass": "rank_mass",
    "negative": "ranks_nonnegative",
    "schema": "ranks_schema_stable",
}


@pytest.mark.parametrize("fault", sorted(EXPECTED_FAILURE))
def test_bad_round_is_refused_then_the_fixed_input_goes_on(spark, edges, reference_ranks, tmp_path, fault):
    marker = tmp_path / "bad-input"
    marker.write_text("present while the input is bad")
    store = str(tmp_path / "store")
    cfg = JobConfig(job_id=f"bad-{fault}", body="tests.faulty_bodies:FaultyPageRank", input=edges,
                    checkpoint_root=store, max_epochs=EPOCHS, tolerance=0.0, num_partitions=3,
                    body_params={"fault": fault, "at_epoch": FAULT_AT, "while_exists": str(marker)})

    with pytest.raises(DataCheckFailed) as refused:
        IterationRunner(cfg, spark).run()
    message = str(refused.value)
    failing = EXPECTED_FAILURE[fault]
    assert f"FAILED  {failing} [critical]" in message, message
    assert "observed" in message and "expected" in message and "report: " in message

    job = IterationJob(cfg)
    assert job.log.latest_id() == FAULT_AT - 1, "the bad round never became a checkpoint"
    attempt = refused.value.report.attempt_id
    assert job.log.is_aborted(FAULT_AT, attempt)
    assert not list(job.store.list(job.log.layout.attempt(FAULT_AT, attempt) + "/")), "nothing of it can be read"
    [kept] = check_results(store, cfg.job_id, FAULT_AT)
    assert kept["report"]["success"] is False
    failed = {o["name"]: o for o in kept["report"]["outcomes"] if o["status"] == "failed"}
    assert failing in failed and failed[failing]["severity"] == "critical"
    assert kept["great_expectations"]["success"] is False
    html = job.store.get(job.log.layout.checks(FAULT_AT, attempt) + "/data_docs.html").decode()
    assert "<html" in html.lower() and failing.split("_")[0] in html

    marker.unlink()  # the input is fixed: the same job goes on from its latest checkpoint
    result = IterationRunner(cfg, spark).run()
    assert result.restored_from == FAULT_AT - 1
    assert result.epochs_computed == list(range(FAULT_AT, EPOCHS))
    assert ranks_of(result.outputs["ranks"]) == reference_ranks, "as if the bad round never happened"
    passed = check_results(store, cfg.job_id, FAULT_AT)
    assert sorted(r["report"]["success"] for r in passed) == [False, True], "both attempts' results are kept"


def test_an_empty_cluster_is_refused_and_a_warning_lets_it_through(spark, tmp_path):
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=150, centers=3, n_features=2, cluster_std=0.8, random_state=4)
    points = tmp_path / "points.parquet"
    pd.DataFrame({"id": np.arange(len(X)), "x": X[:, 0], "y": X[:, 1]}).to_parquet(points)
    marker = tmp_path / "bad-input"
    marker.write_text("x")
    params = {"k": 3, "seed": 1, "fault": "empty_cluster", "at_epoch": 1, "while_exists": str(marker)}
    cfg = JobConfig(job_id="km-empty", body="tests.faulty_bodies:FaultyKMeans", input=str(points),
                    checkpoint_root=str(tmp_path / "store"), max_epochs=3, tolerance=0.0, num_partitions=2,
                    body_params=params)
    with pytest.raises(DataCheckFailed, match=r"FAILED  no_empty_cluster \[critical\].*min_cluster_size=0"):
        IterationRunner(cfg, spark).run()
    assert IterationJob(cfg).log.latest_id() == 0

    # the job's own checks lower it to a warning: the epoch commits, the warning is kept
    lenient = JobConfig(**{**cfg.__dict__, "checks": {"expectations": [{"name": "no_empty_cluster", "severity": "warning"}]}})
    job = IterationJob(lenient)
    result = IterationRunner(lenient, spark).run()
    assert result.epochs_computed == [1, 2]
    [refused, warned] = sorted(check_results(lenient.checkpoint_root, cfg.job_id, 1), key=lambda r: r["report"]["success"])
    outcome = {o["name"]: o for o in warned["report"]["outcomes"]}["no_empty_cluster"]
    assert warned["report"]["success"] is True and outcome["status"] == "failed" and outcome["severity"] == "warning"
    assert warned["report"]["counts"]["warned"] == 1
    assert job.log.load(1).decision.metrics["min_cluster_size"] == 0.0


def test_a_warning_only_expectation_never_blocks_and_is_kept(spark, edges, tmp_path):
    checks = {"expectations": [
        {"name": "impossible_max", "type": "expect_column_values_to_be_between",
         "kwargs": {"column": "ranks.rank.max", "max_value": 1e-12}, "severity": "warning",
         "description": "fails on purpose"},
        {"name": "ranks_nonnegative", "enabled": False},
    ]}
    cfg = JobConfig(job_id="warn", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "store"),
                    max_epochs=3, tolerance=0.0, num_partitions=2, checks=checks, retain_last=10)
    result = IterationRunner(cfg, spark).run()
    assert result.epochs_computed == [0, 1, 2] and result.status.value == "TERMINATED"
    for epoch in range(3):
        [kept] = check_results(cfg.checkpoint_root, cfg.job_id, epoch)
        outcomes = {o["name"]: o for o in kept["report"]["outcomes"]}
        assert kept["report"]["success"] is True
        assert outcomes["impossible_max"]["status"] == "failed"
        assert outcomes["impossible_max"]["observed"]["ranks.rank.max"] > 1e-12
        assert "ranks_nonnegative" not in outcomes, "disabled by the job's checks"
        assert outcomes["rank_mass"]["status"] == "passed"
        attempt = kept["report"]["attempt_id"]
        page = IterationJob(cfg).store.get(IterationJob(cfg).log.layout.checks(epoch, attempt) + "/data_docs.html")
        assert b"fails on purpose" in page, "the warning's Data Docs page is kept (it shows the description)"
    # final checkpoint: the output's checks ran too (metrics and the input fact are absent there)
    [final] = check_results(cfg.checkpoint_root, cfg.job_id, 3)
    statuses = {o["name"]: o["status"] for o in final["report"]["outcomes"]}
    assert final["report"]["kind"] == "final" and statuses["rank_mass"] == "passed"
    assert statuses["ranks_cover_input"] == "skipped"

    # retention: check results go with their checkpoint when it is retired
    IterationJob(cfg).log.retention.collect_garbage(retain_last=1)
    assert not check_results(cfg.checkpoint_root, cfg.job_id, 0)
    assert check_results(cfg.checkpoint_root, cfg.job_id, 3)


def test_checks_off_means_no_profile_and_no_report(spark, edges, tmp_path):
    cfg = JobConfig(job_id="off", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "store"),
                    max_epochs=2, tolerance=0.0, num_partitions=2, checks={"enabled": False})
    IterationRunner(cfg, spark).run()
    job = IterationJob(cfg)
    assert not list(job.store.list(f"{job.log.layout.root}/checks/"))
    fresh = IterationJob(JobConfig(**{**cfg.__dict__, "job_id": "off-plan"}))
    assert fresh.attempts.plan_epoch().profile is False, "the tail is told not to profile"


def test_a_bad_expectation_is_a_config_error_naming_it(spark, edges, tmp_path):
    def config(**checks):
        return JobConfig(job_id="typo", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "store"),
                         max_epochs=2, tolerance=0.0, num_partitions=2, checks=checks)

    with pytest.raises(ConfigError, match="expectation 'mine' .*expect_column_values_to_be_purple"):
        config(expectations=[{"name": "mine", "type": "expect_column_values_to_be_purple",
                              "kwargs": {"column": "ranks.rows"}}])  # refused as the job is configured
    typo = config(expectations=[{"name": "mine", "type": "expect_column_values_to_be_between",
                                 "kwargs": {"column": "rank.sum", "max_value": 2}}])
    with pytest.raises(ConfigError, match="'rank.sum'"):
        IterationRunner(typo, spark).run()  # a column no checkpoint has: refused before any epoch runs
    assert IterationJob(typo).log.latest_id() is None and not IterationJob(typo).log.has_started()
