"""The CI subset of the fault-injection sweep (tests/faults/sweep.py): every scenario once,
with one seed; ``python -m tests.faults.report`` runs them all over several seeds and prints
the table. Each must end with nothing lost, nothing duplicated, no wrong result, and the
refusals it provokes."""

from __future__ import annotations

import pytest

from tests.faults.sweep import S3_SCENARIO, SCENARIOS, s3_faults

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# the refusals each scenario must provoke (at least)
REFUSALS = {"zombie attempt": 2, "damaged checkpoint": 1, "gap in the chain": 1, "two runs at once": 1}
# scenarios whose seed picks a branch, run once per branch: the chain's hole in the middle
# (even seeds) or at its newest manifest (odd)
SEEDS = {"gap in the chain": (1, 2)}
# scenarios whose run another test of CI makes, with the same assertions (``python -m
# tests.faults.report`` runs them here, over its seeds)
RUN_ELSEWHERE = {
    "coordinator events":
        "tests/integration/test_coordinator_events.py::test_events_exactly_once_in_order_across_failures",
    "finish/publication failures":
        "tests/integration/test_finish_lifecycle.py::test_failure_at_every_step_publishes_exactly_once",
    # run_job SIGKILLed right after an epoch's commit, resumed: the clock-skew scenario's run
    "kill after commit": "test_scenario[clock skew +-10 min-1]",
}


@pytest.mark.parametrize("name, seed", [(name, seed) for name in sorted(SCENARIOS) if name not in RUN_ELSEWHERE
                                        for seed in SEEDS.get(name, (1,))])
def test_scenario(spark, tmp_path, name, seed):
    out = SCENARIOS[name](spark, tmp_path, seed=seed)
    assert out.faults >= 1, out
    assert (out.lost, out.duplicated, out.wrong) == (0, 0, 0), out
    assert out.refused >= REFUSALS.get(name, 0), out
    assert out.garbage == 0, f"files of failed attempts left behind: {out}"
    if name.startswith("kill") or name == "clock skew +-10 min":
        assert out.recomputed <= 1, f"a recovery recomputes at most the epoch in flight: {out}"
    if name == "kill in finish/publication":  # every epoch was committed: none is computed again
        assert out.recomputed == 0, out
    if name == "kill in the overlap" and "epoch.before_land" in out.detail:
        # the epoch that ran beside the dying commit was complete: adopted, not computed again
        assert out.facts["killed_at"] + 1 in out.facts["epochs_adopted"], out
    if name == "kill in a sharing epoch":  # the checkpoints kept at the end share settled partitions
        assert out.facts["shared"] > 0, out


@pytest.mark.s3
def test_s3_faults_scenario(spark, tmp_path, moto_endpoint, bucket):
    out = s3_faults(spark, tmp_path, seed=3, moto_endpoint=moto_endpoint, bucket=bucket)
    assert out.faults >= 3, out
    assert (out.lost, out.duplicated, out.wrong) == (0, 0, 0), out
    assert out.scenario == S3_SCENARIO
    assert "lost-reply" in out.facts["kinds"], out
    # the driver and the Spark workers' clients all carry the faults (which of them draws one is
    # up to chance: each process seeds its own generator)
    assert out.facts["installed_processes"] >= 2, out.facts
    assert out.facts["retried"], "the store retried the transient errors"
    assert out.facts["kept"] == [4, 5], "retention kept the last two (of 0..5, each verified in full)"



def test_the_audit_sees_lost_duplicated_and_wrong_work(spark, tmp_path):
    """The audit is what makes the sweep's zeros mean something: given a job's store, trace and
    outputs damaged in each way, it counts each."""
    import json

    import pandas as pd

    from include.publication.outputs import published
    from spark_jobs.runner import IterationRunner
    from tests.faults.sweep import Outcome, audit, environment, pagerank_workload

    w = pagerank_workload(tmp_path, seed=1)
    cfg = w.config(tmp_path)
    trace = tmp_path / "trace.jsonl"
    with environment(ITERATIONS_TRACE=str(trace)):
        IterationRunner(cfg, spark).run()
    clean = audit(Outcome("clean", 1), spark, w, cfg, trace, tmp_path)
    assert (clean.lost, clean.duplicated, clean.wrong) == (0, 0, 0), clean

    first = trace.read_text().splitlines()[0]
    assert json.loads(first)["event"] == "checkpoint.committed"
    with open(trace, "a") as f:
        f.write(first + "\n")  # checkpoint 0 committed a second time
    (tmp_path / "store" / "jobs" / "job" / "checkpoints" / "0000000001.json").unlink()  # a gap
    ranks = published(cfg.output_path, "ranks").locations
    frame = pd.read_parquet(ranks[0])
    frame.assign(rank=frame["rank"] * 2).to_parquet(ranks[0])  # wrong values, same rows
    out = audit(Outcome("damaged", 1), spark, w, cfg, trace, tmp_path)
    assert out.duplicated == 1 and out.lost >= 1 and out.wrong == 1, out
