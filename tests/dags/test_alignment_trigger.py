"""The alignment trigger waits for every report of an attempt, serialises to JSON-able kwargs,
and reports an aborted attempt instead of waiting forever."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from include.checkpoint import CheckpointLog
from include.head import EpochReport
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


@pytest.mark.parametrize("mode", ["connect", "submit"])
def test_spark_hook_modes(mode):
    from iterations.hooks.spark_epoch import SparkEpochHook

    assert SparkEpochHook(mode).mode == mode
    with pytest.raises(ValueError, match="spark mode 'yarn' is not supported; accepted: connect, submit"):
        SparkEpochHook("yarn")
