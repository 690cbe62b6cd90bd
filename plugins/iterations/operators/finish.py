"""The finish of a batch: the final checkpoint and the outputs' publication, a drain, a
suspend, or nothing (the next batch goes on)."""

from __future__ import annotations

from typing import Any, Mapping


from iterations.operators.base import DataChecksLink, SparkAttemptOperator, batch_id_of, permanent_errors


class FinishOperator(SparkAttemptOperator):
    """After the batch's epochs: if the job terminated (or a drain was asked for, by a request or
    the run's ``stop`` param), the final checkpoint and the outputs' publication (only after
    that checkpoint commits); ``suspend``: the job stops at its latest checkpoint; otherwise the
    batch just ends (and ``continue`` goes on)."""

    ui_color = "#fde9c9"
    operator_extra_links = (DataChecksLink(),)

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with permanent_errors():
            return self._finish(context)

    def _finish(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.head import HeadStatus
        from include.lifecycle import StopMode
        from include.protocol import Step, end_run, next_step

        job, options = self.iteration_job(context)
        batch = batch_id_of(context)
        state = self.start(context, job)
        requested = job.stop_requested(state)
        param = self.settings(context).get("stop", "none")
        step = next_step(job, state, asked=StopMode.parse(param) if param != "none" else None)
        drain = step is Step.DRAIN
        if step is Step.FINISH or drain:
            if drain:
                self.log.info("job %s: draining at checkpoint %d (%s)", job.config.job_id, state.latest.checkpoint_id,
                              "requested" if requested else "stop param of this run")
            self.fence_earlier_attempts(job, state.latest.checkpoint_id + 1)
            plan = job.plan_finish(batch, state, drain=drain)
            self.run_attempt(job, plan, options)
            final = self.checked(
                job, lambda: job.commit_finish(plan), "the final checkpoint",
                "Fix the input (or the checks), then clear the finish task to compute the outputs again.")
            self.log.info("final checkpoint %d committed", final.checkpoint_id)
            state = job.state(verify="none")
        elif step is Step.SUSPEND and job.suspended_at(state) is None:
            job.suspend(state, reason="requested" if requested else f"stop param of run {context['run_id']}")
        result: dict[str, Any] = {"status": state.status.value, "job_id": job.config.job_id,
                                  "checkpoint_id": state.latest.checkpoint_id if state.latest else None,
                                  "next_epoch": state.next_epoch}
        if state.status is HeadStatus.TERMINATED:
            if self.scheduled:  # an older generation (cleared, finished after a recompute) never publishes
                schedule, generation = self.generation
                schedule.check_may_publish(generation)
            result["published"] = job.publish(state.latest)
            for name, where in result["published"].items():
                self.log.info("output %s published to %s", name, where)
            if self.scheduled:
                schedule.complete(generation)
                result.update(batch_date=generation.date, generation=generation.job_id,
                              started_from=generation.started_from)
        elif job.suspended_at(state) is not None:
            result["status"] = HeadStatus.SUSPENDED.value
            self.log.info("job %s is suspended at checkpoint %d: trigger the DAG again (same job_id) to resume "
                          "at epoch %d", job.config.job_id, state.latest.checkpoint_id, state.next_epoch)
        else:
            self.log.info("job %s not terminated after this batch (next epoch %d): the continue task "
                          "triggers the next batch unless continuation is off", job.config.job_id, state.next_epoch)
        if state.latest is not None:
            job.log.batches.record_final(batch, state.latest.checkpoint_id)
        end_run(job)  # the batch's work is done: the next batch (or another run) may take the job
        return result
