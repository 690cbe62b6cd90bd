"""``commit_in_head`` (the default): one task per epoch where it can be. The head aligns and commits its epoch
when every report is there as the Spark job ends, skipping its group's sensor and commit task;
an epoch whose report is missing then goes through the sensor (deferred until the report
arrives) and the commit task, as without the option. Run by ``airflow dags test``, whose one
command runs every batch of a job longer than one."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sqlite3
import time

import pytest

from include.contract.config import JobConfig
from spark_jobs.runner import IterationRunner
from tests.dags.conftest import start_airflow
from tests.helpers import graph_with_dangling, ranks_of, read_published, release_hold, wait_held, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _task_states(db_path: str, job_id: str) -> list[dict[str, str]]:
    """Task states per DAG run of ``job_id`` (runs in the order they started)."""
    with sqlite3.connect(db_path) as db:
        runs = [(run_id, conf) for run_id, conf in db.execute(
            "select run_id, conf from dag_run where dag_id='iterate_pagerank' order by id")]
        mine = [run_id for run_id, conf in runs if f'"{job_id}"' in str(conf)]
        return [dict(db.execute("select task_id, state from task_instance where dag_id='iterate_pagerank' "
                                "and run_id=?", (run_id,)).fetchall()) for run_id in mine]


def test_the_head_commits_unless_a_report_is_missing_and_batches_go_on_in_one_dags_test(airflow_env, spark, tmp_path):
    """Seven epochs of a three-epoch DAG, in one ``dags test``: three batches. Epoch 1's Spark
    job ends with one partition's report taken away (held at ``head.after_run``, its file moved
    aside): its head leaves the epoch to the sensor, which defers until the report is put back,
    and the commit task commits it. Every other epoch is one task: its align and commit are
    skipped. A batch that ends before the job terminates continues it: under ``airflow dags
    test`` nothing would start a queued continuation run, so the next batches run in the same
    command, one after the other (each batch hands the next one's conf back to the first
    command's continuation task), until the job terminates. The ranks equal the library's."""
    holds = tmp_path / "holds"
    holds.mkdir()
    env = {**airflow_env, "ITERATIONS_EPOCHS_PER_BATCH": "3",  # commit_in_head: the DAG's default
           "ITERATIONS_FAILPOINTS": "head.after_run@epoch=1=hold", "ITERATIONS_FAILPOINT_DIR": str(holds)}
    graph = graph_with_dangling(30, 0.12, seed=8)
    edges = write_edges(tmp_path / "edges.csv", graph)
    store = tmp_path / "store"
    conf = {"job_id": "pr-inline", "input_path": edges, "checkpoint_root": str(store),
            "output_path": str(tmp_path / "out"), "max_epochs": 7, "tolerance": 0, "num_partitions": 3}
    db = os.path.join(env["AIRFLOW_HOME"], "airflow.db")
    out = open(tmp_path / "dags_test.log", "w+")
    proc = start_airflow(env, "dags", "test", "iterate_pagerank", "--conf", json.dumps(conf), log_path=out.name)
    aside = tmp_path / "report.json"
    try:
        deadline = time.monotonic() + 300
        wait_held(holds, "head.after_run@epoch=1", alive=lambda: proc.poll() is None, timeout=300,
                  context=lambda: open(out.name).read()[-3000:])
        reports = glob.glob(str(store / "**" / "attempts" / f"{1:010d}" / "**" / "_reports" / "**" / "*part-00001*"),
                            recursive=True)
        assert len(reports) == 1, reports
        shutil.move(reports[0], aside)
        release_hold(holds, "head.after_run@epoch=1")
        waiting = re.compile(r"epoch 1 attempt \S+: waiting for 1 report\(s\): ranks/1")  # the sensor's trigger
        while not waiting.search(open(out.name).read()):
            assert proc.poll() is None and time.monotonic() < deadline, open(out.name).read()[-3000:]
            time.sleep(0.2)
        assert proc.poll() is None and "epoch 1 committed" not in open(out.name).read()
        shutil.move(aside, reports[0])
        assert proc.wait(timeout=600) == 0, open(out.name).read()[-5000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        if aside.exists():
            shutil.move(aside, reports[0])
    log = open(out.name).read()
    assert "epoch 1: 1 partition report(s) missing when the Spark job ended (ranks/1): the alignment sensor " \
           "waits for them" in log
    for epoch in range(7):
        assert f"epoch {epoch} committed" in log
    # the batches: the first command runs the second, which hands the third back to it
    assert "airflow dags test runs the next batch (epoch 3 on) in this command" in log
    assert "the airflow dags test command that started it runs the next batch (epoch 6 on)" in log
    assert "airflow dags test runs the next batch (epoch 6 on) in this command" in log
    assert "epoch 0 is committed (checkpoint 0): restored, not recomputed" not in log
    assert "final checkpoint 7 committed" in log and "job pr-inline is TERMINATED: nothing to continue" in log
    assert "job pr-inline: 2 more batch(es) ran in this command; nothing to continue" in log
    # a successful run logs no error: not the "Triggered DAG" link's lookup of a run the
    # continuations never triggered (operators.continuation.ContinuationLink), nor anything else
    assert not [line for line in log.splitlines() if "[error" in line], log[-3000:]
    with sqlite3.connect(db) as conn:  # three runs, nothing left queued
        states = [state for state, conf_ in conn.execute(
            "select state, conf from dag_run where dag_id='iterate_pagerank' order by id") if '"pr-inline"' in str(conf_)]
    assert states == ["success"] * 3, states
    first, second, third = _task_states(db, "pr-inline")
    assert first == {"epoch_0.run": "success", "epoch_0.align": "skipped", "epoch_0.commit": "skipped",
                     "epoch_1.run": "success", "epoch_1.align": "success", "epoch_1.commit": "success",
                     "epoch_2.run": "success", "epoch_2.align": "skipped", "epoch_2.commit": "skipped",
                     "finish": "success", "continue": "success"}, first
    assert {t: s for t, s in second.items() if t.startswith("epoch_")} == {  # epochs 3, 4, 5: one task each
        f"epoch_{i}.{step}": "success" if step == "run" else "skipped"
        for i in range(3) for step in ("run", "align", "commit")}, second
    assert {t: s for t, s in third.items() if t.startswith("epoch_")} == {
        "epoch_0.run": "success", "epoch_0.align": "skipped", "epoch_0.commit": "skipped",  # epoch 6: terminated
        **{f"epoch_{i}.{step}": "skipped" for i in (1, 2) for step in ("run", "align", "commit")}}, third
    with sqlite3.connect(db) as conn:  # the head that committed links its data checks' report
        links = [json.loads(v) for (v,) in conn.execute(
            "select value from xcom where dag_id='iterate_pagerank' and task_id='epoch_0.run' "
            "and key='_link_DataChecksLink'")]
    assert any(link.startswith("file://") and "/checks/0000000000/" in link for link in links), links

    reference = JobConfig(job_id="pr-inline-lib", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "lib"),
                          max_epochs=7, tolerance=0.0, num_partitions=3)
    published = read_published(tmp_path / "out", "ranks")
    assert len(published) == len({n for e in graph.edges() for n in e})
    assert dict(zip(published["node"], published["rank"])) == \
        ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])
