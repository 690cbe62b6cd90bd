"""The commit of an epoch: the checks between rounds, then the checkpoint's atomic commit and
the epoch's outputs published."""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from iterations.operators.base import DataChecksLink, IterationOperator
from iterations.operators.task_context import permanent_errors


class EpochCommitting(IterationOperator):
    """What a task that commits an epoch does (the commit task; the head when it commits
    inline, ``commit_in_head``): the checks and the commit of an aligned attempt, the progress
    line, the metrics, the result; a terminated job's later epochs skipped."""

    def commit_aligned(self, context: Mapping[str, Any], run, plan, decision=None,
                       reports: Sequence[Any] | None = None):
        """Check and commit ``plan``'s attempt (``decision``: its alignment, None: aligned again
        here); a refusal fails the task with the checks' report."""
        return self.checked(run.job, lambda: run.commit(plan, decision, reports), f"epoch {plan.epoch}",
                            self.recompute_hint(self.task_id.rsplit(".", 1)[0], plan.epoch))

    @staticmethod
    def recompute_hint(group: str, epoch: int, *, later: bool = False) -> str:
        """What to do when the data checks refused ``epoch``, whose tasks are in ``group``
        (``later``: and the epochs after it ran from it, their groups to clear too)."""
        return (f"Fix the input (or the checks), then clear the tasks of {group} (run, align, commit)"
                f"{' and the later ones' if later else ''} to recompute epoch {epoch}; the run goes on from there.")

    def report_committed(self, context: Mapping[str, Any], run, done, started_at: Any, *,
                         also_skip: Sequence[str] = ()) -> dict[str, Any]:
        """Log and measure a committed epoch; its result. On termination the result is pushed
        and the later epochs (and the tasks ``also_skip``) are skipped, which ends the task."""
        from include.runs import epoch_line

        d, manifest = done.decision, done.manifest
        self.log.info("%s", epoch_line(d))
        # the epoch's appended outputs, each at its version (the same on a retry)
        self.record_published(run.job, manifest, done.published)
        for name, where in done.published.items():
            self.log.info("epoch %d output %s appended to %s", d.epoch, name, where)
        self._emit_metrics(run.job.config.job_id, d, manifest, started_at)
        result = {"status": "committed", "epoch": d.epoch, "checkpoint_id": manifest.checkpoint_id,
                  "terminated": d.terminated, "reason": d.reason, "feedback": d.feedback_count, "metrics": d.metrics,
                  "published": done.published}
        if d.terminated or also_skip:
            context["ti"].xcom_push(key="return_value", value=result)
            self.skip_epoch_tasks(context, after=self.index if d.terminated else None, also=also_skip)
        return result

    def _emit_metrics(self, job_id: str, decision: Any, manifest: Any,
                      started_at: float | None) -> None:
        """The epoch's figures through Airflow's Stats (iterations.metrics); never fails the commit."""
        from iterations.metrics import emit_epoch

        seconds = max(0.0, time.time() - started_at) if isinstance(started_at, (int, float)) else None
        try:
            emit_epoch(self.dag_id, job_id, decision, manifest, seconds)
        except Exception as e:  # a metrics backend that is down or misconfigured is not the job's failure
            self.log.warning("epoch %d: metrics not sent (%s: %s)", decision.epoch, type(e).__name__, e)


class EpochCommitOperator(EpochCommitting):
    """Runs the checks between rounds, then commits the epoch's checkpoint atomically."""

    ui_color = "#d9f2d9"
    operator_extra_links = (DataChecksLink(),)

    def __init__(self, *, index: int, head_task_id: str, align_task_id: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.index = index
        self.head_task_id = head_task_id
        self.align_task_id = align_task_id

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with permanent_errors():
            return self._commit(context)

    def _commit(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.checkpoints import AlignmentDecision

        run, head, plan, committed = self.epoch_attempt(context, self.head_task_id, self.index, write=True)
        if committed is not None:  # an earlier try of this task committed it (its reply was lost)
            self.log.info("epoch %d was committed by this attempt (%s) already: publishing what is left",
                          committed.epoch, committed.attempt_id)
            done = run.committed(plan, committed)
        elif plan is None:
            return head
        else:
            aligned = context["ti"].xcom_pull(task_ids=self.align_task_id) or {}
            same = aligned.get("decision") and aligned.get("attempt_id") == plan.attempt_id
            decision = AlignmentDecision.from_dict(aligned["decision"]) if same else None  # else: aligned again
            done = self.commit_aligned(context, run, plan, decision)
        return self.report_committed(context, run, done, head.get("started_at"))
