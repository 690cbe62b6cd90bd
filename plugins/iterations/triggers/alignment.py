"""Trigger that waits until every partition of every head has reported for an attempt."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class AlignmentTrigger(BaseTrigger):
    """Polls the attempt's reports in the store. Only waits; the decision is the sensor's."""

    def __init__(
        self,
        *,
        checkpoint_root: str,
        job_id: str,
        epoch: int,
        attempt_id: str,
        expected: dict[str, int],
        aws_conn_id: str | None = "aws_default",
        poll_interval: float = 2.0,
    ) -> None:
        super().__init__()
        self.checkpoint_root = checkpoint_root
        self.job_id = job_id
        self.epoch = epoch
        self.attempt_id = attempt_id
        self.expected = dict(expected)
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "iterations.triggers.alignment.AlignmentTrigger",
            {
                "checkpoint_root": self.checkpoint_root,
                "job_id": self.job_id,
                "epoch": self.epoch,
                "attempt_id": self.attempt_id,
                "expected": self.expected,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    def _missing(self) -> tuple[list[str], dict[str, Any] | None]:
        """include.runs.boundary.awaiting_reports, over the store the hook opens."""
        from include.checkpoints import CheckpointLog
        from include.runs import awaiting_reports
        from iterations.hooks.iteration_store import IterationStoreHook

        log = CheckpointLog(IterationStoreHook(self.aws_conn_id).get_store(self.checkpoint_root), self.job_id)
        return awaiting_reports(log, self.epoch, self.attempt_id, self.expected)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            missing, ended = await asyncio.to_thread(self._missing)
            if ended:
                yield TriggerEvent(ended)
                return
            if not missing:
                yield TriggerEvent({"status": "aligned", "epoch": self.epoch, "attempt_id": self.attempt_id})
                return
            self.log.info("epoch %d attempt %s: waiting for %d report(s): %s", self.epoch, self.attempt_id,
                          len(missing), ", ".join(missing[:5]))
            await asyncio.sleep(self.poll_interval)
