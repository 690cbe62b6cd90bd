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
    """

    ui_color = "#d6e9f8"
    operator_extra_links = (DataChecksLink(),)

    def __init__(self, *, index: int, commit_in_head: bool = True, attempt_retries: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self.index = index
        self.commit_in_head = commit_in_head
        self.attempt_retries = attempt_retries

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
                    for name, where in run.settle().items():
                        self.log.info("epoch %d output %s published at %s", epoch, name, where)
                context["ti"].xcom_push(key="return_value", value=restored)
                self.skip_epoch_tasks(context, after=None, also=self.group_tasks())
            return restored
        step = run.boundary()
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

        plan, reports = run.plan_and_run(self.attempt_retries, planned)
        done = None
        if self.commit_in_head:
            marks.append(("align and commit", time.perf_counter()))  # with the checks
            done = self.commit_if_aligned(context, run, plan, reports)
        self._log_marks(epoch, marks)
        if done is not None:
            return self.report_committed(context, run, done, started, also_skip=self.group_tasks())
        return {"status": "run", "epoch": epoch, "attempt_id": plan.attempt_id, "started_at": started}

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

    def commit_if_aligned(self, context: Mapping[str, Any], run, plan, reports):
        """``commit_in_head``: align and commit the attempt if every partition has reported
        (the committed epoch, ``EpochOutcome``); None, leaving both to the group's sensor and
        commit task, if a report is missing."""
        from include.runs import aligned_line

        reports = run.job.attempts.reports(plan) if reports is None else reports  # read once: align, then commit
        decision, missing = run.align_if_complete(plan, reports)
        if decision is None:
            self.log.info("epoch %d: %d partition report(s) missing when the Spark job ended (%s): the "
                          "alignment sensor waits for them", plan.epoch, len(missing),
                          ", ".join(f"{h}/{p}" for h, p in missing[:5]))
            return None
        self.log.info("%s", aligned_line(decision))
        return self.commit_aligned(context, run, plan, decision, reports)

    def group_tasks(self) -> tuple[str, str]:
        """This epoch group's alignment sensor and commit task."""
        group = self.task_id.rsplit(".", 1)[0]
        return f"{group}.align", f"{group}.commit"

    def skip_rest_of_batch(self, context: Mapping[str, Any]) -> None:
        """Nothing of this batch is left to run: this epoch's align and commit and the later
        epochs are skipped at once (finish runs next)."""
        self.skip_epoch_tasks(context, after=self.index, also=self.group_tasks())
