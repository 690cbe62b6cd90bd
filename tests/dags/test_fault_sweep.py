"""The fault sweep through the Airflow path (tests/faults/airflow_sweep.py): ``airflow dags
test`` of the k-means DAG with failure points at every step of the epoch protocol, each failing
its task once; Airflow retries the task and the run ends equal to the failure-free run, every
checkpoint committed once, nothing lost, duplicated or left behind, each publication in the
OpenLineage events of the task that made it."""

from __future__ import annotations

import pytest

from include.process import failpoints
from tests.faults.airflow_sweep import GROUPS, SHAPES, reached, run_dag, task_of, task_tries

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: failure points of the code that the Airflow sweep leaves to other tests, and which
ELSEWHERE = {
    "epoch.before_align": "the library runner's, before it aligns (also passed by an overlap_commits head, which "
                          "commits the epoch before behind it through the same step): tests/faults/test_sweep.py "
                          "(kill before alignment)",
    "coordinator.triggered": "a coordinator's snapshot: tests/integration/test_coordinator_events.py",
    "publish.after_stage": "a reviewed job's finish, its outputs staged: tests/dags/test_stack.py (a publication "
                           "approved on the staged data exactly once)",
}


def test_every_failure_point_of_the_code_is_in_the_ci_subset_or_tested_elsewhere():
    """The points the code places (include.process.failpoints.POINTS, which refuses any other name) are
    each armed by a group below, or by the test ELSEWHERE names: a point added to the protocol
    fails this test until a scenario fails there."""
    covered = {p.split("@")[0] for points in GROUPS.values() for p in points}
    assert covered | set(ELSEWHERE) == failpoints.POINTS, sorted(failpoints.POINTS - covered - set(ELSEWHERE))
    assert not covered & set(ELSEWHERE), "a point is either here or elsewhere"


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("name", sorted(GROUPS))
def test_failures_at_protocol_steps_end_like_the_failure_free_run(airflow_env, spark, tmp_path, name, shape):
    """Every group under the three shapes of the DAG: ``commit_in_head`` on (``iteration_dag``'s
    default), where the align, commit and epoch-publication points fail the run task, whose
    retry adopts the complete attempt (or finds it committed) instead of running it again; off,
    where they fail the align and commit tasks; and ``overlap_commits``, where epoch e's commit
    and publication points fail epoch e+1's run task in the overlap, in the thread that commits
    e while e+1's Spark job runs, or as e+1 lands e's commit (and e+1's own points fire while e
    commits behind them): the retry adopts e's complete attempt, or finds it committed, and runs
    e+1 again. The three-task shape's input takes the Spark pass (``kmeans_workload``), the
    others' are small (Lloyd's pass on the driver)."""
    commit_in_head, overlap = SHAPES[shape]
    spark_pass = shape == "commit tasks"
    points = reached(GROUPS[name], commit_in_head, overlap)
    out = run_dag(airflow_env, tmp_path, seed=1, points=points, name=name, commit_in_head=commit_in_head,
                  overlap_commits=overlap, spark_pass=spark_pass)
    assert out.facts["succeeded"], out.detail
    assert out.facts["passes"] == {"in Spark" if spark_pass else "on the driver"}, out.facts["passes"]
    assert sorted(out.facts["fired"]) == sorted(points), "each point fired once"
    log = out.facts["log"]
    tries = task_tries(log)
    for point in points:
        task = task_of(point, commit_in_head, overlap)
        assert tries.get(task, 0) >= 2, f"{task} was retried after {point}: {tries}"
    if commit_in_head:  # every report was there as each Spark job ended: no sensor, no commit task
        assert not [t for t in tries if t.endswith((".align", ".commit"))], tries
    if overlap:  # epochs 0 and 1 committed behind the next epoch; epoch 2 (max_epochs) in its own task
        for e in (0, 1):
            assert f"epoch {e}: its checks and commit are left to the next epoch's head" in log
            assert f"committing it behind epoch {e + 1}'s Spark job" in log
        assert "epoch 2: its checks and commit are left" not in log
    assert out.facts["unannounced"] == [], "each publication in the lineage of the task that made it"
    assert (out.lost, out.duplicated, out.wrong) == (0, 0, 0), out.detail
    assert out.garbage == 0, f"files of failed attempts left behind: {out.detail}"
