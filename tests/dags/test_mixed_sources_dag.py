"""FLIP-147's partially finished job through a DAG (seed 001): the job of tests/mixed_sources.py
reads a bounded source (complete from the start) and an unbounded one (files keep coming). The
bounded one finishes in epoch 1 while the other still produces: the job goes on, and the
checkpoints taken in between record one source finished and the other not. A batch later, with
a failure of its first head (Airflow retries it: the coordinators are restored from such a
checkpoint), the restore skips exactly the finished parts: the bounded source is never listed or
read again (a file dropped into it after its end marker is never a split), the unbounded one
goes on from where it was, and the job ends when it ends too. Every file is processed once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from include.process import failpoints
from tests.dags.conftest import airflow
from tests.faults.airflow_sweep import task_tries
from tests.helpers import read_published, write_dag_file

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def drop(directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f".{name}.tmp").write_text("x,y\n1,2\n")
    (directory / f".{name}.tmp").rename(directory / name)  # a split appears at once


def test_one_source_finishes_while_the_other_produces(airflow_env, tmp_path):
    inbox, bounded, unbounded = tmp_path / "in", tmp_path / "in" / "bounded", tmp_path / "in" / "unbounded"
    for name in ("a0.csv", "a1.csv", "_DONE"):
        drop(bounded, name)
    for name in ("b0.csv", "b1.csv", "b2.csv"):
        drop(unbounded, name)
    dags = write_dag_file(tmp_path / "dags", "mixed_sources", "tests.mixed_sources:TwoSources", epochs_per_batch=3,
                          job_id="mixed", input_path=str(inbox), output_path=str(tmp_path / "out"),
                          checkpoint_root=str(tmp_path / "store"), max_epochs=20, tolerance=0, num_partitions=2,
                          retain_last=10)
    env = {**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": dags}
    conf = {"continuation": False}

    first = airflow(env, "dags", "test", "mixed_sources", "--conf", json.dumps(conf))
    assert "state=success" in first.stdout + first.stderr, (first.stdout + first.stderr)[-5000:]
    job = IterationJob(JobConfig(job_id="mixed", body="tests.mixed_sources:TwoSources", input=str(inbox),
                                 checkpoint_root=str(tmp_path / "store")))
    latest = job.log.latest()
    assert (latest.epoch, latest.head_state.status.value) == (2, "RUNNING"), \
        "one finished source of two does not end the job"
    finished = {cid: {name: job.log.load(cid).coordinators[name]["input_finished"] for name in ("bounded", "unbounded")}
                for cid in (0, 1, 2)}
    assert finished == {0: {"bounded": False, "unbounded": False}, 1: {"bounded": True, "unbounded": False},
                        2: {"bounded": True, "unbounded": False}}, finished

    drop(bounded, "a9.csv")  # after the bounded source's end: never a split
    drop(unbounded, "b3.csv")
    drop(unbounded, "_DONE")
    armed = Path(env[failpoints.FILE_ENV])
    fired = Path(env[failpoints.DIR_ENV])
    for old in fired.glob("*.fired"):
        old.unlink()
    armed.write_text("head.after_plan@epoch=3=raise-once")
    try:
        second = airflow(env, "dags", "test", "mixed_sources", "--conf", json.dumps(conf))
    finally:
        armed.write_text("")
    log = second.stdout + second.stderr
    assert "state=success" in log, log[-5000:]
    assert [p.name for p in fired.glob("*.fired")], "the head of epoch 3 failed once"
    assert task_tries(log).get("epoch_0.run") == 2, "Airflow retried it: a new process restored checkpoint 2"
    assert job.log.load(3).decision.reason == "end of input"
    assert job.log.latest().kind == "final"

    seen = read_published(tmp_path / "out" / "mixed", "seen")  # under the default output path, by job
    got = sorted(zip(seen["split"], seen["epoch"]))
    assert got == [("bounded/a0.csv", 0), ("bounded/a1.csv", 1), ("unbounded/b0.csv", 0), ("unbounded/b1.csv", 1),
                   ("unbounded/b2.csv", 2), ("unbounded/b3.csv", 3)], got
