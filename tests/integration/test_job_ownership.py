"""A job is its owner's, one run at a time, and no run of it reaches another job's store
(include.runs.ownership, include.runs.boundary.start_run), through the library runner."""

from __future__ import annotations

import threading

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.errors import OutputError
from include.runs.leases import Holder, JobLease
from include.runs.ownership import JobBusy, OwnershipError, read_owner
from include.store import LocalStore
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, write_edges

pytestmark = pytest.mark.spark


@pytest.fixture
def edges(tmp_path):
    return write_edges(tmp_path / "edges.csv", graph_with_dangling(12, 0.25, seed=3))


def test_the_first_run_records_the_owner_and_another_input_or_output_is_refused(spark, tmp_path, edges):
    cfg = pagerank_config(tmp_path, edges, max_epochs=3, output_path=str(tmp_path / "out"))
    IterationRunner(cfg, spark).run(max_epochs_in_batch=1)
    owner = read_owner(LocalStore(cfg.checkpoint_root), "pr")
    assert (owner.dag_id, owner.body, owner.input["path"], owner.output_path) == (
        None, "spark_jobs.bodies.pagerank:PageRank", edges, str(tmp_path / "out"))
    other_edges = write_edges(tmp_path / "other.csv", graph_with_dangling(12, 0.25, seed=4))
    for change, field in ((dict(input=other_edges), "input"), (dict(output_path=str(tmp_path / "elsewhere")), "output_path")):
        with pytest.raises(OwnershipError, match=f"job pr belongs to a run outside Airflow.*{field} "):
            IterationRunner(pagerank_config(tmp_path, edges, **{"max_epochs": 3, "output_path": str(tmp_path / "out"),
                                                                **change}), spark).run()
    assert CheckpointLog(LocalStore(cfg.checkpoint_root), "pr").latest_id() == 0, "the refused runs wrote nothing"
    moved = pagerank_config(tmp_path, edges, max_epochs=3, output_path=str(tmp_path / "elsewhere"))
    result = IterationRunner(moved, spark, take_over=True).run()
    assert result.restored_from == 0 and result.published["ranks"].startswith(str(tmp_path / "elsewhere"))
    assert read_owner(LocalStore(cfg.checkpoint_root), "pr").output_path == str(tmp_path / "elsewhere")


def test_a_second_run_of_a_busy_job_fails_naming_the_first_or_waits_for_it(spark, tmp_path, edges):
    cfg = pagerank_config(tmp_path, edges, max_epochs=2)
    other = JobLease(LocalStore(cfg.checkpoint_root), "pr").acquire(Holder("process", host="other-host", pid=7, nonce="n"))
    with pytest.raises(JobBusy, match="job pr is being run by process 7 on other-host"):
        IterationRunner(cfg, spark).run()
    assert CheckpointLog(LocalStore(cfg.checkpoint_root), "pr").latest_id() is None, "nothing written"
    threading.Timer(1.0, other.release).start()
    result = IterationRunner(cfg, spark, lease_wait=60).run()
    assert result.checkpoint_id == 2 and result.status.value == "TERMINATED"
    assert JobLease(LocalStore(cfg.checkpoint_root), "pr").current().holder is None, "released at the end of the run"


def test_an_output_inside_another_jobs_store_is_refused_before_any_work(spark, tmp_path, edges):
    victim = pagerank_config(tmp_path, edges, job_id="victim", max_epochs=2)
    IterationRunner(victim, spark).run()
    victim_log = CheckpointLog(LocalStore(victim.checkpoint_root), "victim")
    before = {o.key: o.size for o in victim_log.store.list("jobs/victim/")}
    inside = str(tmp_path / "store" / "jobs" / "victim" / "checkpoints")
    attacker = pagerank_config(tmp_path, edges, job_id="attacker", max_epochs=2,
                               checkpoint_root=str(tmp_path / "attacker-store"), output_path=inside)
    with pytest.raises(OutputError, match="lies inside a checkpoint store"):
        IterationRunner(attacker, spark).run()
    assert {o.key: o.size for o in victim_log.store.list("jobs/victim/")} == before
    for cid in victim_log.checkpoint_ids():
        victim_log.load(cid, verify="full")
    assert not LocalStore(tmp_path / "attacker-store").exists("jobs/attacker/owner.json"), "refused before claiming"
