"""The review of a staged publication: a person approves the data itself (write, audit,
publish). The finish stages the outputs and writes what a reviewer needs (include.publication.review);
this task asks, through the standard provider's human-in-the-loop operator, deferred to the
triggerer (iterations.triggers.review); the publish task (iterations.operators.publish) acts on
the answer."""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping, Sequence

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskAwaitingInput

APPROVE, REJECT = "Approve", "Reject"  # include.publication.review's, spelled here: parsing a DAG imports no core


def check_approvers(approvers: Sequence[Any]) -> list[dict[str, str]]:
    """The DAG author's approvers as the provider takes them (``{"id", "name"}``): each a user id
    (as the auth manager names it: SimpleAuthManager's user name, FabAuthManager's numeric id)
    or such a dict. ValueError naming a bad one, or none."""
    out = []
    for a in approvers or ():
        if isinstance(a, str) and a.strip():
            out.append({"id": a.strip(), "name": a.strip()})
        elif isinstance(a, Mapping) and isinstance(a.get("id"), str) and a["id"].strip():
            out.append({"id": a["id"].strip(), "name": str(a.get("name") or a["id"]).strip()})
        else:
            raise ValueError(f"an approver is a user id (a string) or {{'id': ..., 'name': ...}}, got {a!r}")
    if not out:
        raise ValueError("approve_publication needs approvers: the users who may approve a publication "
                         "(iteration_dag(approvers=['alice', ...]))")
    return out


def requester_of(context: Mapping[str, Any]) -> str | None:
    """Who triggered the DAG run (Airflow's ``triggering_user_name``, which a continuation run
    inherits from the run before it)."""
    return getattr(context.get("dag_run"), "triggering_user_name", None) or None


class PublicationReviewOperator(HITLOperator):
    """Asks a person to approve the publication the finish staged, showing its review (rows,
    schema, the data checks, how it differs from the published version). Options Approve and
    Reject; no answer within ``response_timeout`` is a rejection. Only the DAG's ``approvers``
    may answer (Airflow's ``assigned_users``), the user who triggered the run not among them
    unless ``allow_self_approval``. Waits deferred to the triggerer, holding no worker slot.
    Skipped when the finish staged nothing (the job did not end in this batch, or it was
    published already). Returns the answer with the job and checkpoint it is about."""

    ui_color = "#f7e1f0"

    def __init__(self, *, finish_task_id: str, approvers: Sequence[Any], allow_self_approval: bool = False,
                 response_timeout: dt.timedelta, **kwargs: Any) -> None:
        super().__init__(subject="Publish the outputs?", body=None, options=[APPROVE, REJECT], defaults=[REJECT],
                         multiple=False, assigned_users=check_approvers(approvers),
                         response_timeout=response_timeout, **kwargs)
        self.finish_task_id = finish_task_id
        self.approvers = check_approvers(approvers)
        self.allow_self_approval = allow_self_approval

    def execute(self, context: Mapping[str, Any]) -> Any:
        from include.publication import review_markdown

        review = context["ti"].xcom_pull(task_ids=self.finish_task_id, key="review")
        if not review:
            raise AirflowSkipException("the finish staged no publication to review in this batch")
        self.subject, self.body = review_markdown(review)
        self.assigned_users = self.respondents(context)
        self.log.info("job %s: the outputs of final checkpoint %s are staged; waiting for %s to approve or reject "
                      "them (Required Actions in the UI, or the REST API) until %s; the task holds no worker slot "
                      "while it waits", review["job_id"], review["checkpoint_id"],
                      " or ".join(u["name"] for u in self.assigned_users),
                      (dt.datetime.now(dt.timezone.utc) + self.response_timeout).isoformat(timespec="seconds"))
        try:
            return super().execute(context)
        except TaskAwaitingInput:  # Airflow 3.3 parks the task unless it defers: defer, so the timeout holds anywhere
            self.defer(trigger=self.trigger(context), method_name="execute_complete")

    def trigger(self, context: Mapping[str, Any]):
        from iterations.triggers.review import ReviewTrigger

        timeout = self.hitl_summary_extra.get("timeout_datetime")
        seconds = self.response_timeout.total_seconds() if self.response_timeout else None
        return ReviewTrigger(ti_id=context["task_instance"].id, options=self.options, defaults=self.defaults,
                             params=self.serialized_params, multiple=self.multiple,
                             timeout_datetime=dt.datetime.fromisoformat(timeout) if timeout else None,
                             poke_interval=1.0 if seconds is not None and seconds < 60 else 5.0)

    def respondents(self, context: Mapping[str, Any]) -> list[dict[str, str]]:
        """The approvers who may answer this run's request: the DAG's, less the user who
        triggered the run (unless the DAG's author allows it). AirflowFailException when that
        leaves nobody."""
        requester = requester_of(context)
        users = list(self.approvers)
        if requester and not self.allow_self_approval:
            users = [u for u in users if requester not in (u["id"], u["name"])]
            if len(users) < len(self.approvers):
                self.log.info("%s triggered this run: the DAG's author does not let them approve it", requester)
        if not users:
            raise AirflowFailException(
                f"nobody may approve this publication: the DAG's approvers are "
                f"{', '.join(u['id'] for u in self.approvers)}, and {requester} triggered the run (the DAG's author "
                "does not allow self-approval): trigger it as another user, or name more approvers")
        return users

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        answer = dict(super().execute_complete(context, event))
        review = context["ti"].xcom_pull(task_ids=self.finish_task_id, key="review") or {}
        user = answer.get("responded_by_user") or {}
        requester = requester_of(context)
        chosen = list(answer.get("chosen_options") or [])
        if chosen == [APPROVE] and requester and not self.allow_self_approval \
                and requester in (user.get("id"), user.get("name")):
            # an auth manager that lets anyone answer (SimpleAuthManager with every user an admin)
            self.log.warning("%s approved the run they triggered, which the DAG's author does not allow: "
                             "counted as a rejection", requester)
            chosen, answer["self_approval"] = [REJECT], True
        responded = answer.get("responded_at")
        return {"job_id": review.get("job_id"), "checkpoint_id": review.get("checkpoint_id"), "chosen_options": chosen,
                "responded_by_user": dict(user) if user else None,
                "timedout": bool(event.get("timedout")) or (not user and "error" not in event),
                "self_approval": bool(answer.get("self_approval")),
                "responded_at": responded.isoformat() if hasattr(responded, "isoformat") else responded}
