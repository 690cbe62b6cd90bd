"""Deferrable sensor: an epoch of a job whose input arrives while it runs waits for input."""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping

from airflow.sdk import BaseSensorOperator

from iterations.operators.base import IterationOperator


class InputSensor(IterationOperator, BaseSensorOperator):
    """Before epoch ``index`` of the batch: waits (deferred, in the triggerer) until the job's
    input coordinators have something for the next epoch: a new file under the input prefix, a
    split not yet assigned, or the end-of-input marker. Passes at once when the epoch is
    already committed or the job is no longer running (the head then restores or skips).

    ``end_batch_without_input`` (a DAG scheduled on its input's Asset): never waits; with no
    input for the epoch, the batch ends here - this epoch's and the later epochs' tasks, the
    finish and the continuation are skipped - and the next asset event starts the next batch."""

    ui_color = "#e0f7fa"

    def __init__(self, *, index: int, poll_interval: float = 5.0, end_batch_without_input: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index = index
        self.poll_interval = poll_interval
        self.end_batch_without_input = end_batch_without_input

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from iterations.operators.task_context import permanent_errors

        with permanent_errors():
            return self._wait(context)

    def _wait(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.checkpoints import HeadStatus
        from iterations.operators.task_context import batch_id_of
        from iterations.triggers.input import InputTrigger

        job, _options = self.iteration_job(context)
        state = job.restorer.state(verify="none")
        start = self.batch_start(job, batch_id_of(context), state.next_epoch)
        epoch = start + self.index
        if state.status is not HeadStatus.RUNNING or epoch < state.next_epoch:
            return {"status": "not needed", "epoch": epoch}
        if job.coordination.input_available(state):
            self.log.info("job %s: input for epoch %d is there", job.config.job_id, epoch)
            return {"status": "available", "epoch": epoch}
        if self.end_batch_without_input:
            group = self.task_id.rsplit(".", 1)[0]
            self.log.info("job %s: no new input under %s for epoch %d: the batch ends here; the next asset event "
                          "of the input starts the next batch", job.config.job_id, job.config.input.path, epoch)
            self.skip_epoch_tasks(context, after=self.index,
                                  also=[t.task_id for t in self.dag.tasks if t.task_id.startswith(f"{group}.")
                                        and t.task_id != self.task_id] + ["finish", "continue"])
            return {"status": "no input: batch ended", "epoch": epoch}
        self.log.info("job %s: waiting for new input under %s before epoch %d", job.config.job_id,
                      job.config.input.path, epoch)
        self.defer(
            trigger=InputTrigger(config=job.config.to_dict(), aws_conn_id=self.aws_conn_id,
                                 poll_interval=self.poll_interval),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any] | None = None) -> dict[str, Any]:
        if not event or event.get("status") != "available":
            raise RuntimeError(f"waiting for input did not complete: {event}")
        return {"status": "available"}
