"""The alignment trigger waits for every report of an attempt, serialises to JSON-able kwargs,
and reports an aborted attempt, or an attempt another run's commit superseded, instead of waiting
forever."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import EpochReport
from include.store import LocalStore
from tests.conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "plugins"))


def trigger(tmp_path, **kw):
    from iterations.triggers.alignment import AlignmentTrigger

    return AlignmentTrigger(checkpoint_root=str(tmp_path), job_id="job", epoch=2, attempt_id="a2",
                            expected={"ranks": 3}, aws_conn_id=None, poll_interval=0.05, **kw)


def report(log, partition):
    r = EpochReport("ranks", partition, 2, "a2", 5)
    log.store.put(log.layout.report(2, "a2", "ranks", partition), r.to_json().encode())


def test_serialises_to_json(tmp_path):
    path, kwargs = trigger(tmp_path).serialize()
    assert path == "iterations.triggers.alignment.AlignmentTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs


def test_fires_once_every_partition_reported(tmp_path):
    log = CheckpointLog(LocalStore(tmp_path), "job")
    report(log, 0)

    async def scenario():
        events = trigger(tmp_path).run()
        waiting = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.3)
        assert not waiting.done(), "two partitions have not reported"
        report(log, 2)
        await asyncio.sleep(0.2)
        assert not waiting.done()
        report(log, 1)
        return await asyncio.wait_for(waiting, 5)

    event = asyncio.run(scenario())
    assert event.payload == {"status": "aligned", "epoch": 2, "attempt_id": "a2"}


def test_reports_an_aborted_attempt(tmp_path):
    log = CheckpointLog(LocalStore(tmp_path), "job")
    report(log, 0)
    log.abort(2, "a2", "checks failed")

    async def first():
        return await trigger(tmp_path).run().__anext__()

    assert asyncio.run(first()).payload["status"] == "aborted"


def test_reports_an_attempt_another_run_superseded(tmp_path):
    """Two runs of one batch: the other run committed epoch 2 and its GC removed this attempt's
    files, so partitions 1 and 2 will never report."""
    from tests.unit.checkpoints.test_checkpoint_log import write_attempt

    log = CheckpointLog(LocalStore(tmp_path), "job")
    for e in range(3):
        log.commit(write_attempt(log, e, f"w{e}", e - 1 if e else None))
    report(log, 0)

    async def first():
        return await trigger(tmp_path).run().__anext__()

    assert asyncio.run(first()).payload == {"status": "superseded", "epoch": 2, "attempt_id": "a2",
                                            "committed_by": "w2"}


def test_waits_while_only_earlier_epochs_are_committed(tmp_path):
    from tests.unit.checkpoints.test_checkpoint_log import write_attempt

    log = CheckpointLog(LocalStore(tmp_path), "job")
    for e in range(2):
        log.commit(write_attempt(log, e, f"w{e}", e - 1 if e else None))
    report(log, 0)

    async def scenario():
        waiting = asyncio.ensure_future(trigger(tmp_path).run().__anext__())
        await asyncio.sleep(0.3)
        assert not waiting.done(), "epoch 2 is not committed: the attempt may still align"
        report(log, 1)
        report(log, 2)
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(scenario()).payload["status"] == "aligned"


@pytest.mark.parametrize("mode", ["connect", "submit"])
def test_spark_hook_modes(mode):
    from iterations.hooks.spark_epoch import SparkEpochHook

    assert SparkEpochHook(mode).mode == mode
    with pytest.raises(ValueError, match="spark mode 'yarn' is not supported; accepted: connect, submit"):
        SparkEpochHook("yarn")


def test_sensor_fails_without_retry_for_a_superseded_attempt(tmp_path):
    """The sensor turns the trigger's 'superseded' into a failure that names the winner (a retry
    would find the same), and lets an attempt that may still align go on."""
    from airflow.sdk.exceptions import AirflowFailException

    from include.contract.config import JobConfig
    from include.epoch.job import IterationJob
    from iterations.sensors.alignment import AlignmentSensor
    from tests.unit.checkpoints.test_checkpoint_log import write_attempt

    job = IterationJob(JobConfig(job_id="job", body="pagerank", input=str(tmp_path / "in"),
                                 checkpoint_root=str(tmp_path / "ckpt")))
    for e in range(3):
        job.log.commit(write_attempt(job.log, e, f"w{e}", e - 1 if e else None))
    sensor = AlignmentSensor(task_id="align", body="pagerank", index=2, head_task_id="head")
    with pytest.raises(AirflowFailException, match="committed by w2; attempt a2 is superseded"):
        sensor._fail_if_superseded(job, 2, "a2")
    sensor._fail_if_superseded(job, 2, "w2")  # its own commit (a retry after a lost reply)
    sensor._fail_if_superseded(job, 3, "a3")  # not committed yet
