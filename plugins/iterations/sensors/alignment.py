"""Deferrable sensor for the global alignment of an epoch attempt."""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping

from airflow.sdk import BaseSensorOperator

from iterations.operators.base import IterationOperator


class AlignmentSensor(IterationOperator, BaseSensorOperator):
    """Waits (deferred, in the triggerer) until every partition of every head has reported for
    the head task's attempt, then decides ``(epoch, terminated)``. Does nothing for an epoch
    the head restored."""

    ui_color = "#f3e5f5"

    def __init__(self, *, index: int, head_task_id: str, poll_interval: float = 2.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index = index
        self.head_task_id = head_task_id
        self.poll_interval = poll_interval

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from iterations.operators.task_context import permanent_errors

        with permanent_errors():
            return self._align(context)

    def _align(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.process import failpoint
        from include.runs import align_if_complete
        from iterations.triggers.alignment import AlignmentTrigger

        run, head, plan, committed = self.epoch_attempt(context, self.head_task_id, self.index)
        job = run.job
        if committed is not None:  # a retry after the epoch's commit landed: aligned as committed
            return {"status": "aligned", "epoch": committed.epoch, "attempt_id": committed.attempt_id,
                    "decision": committed.decision.to_dict()}
        if plan is None:
            return head
        failpoint("align.before_read", job=job.config.job_id, epoch=plan.epoch)
        # over the Spark tasks' reports, each in the store as its partition ended
        decision, _ = align_if_complete(job, plan)
        if decision is not None:
            return self._aligned(plan, decision)
        self._fail_if_superseded(job, plan.epoch, plan.attempt_id)
        self.defer(
            trigger=AlignmentTrigger(
                checkpoint_root=job.config.checkpoint_root,
                job_id=job.config.job_id,
                epoch=plan.epoch,
                attempt_id=plan.attempt_id,
                expected={h: plan.num_partitions for h in plan.heads},
                aws_conn_id=self.aws_conn_id,
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
            # the sensor's own timeout bounds the wait in the triggerer too
            timeout=dt.timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any] | None = None) -> dict[str, Any]:
        if event and event.get("status") == "superseded":
            job, _ = self.iteration_job(context)
            self._fail_if_superseded(job, event["epoch"], event["attempt_id"])
        if not event or event.get("status") != "aligned":
            raise RuntimeError(f"alignment did not complete: {event}")
        from include.runs import align_attempt, resolve_attempt

        job, _ = self.iteration_job(context)
        plan, committed = resolve_attempt(job, event["epoch"], event["attempt_id"])
        if committed is not None:
            return {"status": "aligned", "epoch": committed.epoch, "attempt_id": committed.attempt_id,
                    "decision": committed.decision.to_dict()}
        return self._aligned(plan, align_attempt(job, plan))

    def _fail_if_superseded(self, job, epoch: int, attempt_id: str) -> None:
        """Another run committed this epoch (two runs of one batch at once): its GC removed this
        attempt's files, so the reports will never all be there. Fail now, without retries (a
        retry would find the same), rather than wait for the sensor's timeout."""
        from airflow.sdk.exceptions import AirflowFailException

        from include.errors import CheckpointSuperseded

        try:
            job.attempts.raise_if_superseded(epoch, attempt_id)
        except CheckpointSuperseded as e:
            raise AirflowFailException(f"{e}. This run lost the epoch to another run of the same job.") from e

    def _aligned(self, plan, decision) -> dict[str, Any]:
        from include.runs import aligned_line

        self.log.info("%s", aligned_line(decision))
        return {"status": "aligned", "epoch": plan.epoch, "attempt_id": plan.attempt_id, "decision": decision.to_dict()}
