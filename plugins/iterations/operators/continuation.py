"""The continuation of a batch that ended before its job terminated."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Mapping, Sequence

from airflow.providers.common.compat.sdk import XCom
from airflow.providers.standard.operators.trigger_dagrun import XCOM_RUN_ID, TriggerDagRunLink, TriggerDagRunOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from include.process import DAGS_TEST_HANDOFF
from iterations.operators.base import IterationOperator

#: Set by a continuation that runs the next batches itself under ``airflow dags test``: the file
#: in which the batch it started leaves the conf of the batch after it.
HANDOFF_ENV = DAGS_TEST_HANDOFF.name


def run_by_dags_test(context: Mapping[str, Any]) -> bool:
    """This run was made by ``airflow dags test`` (which names its runs' user ``dag_test``)."""
    return getattr(context.get("dag_run"), "triggering_user_name", None) == "dag_test"


def under_dags_test(context: Mapping[str, Any]) -> bool:
    """This run is ``airflow dags test``'s and this task runs in that command's own process
    (``dags test`` without ``--use-executor``). Nothing would ever start a continuation run
    queued there: the command ends with its one run, and no scheduler may be running."""
    return run_by_dags_test(context) and sys.argv[1:3] == ["dags", "test"]


class ContinuationLink(TriggerDagRunLink):
    """A continuation's "Triggered DAG" link: the run it triggered; none when it triggered none
    (the job terminated or is suspended, or ``airflow dags test`` ran the next batches in its
    own command). Every try records the run id, empty until a run is triggered, so that the
    link never asks for a record that is not there (which Airflow logs as an error)."""

    def get_link(self, operator, *, ti_key) -> str:
        if not XCom.get_value(ti_key=ti_key, key=XCOM_RUN_ID):
            return ""
        return super().get_link(operator, ti_key=ti_key)


class ContinuationOperator(IterationOperator, TriggerDagRunOperator):
    """After ``finish``: if the job has not terminated (the batch reached its epoch limit),
    trigger the next batch - a new run of the same DAG with the same params - unless the run was
    started with ``continuation`` off. The triggered run is linked from this task ("Triggered
    DAG" in the UI) and noted with what it continues. Its run id names the job and the epoch it
    starts at, so a retry of this task never starts a second continuation.

    Under ``airflow dags test`` the next batches run in the same command instead, each as an
    ``airflow dags test`` of its own started by this task, one after the other until the job
    terminates (or is suspended, or its continuation is off); their logs are this task's."""

    template_fields: Sequence[str] = ("job",)
    ui_color = "#fff4d6"
    operator_extra_links = (ContinuationLink(),)

    def __init__(self, *, trigger_dag_id: str, **kwargs: Any) -> None:
        super().__init__(trigger_dag_id=trigger_dag_id, logical_date=None, skip_when_already_exists=True,
                         **kwargs)

    def execute(self, context: Mapping[str, Any]) -> None:
        from iterations.operators.task_context import permanent_errors

        context["ti"].xcom_push(key=XCOM_RUN_ID, value="")  # no run triggered (yet): ContinuationLink
        with permanent_errors():
            self._continue(context)

    def _continue(self, context: Mapping[str, Any]) -> None:
        from include.checkpoints import HeadStatus

        if not self.settings(context).get("continuation", True):
            raise AirflowSkipException("continuation is off for this run: trigger the DAG again to go on")
        job, _ = self.iteration_job(context)
        state = job.restorer.state(verify="none")
        if state.status is not HeadStatus.RUNNING:
            raise AirflowSkipException(f"job {job.config.job_id} is {state.status.value}: nothing to continue")
        if job.stopping.suspended_at(state) is not None:
            raise AirflowSkipException(f"job {job.config.job_id} is suspended at checkpoint "
                                       f"{state.latest.checkpoint_id}: trigger the DAG again to resume")
        conf = dict(context["params"])
        # the OpenLineage provider adds this task as the next batch's parent run (the first
        # batch's run stays the root), in place of what this batch's conf had
        conf.pop("openlineage", None)
        conf["stop"] = "none"  # a stop param applied to the batch that asked for it
        if "recompute" in conf:  # a scheduled DAG's param (a run conf holds only the DAG's params)
            conf["recompute"] = False  # a continuation goes on with the batch's generation
        conf["rewind_to"] = None  # ... and with the generation a rewind started
        if "fork_from" in conf:
            conf["fork_from"] = None  # ... and with the job a fork started (its record names the parent)
        if "take_over" in conf:
            conf["take_over"] = False  # the job is this DAG's now: nothing left to take over
        if self.scheduled:
            conf["batch_date"] = self.batch_date(context)
        self.conf = conf
        self.trigger_run_id = f"continuation__{job.config.job_id}__epoch_{state.next_epoch}"
        self.note = f"continues job {job.config.job_id} at epoch {state.next_epoch} after run {context['run_id']}"
        if under_dags_test(context):
            self._next_batches_in_this_command(job.config.job_id, conf, state.next_epoch)
            return
        self.log.info("job %s not terminated after this batch: triggering run %s to continue at epoch %d",
                      job.config.job_id, self.trigger_run_id, state.next_epoch)
        if run_by_dags_test(context):  # dags test --use-executor: the task in a process of its own
            self.log.warning("airflow dags test ends with this run: without a scheduler, go on with: %s",
                             shlex.join(["airflow", "dags", "test", self.trigger_dag_id, "--conf", json.dumps(conf)]))
        super().execute(context)

    def _next_batches_in_this_command(self, job_id: str, conf: dict[str, Any], epoch: int) -> None:
        """``airflow dags test``: run the job's next batches here. A batch this task started
        hands the conf of the one after it back (``HANDOFF_ENV``) instead of starting it, so the
        batches run one after the other, never nested."""
        handoff = DAGS_TEST_HANDOFF.get()
        if handoff:  # this batch was started by a continuation task: it starts the next one
            with open(handoff, "w") as f:
                json.dump({"conf": conf, "epoch": epoch}, f)
            self.log.info("job %s not terminated after this batch: the airflow dags test command that "
                          "started it runs the next batch (epoch %d on)", job_id, epoch)
            return
        batches = 0
        while True:
            command = [sys.executable, "-m", "airflow", "dags", "test", self.trigger_dag_id, "--conf", json.dumps(conf)]
            self.log.info("job %s not terminated after this batch: airflow dags test runs the next batch "
                          "(epoch %d on) in this command: %s", job_id, epoch, shlex.join(command))
            with tempfile.TemporaryDirectory(prefix="iterations-handoff-") as scratch:
                path = os.path.join(scratch, "next.json")
                code = self._stream(command, {**os.environ, HANDOFF_ENV: path})
                if code != 0:
                    raise AirflowFailException(
                        f"the batch of job {job_id} from epoch {epoch} failed (exit {code}, its log above); "
                        f"once fixed, go on with: {shlex.join(command)}")
                batches += 1
                if not os.path.exists(path):
                    self.log.info("job %s: %d more batch(es) ran in this command; nothing to continue", job_id, batches)
                    return
                with open(path) as f:
                    handed = json.load(f)
            if handed["epoch"] <= epoch:  # a batch always commits an epoch or ends the job
                raise AirflowFailException(f"the batch of job {job_id} from epoch {epoch} asked to continue at "
                                           f"epoch {handed['epoch']}: no progress, stopping here")
            conf, epoch = handed["conf"], handed["epoch"]

    def _stream(self, command: list[str], env: Mapping[str, str]) -> int:
        """Run ``command``, its output in this task's log as it comes."""
        with subprocess.Popen(command, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace") as child:
            assert child.stdout is not None
            for line in child.stdout:
                self.log.info("| %s", line.rstrip("\n"))
            return child.wait()
