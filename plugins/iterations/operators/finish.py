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

    def __init__(self, *, approval: bool = False, approval_timeout: float | None = None, **kwargs: Any) -> None:
        """``approval``: a person approves each publication first (Airflow's human-in-the-loop
        request, answered in the UI's Required Actions or the REST API; the task waits for the
        answer in ``awaiting_input``, holding no worker slot). ``approval_timeout``: seconds to
        wait for it; no answer in time is a rejection. None: no limit."""
        super().__init__(**kwargs)
        self.approval = approval
        self.approval_timeout = approval_timeout

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with permanent_errors():
            return self._finish(context)

    def publication_answered(self, context: Mapping[str, Any], event: dict[str, Any] | None = None,
                             asked: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resumed with a person's answer to the approval request (or its timeout)."""
        with permanent_errors():
            return self._finish(context, answer=(asked, event or {}))

    def _verdict(self, context: Mapping[str, Any], run, drain: bool, answer) -> str | None:
        """None once a person approved publishing from the job's latest checkpoint; why not, when
        they rejected it (or did not answer in time). Without an answer to that question yet,
        the request is made and the task waits for it (``awaiting_input``)."""
        import datetime as dt

        from airflow.sdk.exceptions import TaskAwaitingInput
        from airflow.sdk.execution_time.hitl import upsert_hitl_detail

        from include.publication import APPROVE, REJECT, asked_about, publication_request

        question = asked_about(run.job, run.state)
        if answer is not None:
            asked, event = answer
            if asked == question:
                chosen = list(event.get("chosen_options") or [])
                user = event.get("responded_by_user") or {}
                by = user.get("name") or user.get("id") if isinstance(user, dict) else user
                if event.get("timedout") or "error" in event or not chosen:
                    return f"publication not approved: no answer within {self.approval_timeout:.0f} s" \
                        if self.approval_timeout else "publication not approved: no answer"
                if chosen == [APPROVE]:
                    self.log.info("publication of job %s checkpoint %s approved by %s", question["job_id"],
                                  question["checkpoint_id"], by)
                    return None
                return f"publication rejected by {by}"
            self.log.info("the approval answered was asked about %s; the job is at %s now: asking again", asked,
                          question)
        subject, body = publication_request(run.job, run.state, drain=drain)
        upsert_hitl_detail(ti_id=context["task_instance"].id, options=[APPROVE, REJECT], subject=subject, body=body,
                           params={})
        self.log.info("job %s: waiting for a person to approve publishing from checkpoint %s (Required Actions "
                      "in the UI); the task holds no worker slot while it waits, but the DAG runs one run at a time: "
                      "its other runs wait until this is answered%s", question["job_id"], question["checkpoint_id"],
                      f" or {self.approval_timeout:.0f} s have passed" if self.approval_timeout else
                      " (no approval_timeout is set)")
        timeout = dt.timedelta(seconds=self.approval_timeout) if self.approval_timeout else None
        raise TaskAwaitingInput(method_name="publication_answered", kwargs={"asked": question}, timeout=timeout)

    def _finish(self, context: Mapping[str, Any], answer=None) -> dict[str, Any]:
        from include.checkpoints import HeadStatus, StopMode
        from include.runs import Step

        run = self.epoch_run(context)
        job = run.job
        self.start(context, run)
        param = self.settings(context).get("stop", "none")
        step = run.boundary(asked=StopMode.parse(param) if param != "none" else None)
        why = "requested" if run.requested else f"stop param of run {context['run_id']}"
        if step in (Step.FINISH, Step.DRAIN) and self.approval:
            refused = self._verdict(context, run, step is Step.DRAIN, answer)
            if refused is not None:
                self.log.warning("job %s: %s: nothing is published; the job is suspended at checkpoint %s",
                                 job.config.job_id, refused, run.state.latest.checkpoint_id)
                step, why = Step.SUSPEND, refused
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
        if state.status is HeadStatus.TERMINATED:
            result["published"] = published
            for name, where in published.items():
                self.log.info("output %s published to %s", name, where)
            result["announced"] = self._announce(context, job, state.latest, published)
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

    def _announce(self, context: Mapping[str, Any], job, manifest, published: Mapping[str, str]) -> list[str]:
        """The asset events of what this finish published (iterations.assets), once each."""
        from airflow.sdk import AssetAlias

        from iterations.assets import announce

        if not published:
            return []
        publications = job.publisher.publications(manifest, names=list(published))
        self.record_lineage(job, epoch=manifest.decision.epoch if manifest.decision else None,
                            checkpoint_id=manifest.checkpoint_id,
                            published=publications)
        alias = next((o for o in self.outlets if isinstance(o, AssetAlias)), None)
        return announce(context, alias, publications, self.log) if alias is not None else []
