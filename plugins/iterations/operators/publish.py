"""The end of a reviewed publication: switched when a person approved it, discarded otherwise."""

from __future__ import annotations

from typing import Any, Mapping

from airflow.sdk.exceptions import AirflowSkipException

from iterations.operators.base import IterationOperator
from iterations.operators.task_context import permanent_errors


class PublishOperator(IterationOperator):
    """After the review (trigger rule ``all_done``: whatever became of it): approved, the
    staged outputs are switched - per-epoch outputs appended, each final output's manifest
    replaced once, one asset event each - exactly once across retries; rejected, not answered
    in time, or not asked (the review failed), everything staged is deleted and nothing visible
    changed: the job waits, and triggering its DAG again asks again. Skipped when the finish
    staged nothing."""

    ui_color = "#fde9c9"

    def __init__(self, *, finish_task_id: str, review_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.finish_task_id = finish_task_id
        self.review_task_id = review_task_id

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with permanent_errors():
            return self._publish(context)

    def _publish(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.checkpoints import HeadStatus
        from include.runs import EpochRun
        from iterations.operators.task_context import batch_id_of, run_of

        ti = context["ti"]
        review = ti.xcom_pull(task_ids=self.finish_task_id, key="review")
        job, _ = self.iteration_job(context)
        if not review:
            return self._left_staged(context, job)
        run = EpochRun(job, batch_id=batch_id_of(context), run=run_of(context))
        state = self.start(context, run, validate=False)
        try:
            final = state.latest
            if final is None or final.kind != "final" or final.checkpoint_id != review["checkpoint_id"]:
                raise AirflowSkipException(f"job {job.config.job_id} is at checkpoint "
                                           f"{final.checkpoint_id if final else None} now, not at the reviewed final "
                                           f"checkpoint {review['checkpoint_id']}: nothing of this review is published")
            answer = ti.xcom_pull(task_ids=self.review_task_id) or {}
            about = (answer.get("job_id"), answer.get("checkpoint_id")) == (review["job_id"], review["checkpoint_id"])
            user = answer.get("responded_by_user") or {}
            by = user.get("name") or user.get("id") if isinstance(user, dict) else None
            result: dict[str, Any] = {"job_id": job.config.job_id, "checkpoint_id": final.checkpoint_id}
            if about and answer.get("chosen_options") == ["Approve"] and not answer.get("timedout"):
                self.log.info("job %s: the publication of final checkpoint %d was approved by %s", job.config.job_id,
                              final.checkpoint_id, by)
                job.publisher.approve(final, by)
                published = run.conclude()  # an older generation never publishes; the batch's final recorded
                for name, where in published.items():
                    self.log.info("output %s published to %s", name, where)
                result.update(status=HeadStatus.TERMINATED.value, approved_by=by, published=published,
                              announced=self.announce(context, job, final, published))
                if self.scheduled:
                    schedule, generation = self.generation
                    schedule.complete(generation)
                return result
            if about and answer.get("timedout"):
                why = "no answer in time"
            elif about:
                why = f"rejected by {by}" + (" (who triggered the run: the DAG's author does not allow self-approval)"
                                             if answer.get("self_approval") else "")
            else:
                why = "the review did not ask (its task ended without an answer)"
            deleted = job.publisher.reject(final, by, why)
            self.log.warning("job %s: publication of final checkpoint %d not approved (%s): %d staged file(s) deleted, "
                             "nothing published; trigger the DAG again with job_id %s to be asked again",
                             job.config.job_id, final.checkpoint_id, why, deleted, job.config.job_id)
            result.update(status=HeadStatus.SUSPENDED.value, rejected=why, deleted=deleted)
            return result
        finally:
            run.end()

    def _left_staged(self, context: Mapping[str, Any], job) -> dict[str, Any]:
        """No review in this batch: skipped, after deleting what a finish that failed after
        staging left (read first without the lease: usually there is nothing)."""
        from include.runs import EpochRun
        from iterations.operators.task_context import batch_id_of, run_of

        final = job.log.latest(verify="none")
        if final is None or not job.publisher.awaits_approval(final) or job.log.reviews.staged(final.checkpoint_id) is None:
            raise AirflowSkipException("the finish staged no publication in this batch: nothing to publish")
        run = EpochRun(job, batch_id=batch_id_of(context), run=run_of(context))
        state = self.start(context, run, validate=False)
        try:
            deleted = job.publisher.reject(state.latest, None, "the finish ended without a review of what it staged")
        finally:
            run.end()
        self.log.warning("job %s: the finish ended without a review: %d staged file(s) deleted, nothing published",
                         job.config.job_id, deleted)
        raise AirflowSkipException("nothing was reviewed in this batch: nothing is published")
