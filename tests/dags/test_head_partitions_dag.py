"""Heads with their own partition counts through a DAG (HeadOperatorTest's
testNotChainingHeadOperator, seed 000: a variable whose parallelism is its own, not the job's):
the job of ``tests.ticker:TwoHeads`` keeps ``counts`` in the job's ``num_partitions`` and ``total``
in one partition, through its head state, alignment (one report per partition of each head),
tail and checkpoints; the batch after a change of ``num_partitions`` (3 -> 2) moves ``counts``
and leaves ``total`` where it is, and the outputs equal the arithmetic."""

from __future__ import annotations

import json

import pytest

from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from tests.dags.conftest import airflow
from tests.helpers import read_published, write_dag_file

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_heads_keep_their_own_partition_counts(airflow_env, tmp_path):
    dags = write_dag_file(tmp_path / "dags", "two_heads", "tests.ticker:TwoHeads", epochs_per_batch=3,
                          job_id="two-heads", input_path=str(tmp_path / "no-input"), output_path=str(tmp_path / "out"),
                          checkpoint_root=str(tmp_path / "store"), max_epochs=6, tolerance=0, num_partitions=3,
                          retain_last=10)
    env = {**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": dags}
    job = IterationJob(JobConfig(job_id="two-heads", body="tests.ticker:TwoHeads", input=str(tmp_path / "no-input"),
                                 checkpoint_root=str(tmp_path / "store")))

    def partitions(cid):
        m = job.log.load(cid)
        return ({name: len(ds.partitions) for name, ds in m.variables.items()},
                {name: len(h.partitions) for name, h in m.head_state.heads.items()})

    for date, conf, expected in (("2026-06-01", {"continuation": False}, {"counts": 3, "total": 1}),
                                 ("2026-06-02", {"continuation": False, "num_partitions": 2}, {"counts": 2, "total": 1})):
        done = airflow(env, "dags", "test", "two_heads", date, "--conf", json.dumps(conf))
        log = done.stdout + done.stderr
        assert "state=success" in log, log[-5000:]
        latest = job.log.latest()
        epochs = [cid for cid in job.log.checkpoint_ids() if job.log.load(cid).kind == "epoch"][-3:]
        assert all(partitions(cid) == (expected, expected) for cid in epochs), [partitions(c) for c in epochs]
    assert latest.kind == "final", [(c, job.log.load(c).kind, job.log.load(c).epoch) for c in job.log.checkpoint_ids()]
    counts = read_published(tmp_path / "out" / "two-heads", "counts")
    assert dict(zip(counts["key"], counts["n"])) == {k: 6 * k for k in range(16)}
    total = read_published(tmp_path / "out" / "two-heads", "total")
    assert total["n"].tolist() == [6 * sum(range(16))]
