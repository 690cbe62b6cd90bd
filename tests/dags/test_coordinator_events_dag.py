"""Coordinator events exactly once through a DAG (CoordinatorEventsExactlyOnceITCase and its
stream-operator-recipient variant with non-global failures, seeds 002 and 004): the job of
tests/coordinator_events.py (two coordinators sending 0..n-1 to one partition each, at different
speeds, from their own threads) run by ``airflow dags test`` of a DAG made with ``iteration_dag``,
each epoch's head in a task process of its own, with two failures
(``tests.faults.airflow_sweep.run_events_dag``; the epochs seeded, CI's seeds below):

- **a subtask-only failure**: partition 1's Spark task fails once the slow coordinator has sent
  what the epoch asked for, and the shut valve holds it; the head runs the attempt again in its
  own process (``attempt_retries=1``): the coordinators are told which partitions failed and go
  on, not reset, and the Airflow task is not retried;
- **a coordinator-only failure**: the fast coordinator raises while it handles an epoch's report
  (its valve shut, holding what it sent while the epoch ran): the task fails, Airflow retries it
  in a new process, where every coordinator is reset to the checkpoint before.

At the moment of each failure a checkpoint has completed (the coordinators were restored from one)
and the shut valve holds events: the precondition the seed's variant guarantees, asserted here
from what each fault recorded. The receiving side ends with exactly 0..n-1, in order, from each
coordinator, and every checkpoint is committed once. The three shapes of the DAG: with
``overlap_commits`` the coordinators handle epoch e's reports as the head of e+1 commits e behind
its own Spark job, so the coordinator's failure fails that task.
"""

from __future__ import annotations

import pytest

from tests.faults.airflow_sweep import EVENTS_FAST, EVENTS_SLOW, SHAPES, run_events_dag

pytestmark = [pytest.mark.spark, pytest.mark.slow]


# seeds whose failures fall in every epoch choice of events_faults: partition 1 in epoch 2 and
# 4, the coordinator in epochs 3 and 1 (and 1 again, failing epoch 2's head, with overlap_commits)
@pytest.mark.parametrize("shape, seed", [("default shape", 1), ("commit tasks", 4), ("overlapped commits", 6)])
def test_events_exactly_once_through_a_dag_with_subtask_and_coordinator_failures(airflow_env, spark, tmp_path,
                                                                                  shape, seed):
    commit_in_head, overlap = SHAPES[shape]
    out = run_events_dag(airflow_env, tmp_path, seed, commit_in_head=commit_in_head, overlap_commits=overlap)
    facts = out.facts
    log, tries, records = facts["log"], facts["tries"], facts["records"]
    assert facts["succeeded"], out.detail
    assert facts["poisoned"] and facts["coordinator_failed"], "both failures fired"
    poison_epoch, coordinator_epoch = facts["poison_epoch"], facts["coordinator_epoch"]

    # the subtask-only failure: told to the coordinators, which were restored from the
    # checkpoint before and whose shut valve held what the slow one sent for partition 1
    told = [r for r in records if r["fault"] == "partition"]
    assert told and {r["epoch"] for r in told} == {poison_epoch}, records
    assert 1 in {r["partition"] for r in told}, told
    assert all(r["restored_from"] is not None for r in told), "a checkpoint had completed"
    slow = [r for r in told if r["coordinator"] == "slow" and r["partition"] == 1]
    assert slow and slow[0]["dropped"], f"the valve held the slow coordinator's event for partition 1: {told}"
    assert f"epoch {poison_epoch}: attempt" in log and "failed in partition(s)" in log
    assert "RuntimeError: partition 1 poisoned); retrying in this process with the same inbox" in log
    assert tries.get(f"epoch_{poison_epoch}.run") == 1, f"retried in the head's process, not by Airflow: {tries}"

    # the coordinator-only failure: restored from the checkpoint before, its valve holding events
    failed = [r for r in records if r["fault"] == "coordinator"]
    assert len(failed) == 1 and failed[0]["epoch"] == coordinator_epoch, records
    assert failed[0]["restored_from"] is not None, "a checkpoint had completed"
    assert failed[0]["held"], "the shut valve held events sent while the epoch ran"
    task = (f"epoch_{coordinator_epoch + 1}.run" if overlap else  # committed behind the next epoch
            f"epoch_{coordinator_epoch}." + ("run" if commit_in_head else "commit"))
    assert tries.get(task) == 2, f"{task} failed and Airflow retried it: {tries}"

    # exactly once, in order; every checkpoint committed once, in a chain without gaps
    assert (out.lost, out.duplicated, out.wrong) == (0, 0, 0), out.detail
    assert facts["sequences"] == {"fast": list(range(EVENTS_FAST)), "slow": list(range(EVENTS_SLOW))}
    assert facts["final"].head_state.status.value == "TERMINATED"
    assert len({r["epoch"] for r in facts["rows"] if r["coordinator"] == "fast"}) >= 3, "events spread over epochs"
