"""The finish of a batch: the final checkpoint and the outputs' publication, a drain, a
suspend, or nothing (the next batch goes on)."""

from __future__ import annotations

from typing import Any, Mapping

from iterations.operators.base import DataChecksLink
from iterations.operators.spark_attempt import SparkAttemptOperator
from iterations.operators.task_context import permanent_errors


class FinishOperator(SparkAttemptOperator):
    """After the batch's epochs: if the job terminated (or a drain was asked for, by a request or
    the run's ``stop`` param), the final checkpoint and the outputs' publication (only after
    that checkpoint commits); ``suspend``: the job stops at its latest checkpoint; otherwise the
    batch just ends (and ``continue`` goes on)."""

    ui_color = "#fde9c9"
    operator_extra_links = (DataChecksLink(),)

    def __init__(self, *, approval: bool = False, **kwargs: Any) -> None:
        """``approval``: a person approves each publication (``review`` and ``publish`` follow
        this task): once the final checkpoint commits, its outputs are staged and reviewed
        (include.publication.review), not published; the review goes to XCom ``review``."""
        super().__init__(**kwargs)
        self.approval = approval

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with permanent_errors():
            return self._finish(context)

    def _finish(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.checkpoints import HeadStatus, StopMode
        from include.runs import Step

        run = self.epoch_run(context)
        job = run.job
        self.start(context, run)
        param = self.settings(context).get("stop", "none")
        step = run.boundary(asked=StopMode.parse(param) if param != "none" else None)
        why = "requested" if run.requested else f"stop param of run {context['run_id']}"
        if step in (Step.FINISH, Step.DRAIN):
            if step is Step.DRAIN:
                self.log.info("job %s: draining at checkpoint %d (%s)", job.config.job_id,
                              run.state.latest.checkpoint_id, why)
            final = run.finish_with(lambda plan: self.checked(
                job, lambda: job.committer.commit_finish(plan), "the final checkpoint",
                "Fix the input (or the checks), then clear the finish task to compute the outputs again."),
                drain=step is Step.DRAIN)
            self.log.info("final checkpoint %d committed", final.checkpoint_id)
        elif step is Step.SUSPEND:
            run.suspend(reason=why)
        published = run.conclude()  # an older generation (cleared, finished after a newer one started) never publishes
        state = run.state
        result: dict[str, Any] = {"status": state.status.value, "job_id": job.config.job_id,
                                  "checkpoint_id": state.latest.checkpoint_id if state.latest else None,
                                  "next_epoch": state.next_epoch}
        if state.status is HeadStatus.TERMINATED and self.approval and job.publisher.awaits_approval(state.latest):
            result["review"] = self.stage_for_review(context, job, state.latest)
        elif state.status is HeadStatus.TERMINATED:
            result["published"] = published
            for name, where in published.items():
                self.log.info("output %s published to %s", name, where)
            result["announced"] = self.announce(context, job, state.latest, published)
            if self.scheduled:
                schedule, generation = self.generation
                schedule.complete(generation)
                result.update(batch_date=generation.date, generation=generation.job_id,
                              started_from=generation.started_from)
        elif job.stopping.suspended_at(state) is not None:
            result["status"] = HeadStatus.SUSPENDED.value
            self.log.info("job %s is suspended at checkpoint %d: trigger the DAG again (same job_id) to resume "
                          "at epoch %d", job.config.job_id, state.latest.checkpoint_id, state.next_epoch)
        else:
            self.log.info("job %s not terminated after this batch (next epoch %d): the continue task "
                          "triggers the next batch unless continuation is off", job.config.job_id, state.next_epoch)
        run.end()  # the batch's work is done: the next batch (or another run) may take the job
        return result

    def stage_for_review(self, context: Mapping[str, Any], job, final) -> dict[str, str]:
        """A reviewed job's final checkpoint: its outputs staged (not published) and what a
        reviewer needs pushed for the ``review`` task (XCom ``review``) and kept in the store."""
        from include.publication import stage_for_review

        review = stage_for_review(job, final)
        context["ti"].xcom_push(key="review", value=review)
        self.log.info("job %s: the outputs of final checkpoint %d are staged in %s, not published: the review task "
                      "asks for approval", job.config.job_id, final.checkpoint_id, review["staged_in"])
        return {"checkpoint_id": final.checkpoint_id, "staged_in": review["staged_in"]}
