"""The base of the operators that run a recorded attempt as a Spark job, through the Spark hook
(iterations.hooks.spark_epoch): the head and the finish."""

from __future__ import annotations

from typing import Any, Mapping

from iterations.operators.base import IterationOperator
from iterations.operators.task_context import batch_id_of, run_of


class SparkAttemptOperator(IterationOperator):
    """Base of the operators that run a recorded attempt as a Spark job."""

    def __init__(self, *, spark_mode: str = "connect", spark_conn_id: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.spark_mode = spark_mode
        self.spark_conn_id = spark_conn_id

    def epoch_run(self, context: Mapping[str, Any]):
        """This task's part of the run through the epoch protocol (include.runs.epoch_run.EpochRun):
        its attempts run as Spark jobs through the hook (an error of ours raised in a Spark task
        surfaces as itself); what an earlier try left running is interrupted by its tag."""
        from include.runs import EpochRun
        from iterations.hooks.spark_epoch import SparkEpochHook

        job, options = self.iteration_job(context)
        hook = SparkEpochHook(self.spark_mode, self.spark_conn_id)

        def execute(plan) -> None:
            try:
                hook.run_attempt(plan, job.store, dict(options), job.config.checkpoint_root)
            except Exception as failure:
                from spark_jobs.executor_errors import raise_executor_error

                try:
                    raise_executor_error(failure)
                except Exception as ours:  # an error of ours raised in a Spark task, as itself
                    if ours is not failure:
                        raise ours from failure
                raise

        self._epoch_run = EpochRun(job, execute, batch_id_of(context), interrupt=hook.interrupt, run=run_of(context),
                                   on_settled=lambda manifest, published: self.report_settled(job, manifest, published))
        return self._epoch_run

    def on_kill(self) -> None:
        """The task is being stopped (killed, marked failed or success from the UI, timed out):
        the attempt it runs is cancelled - its Spark work interrupted (connect: by the attempt's
        tag; submit: its spark-submit and driver killed) and the attempt aborted
        (include.runs.epoch_run.EpochRun.cancel). The next run or try plans a new attempt."""
        run = getattr(self, "_epoch_run", None)
        if run is None:
            return
        try:
            run.cancel(f"task {self.task_id} was stopped")
        except Exception as e:  # the process is going away: say why the attempt may still run
            self.log.error("could not cancel the running attempt (%s: %s): the next run or try fences it",
                           type(e).__name__, e)
