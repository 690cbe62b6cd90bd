"""The head of an epoch: restores, plans and runs the epoch's Spark job."""

from __future__ import annotations

import time
from typing import Any, Mapping

from airflow.sdk.exceptions import AirflowSkipException

from iterations.operators.base import DataChecksLink
from iterations.operators.commit import EpochCommitting
from iterations.operators.spark_attempt import SparkAttemptOperator
from iterations.operators.task_context import permanent_errors


class EpochHeadOperator(SparkAttemptOperator, EpochCommitting):
    """The head of epoch ``index`` of the batch: restores, plans and runs the epoch's Spark job.

    Skips work already done: an epoch committed earlier is reported ``restored`` (never
    recomputed); epochs after termination are skipped. The attempt is recorded in the store
    before the Spark job starts, so a retry adopts a complete attempt instead of running again.

    ``commit_in_head``: when the attempt's Spark job has ended with every partition's report
    in the store (the usual case), the head aligns and commits the epoch itself (the same
    alignment, checks and single-winner commit as the sensor and the commit task) and skips
    its group's ``align`` and ``commit``: one task per epoch instead of three. When a report is
    missing it returns as without it, and the sensor waits for the report (deferred) and the
    commit task commits. A restored epoch skips them too.

    ``attempt_retries``: an attempt whose Spark job failed in some partitions is run again in
    this process up to that many times (``EpochRun.plan_and_run``) before the task fails.

    ``overlap_commits`` (with ``commit_in_head``): the head aligns its epoch and leaves the
    commit to the next head (unless it is the batch's ``last`` or decided termination), which
    commits it behind its own epoch's Spark job (``EpochRun.commit_behind``): the epoch before
    is planned again (its complete attempt adopted), its checks and commit run in a thread, and
    land before this epoch is aligned. If they fail, this epoch's attempt is aborted and the
    task fails naming the epoch before (a check's refusal at once, anything else retried).
    """

    ui_color = "#d6e9f8"
    operator_extra_links = (DataChecksLink(),)

    def __init__(self, *, index: int, commit_in_head: bool = True, attempt_retries: int = 0,
                 overlap_commits: bool = False, last: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        if overlap_commits and not commit_in_head:
            raise ValueError("overlap_commits needs commit_in_head")
        self.index = index
        self.commit_in_head = commit_in_head
        self.attempt_retries = attempt_retries
        self.overlap_commits = overlap_commits
        self.last = last

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with permanent_errors():
            return self._head(context)

    def _head(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.runs import Step, warm_up_checks

        verify = self.settings(context).get("verify_epoch")
        if verify is not None:
            return self.verify(context, verify)

        started = time.time()  # the epoch's duration runs from here to its commit (Stats)
        marks = [("job and lease", time.perf_counter())]  # where the task's time goes, logged at its end
        run = self.epoch_run(context)
        job = run.job
        state = self.start(context, run)
        epoch = self.batch_start(job, run.batch_id, state.next_epoch) + self.index
        if state.latest is not None and epoch <= state.latest.epoch:
            self.log.info("epoch %d is committed (checkpoint %d): restored, not recomputed", epoch, state.latest.checkpoint_id)
            restored = {"status": "restored", "epoch": epoch}
            if self.commit_in_head:  # nothing for the group's align and commit to do
                if epoch == state.latest.epoch:  # what a crash left of its outputs, as a commit task's retry
                    run.settle()  # logged and in this task's lineage (report_settled)
                context["ti"].xcom_push(key="return_value", value=restored)
                self.skip_epoch_tasks(context, after=None, also=self.group_tasks())
            return restored
        if self.overlap_commits and self.index > 0 and state.next_epoch == epoch - 1:
            # the head before left its epoch's commit to this task: behind this epoch's Spark job
            marks.append((f"epoch {epoch - 1} planned to commit behind", time.perf_counter()))
            self._commit_behind(context, run, epoch - 1)
        step = self._landing(context, run, run.boundary)  # lands the commit behind before a finish
        state = run.state
        if step in (Step.FINISH, Step.DONE):
            self.log.info("job %s is %s: epoch %d is not needed", job.config.job_id, state.status.value, epoch)
            self.skip_rest_of_batch(context)
            raise AirflowSkipException(f"job {job.config.job_id} is {state.status.value}: epoch {epoch} is not needed")
        if state.next_epoch != epoch:
            raise RuntimeError(f"epoch {epoch} cannot start: the latest committed checkpoint is "
                               f"{state.latest.checkpoint_id if state.latest else None}")
        if step in (Step.DRAIN, Step.SUSPEND):
            self.log.info("job %s: %s requested: epoch %d and the rest of the batch are not run; %s",
                          job.config.job_id, step.value, epoch,
                          "finish drains the job" if step is Step.DRAIN else "the job is suspended")
            if step is Step.SUSPEND:
                run.suspend()
            self.skip_rest_of_batch(context)
            raise AirflowSkipException(f"job {job.config.job_id}: {step.value} requested before epoch {epoch}")
        marks.append(("plan", time.perf_counter()))

        def planned(plan) -> None:
            inbox = ", ".join(f"{name}: {len(events)}" for name, events in sorted((plan.events or {}).items()) if events)
            self.log.info("epoch %d: attempt %s%s; coordinator events in its inbox: %s", epoch, plan.attempt_id,
                          " (adopted, complete)" if plan.adopted else "", inbox or "none")
            # while this process waits for the Spark job: ready for a commit task it runs next
            # (airflow dags test runs them all in one process; a preloading executor's task
            # processes have Great Expectations imported already)
            warm_up_checks(job, plan)
            again = any(name.endswith("Spark job") for name, _at in marks)  # after a failure in some partitions
            marks.append(("adopted" if plan.adopted else "Spark job again" if again else "Spark job", time.perf_counter()))

        try:
            plan, reports = run.plan_and_run(self.attempt_retries, planned)
        except BaseException:
            self._landing(context, run, run.land)  # the commit behind lands first (or its failure is raised)
            raise
        if run.committing is not None:
            marks.append((f"epoch {epoch - 1}'s commit landing", time.perf_counter()))
            self._landing(context, run, run.land)
        done = None
        if self.commit_in_head:
            marks.append(("align and commit", time.perf_counter()))  # with the checks
            done = self.commit_if_aligned(context, run, plan, reports, leave=self.overlap_commits and not self.last)
        self._log_marks(epoch, marks)
        if done == "left":
            self.log.info("epoch %d: its checks and commit are left to the next epoch's head, behind its Spark job "
                          "(overlap_commits)", epoch)
            result = {"status": "run", "epoch": epoch, "attempt_id": plan.attempt_id, "started_at": started,
                      "commit": "behind the next epoch"}
            context["ti"].xcom_push(key="return_value", value=result)  # skipping ends the task
            self.skip_epoch_tasks(context, after=None, also=self.group_tasks())
            return result
        if done is not None:
            return self.report_committed(context, run, done, started, also_skip=self.group_tasks())
        return {"status": "run", "epoch": epoch, "attempt_id": plan.attempt_id, "started_at": started}

    def _commit_behind(self, context: Mapping[str, Any], run, epoch: int) -> None:
        """``overlap_commits``: the epoch the head before this one ran and aligned is planned
        again (its complete attempt adopted; run again if it is not complete), aligned and
        committed behind (``EpochRun.epoch_behind``, as the library runner does): its checks
        and commit run in a thread while this task plans and runs its own epoch from the state
        it wrote."""
        def planned(plan) -> None:
            self.log.info("epoch %d: attempt %s%s; committing it behind epoch %d's Spark job", epoch, plan.attempt_id,
                          " (adopted, complete)" if plan.adopted else "", epoch + 1)

        # nothing commits behind yet in this task: what epoch_behind returns is this epoch, found
        # committed already (an earlier try's reply was lost), and published what was left
        for done in self._landing(context, run, lambda: run.epoch_behind(self.attempt_retries, planned)):
            self.report_committed(context, run, done, self._started(context, epoch))

    def _landing(self, context: Mapping[str, Any], run, call):
        """``call()``, which may land the commit running behind this epoch (``EpochRun.land``,
        which ``boundary`` calls before a finish, drain or suspend): a refusal by its data checks
        fails this task at once naming that epoch, as its own commit would; each commit that
        landed is reported as a commit task reports it (progress line, lineage, metrics)."""
        behind = run.committing
        if behind is None:
            return call()
        hint = self.recompute_hint(f"epoch_{self.index - 1}", behind.epoch, later=True)
        try:
            return self.checked(run.job, call, f"epoch {behind.epoch} (committed behind epoch {behind.epoch + 1})",
                                hint)
        finally:
            for done in run.take_landed():  # a termination it decided ends this task (the later epochs skipped)
                self.report_committed(context, run, done, self._started(context, done.decision.epoch),
                                      also_skip=self.group_tasks() if done.decision.terminated else ())

    def _started(self, context: Mapping[str, Any], epoch: int) -> float | None:
        """When the head before this one started ``epoch`` (its result), for the epoch's duration
        metric; None if it did not run it (or ``airflow tasks test`` kept no result)."""
        if self.index == 0:
            return None
        head = context["ti"].xcom_pull(task_ids=f"epoch_{self.index - 1}.run") or {}
        return head.get("started_at") if isinstance(head, dict) and head.get("epoch") == epoch else None

    def verify(self, context: Mapping[str, Any], epoch: Any) -> dict[str, Any]:
        """The run's ``verify_epoch`` param: the determinism audit of the job's epoch ``epoch``
        (include.epoch.restore.Restorer.verify_epoch) on this DAG's Spark, in a scratch store in this
        worker's temporary directory (the Spark executors must see it: the embedded and native
        deployments' do); the job's store and outputs are only read. Every later task of the run
        is skipped; the task fails naming each partition that differs."""
        from airflow.exceptions import AirflowFailException

        from include.errors import ConfigError
        from include.runs import check_claim, open_newest, owner_of
        from include.store import open_store
        from iterations.hooks.iteration_store import IterationStoreHook
        from iterations.hooks.spark_epoch import SparkEpochHook

        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"verify_epoch must be an epoch number (an integer >= 0), got {epoch!r}")
        if self.index != 0:  # the first head did the audit and skipped this one
            raise AirflowSkipException("the run is a determinism audit")
        config = self.job_config(context)
        options = IterationStoreHook(self.aws_conn_id).store_options(config.checkpoint_root)
        store = open_store(config.checkpoint_root, create=False, **options)
        # the job as the runs own it (another DAG's, body's, input's: refused naming its owner)
        if check_claim(store, config.job_id, owner_of(config, self.dag_id)) is None:
            raise ConfigError(f"verify_epoch: no job {config.job_id!r} under {config.checkpoint_root}")
        job = open_newest(store, config, options)
        hook = SparkEpochHook(self.spark_mode, self.spark_conn_id)

        def execute(plan, scratch) -> None:
            hook.run_attempt(plan, scratch, {}, scratch.location())

        verification = job.restorer.verify_epoch(epoch, execute)
        if not verification.identical:  # the later tasks end upstream_failed: the run fails
            raise AirflowFailException(verification.describe())
        self.log.info("%s", verification.describe())
        verified = {"status": "verified", "epoch": epoch, "identical": True}
        context["ti"].xcom_push(key="return_value", value=verified)
        self.skip_epoch_tasks(context, after=self.index, also=(*self.group_tasks(), "finish", "continue"))
        return verified

    def _log_marks(self, epoch: int, marks: list[tuple[str, float]]) -> None:
        """One line of where this task's time went: ``epoch 3 in this task: 2.31 s (job and
        lease 0.05 s, plan 0.04 s, Spark job 2.02 s, align and commit 0.20 s)``."""
        end = time.perf_counter()
        spans = [(name, (marks[i + 1][1] if i + 1 < len(marks) else end) - at) for i, (name, at) in enumerate(marks)]
        self.log.info("epoch %d in this task: %.2f s (%s)", epoch, end - marks[0][1],
                      ", ".join(f"{name} {seconds:.2f} s" for name, seconds in spans))

    def commit_if_aligned(self, context: Mapping[str, Any], run, plan, reports, *, leave: bool = False):
        """``commit_in_head``: align and commit the attempt if every partition has reported
        (the committed epoch, ``EpochOutcome``); None, leaving both to the group's sensor and
        commit task, if a report is missing. ``leave`` (``overlap_commits``): an aligned epoch
        that did not decide termination is not committed here but left to the next head
        (``"left"``)."""
        from include.runs import aligned_line

        reports = run.job.attempts.reports(plan) if reports is None else reports  # read once: align, then commit
        decision, missing = run.align_if_complete(plan, reports)
        if decision is None:
            self.log.info("epoch %d: %d partition report(s) missing when the Spark job ended (%s): the "
                          "alignment sensor waits for them", plan.epoch, len(missing),
                          ", ".join(f"{h}/{p}" for h, p in missing[:5]))
            return None
        self.log.info("%s", aligned_line(decision))
        if leave and not decision.terminated:
            return "left"
        return self.commit_aligned(context, run, plan, decision, reports)

    def group_tasks(self) -> tuple[str, str]:
        """This epoch group's alignment sensor and commit task."""
        group = self.task_id.rsplit(".", 1)[0]
        return f"{group}.align", f"{group}.commit"

    def skip_rest_of_batch(self, context: Mapping[str, Any]) -> None:
        """Nothing of this batch is left to run: this epoch's align and commit and the later
        epochs are skipped at once (finish runs next)."""
        self.skip_epoch_tasks(context, after=self.index, also=self.group_tasks())
