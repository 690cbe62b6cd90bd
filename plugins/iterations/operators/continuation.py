"""The continuation of a batch that ended before its job terminated."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk.exceptions import AirflowSkipException

from iterations.operators.base import IterationOperator


class ContinuationOperator(IterationOperator, TriggerDagRunOperator):
    """After ``finish``: if the job has not terminated (the batch reached its epoch limit),
    trigger the next batch - a new run of the same DAG with the same params - unless the run was
    started with ``continuation`` off. The triggered run is linked from this task ("Triggered
    DAG" in the UI) and noted with what it continues. Its run id names the job and the epoch it
    starts at, so a retry of this task never starts a second continuation."""

    template_fields: Sequence[str] = ("job",)
    ui_color = "#fff4d6"

    def __init__(self, *, trigger_dag_id: str, **kwargs: Any) -> None:
        super().__init__(trigger_dag_id=trigger_dag_id, logical_date=None, skip_when_already_exists=True,
                         openlineage_inject_parent_info=False, **kwargs)

    def execute(self, context: Mapping[str, Any]) -> None:
        from iterations.operators.base import permanent_errors

        with permanent_errors():
            self._continue(context)

    def _continue(self, context: Mapping[str, Any]) -> None:
        from include.head import HeadStatus

        if not self.settings(context).get("continuation", True):
            raise AirflowSkipException("continuation is off for this run: trigger the DAG again to go on")
        job, _ = self.iteration_job(context)
        state = job.state(verify="none")
        if state.status is not HeadStatus.RUNNING:
            raise AirflowSkipException(f"job {job.config.job_id} is {state.status.value}: nothing to continue")
        if job.suspended_at(state) is not None:
            raise AirflowSkipException(f"job {job.config.job_id} is suspended at checkpoint "
                                       f"{state.latest.checkpoint_id}: trigger the DAG again to resume")
        conf = dict(context["params"])
        conf["stop"] = "none"  # a stop param applied to the batch that asked for it
        conf["recompute"] = False  # a continuation goes on with the batch's generation
        if "take_over" in conf:
            conf["take_over"] = False  # the job is this DAG's now: nothing left to take over
        if self.scheduled:
            conf["batch_date"] = self.batch_date(context)
        self.conf = conf
        self.trigger_run_id = f"continuation__{job.config.job_id}__epoch_{state.next_epoch}"
        self.note = f"continues job {job.config.job_id} at epoch {state.next_epoch} after run {context['run_id']}"
        self.log.info("job %s not terminated after this batch: triggering run %s to continue at epoch %d",
                      job.config.job_id, self.trigger_run_id, state.next_epoch)
        super().execute(context)
