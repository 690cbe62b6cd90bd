"""Trigger that waits until a job's input has something for its next epoch."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class InputTrigger(BaseTrigger):
    """Polls, from the triggerer, the job's input coordinators restored from its latest
    checkpoint (``Coordination.input_available``): new files under the input prefix, splits not
    yet assigned, or the end-of-input marker."""

    def __init__(self, *, config: dict[str, Any], aws_conn_id: str | None = "aws_default",
                 poll_interval: float = 5.0) -> None:
        super().__init__()
        self.config = dict(config)
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("iterations.triggers.input.InputTrigger",
                {"config": self.config, "aws_conn_id": self.aws_conn_id, "poll_interval": self.poll_interval})

    def _available(self) -> bool:
        from include.contract import JobConfig
        from include.epoch import IterationJob
        from iterations.hooks.iteration_store import IterationStoreHook

        config = JobConfig.from_dict(self.config)
        hook = IterationStoreHook(self.aws_conn_id)
        options = hook.store_options(config.checkpoint_root) or hook.store_options(config.input.path)
        job = IterationJob(config, store_options=options)
        return job.coordination.input_available(job.restorer.state(verify="none"))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            if await asyncio.to_thread(self._available):
                yield TriggerEvent({"status": "available"})
                return
            self.log.info("job %s: no new input under %s yet", self.config["job_id"], self.config["input"]["path"])
            await asyncio.sleep(self.poll_interval)
