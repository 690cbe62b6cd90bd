"""Whom a run's ``openlineage`` conf entry (the OpenLineage provider's parent run) may name: the
DAG's own runs and tasks (what a continuation writes) or the jobs its author's ``lineage_parents``
allow. The API server refuses any other when the run is triggered (iterations.closed_conf); a
run made inside the deployment gets a warning from its first task."""

from __future__ import annotations

import os
import sys

import pytest

from tests.conftest import ROOT

PARENT = {"parentRunId": "0191a5b2-7c3d-7e4f-8a5b-6c7d8e9f0a1b", "parentJobNamespace": "default"}
ROOT_PARENT = {"rootParentRunId": "0191a5b2-0000-7e4f-8a5b-6c7d8e9f0a1b", "rootParentJobNamespace": "default"}


@pytest.fixture(scope="module")
def make_dag(tmp_path_factory):
    os.environ.setdefault("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    sys.path.insert(0, os.path.join(ROOT, "plugins"))
    from iterations.dag_factory import iteration_dag, job_params, pagerank_params

    def make(dag_id: str, **kw):
        tmp = tmp_path_factory.mktemp("dag")
        params = job_params(job_id="pr", input_path=str(tmp / "in" / "edges.csv"), output_path=str(tmp / "out"),
                            checkpoint_root=str(tmp / "store")) | pagerank_params()
        return iteration_dag(dag_id=dag_id, body="pagerank", params=params, epochs_per_batch=2, **kw)

    return make


def door(dag, conf):
    """What the API server answers a trigger of ``dag`` with ``conf`` (closed_conf.conf_problem,
    with the DAG as Airflow serialized it)."""
    from airflow.serialization.serialized_objects import DagSerialization

    from include.contract.parameters import LINEAGE_PARENTS_PARAM
    from iterations.closed_conf import own_lineage_jobs, refusal

    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    declared = set(served.params.keys())
    allowed = served.params[LINEAGE_PARENTS_PARAM] if LINEAGE_PARENTS_PARAM in declared else ()
    return refusal(served.dag_id, conf, declared, own_lineage_jobs(served.dag_id, served.task_ids), allowed=allowed,
                   namespace="default")


def test_issue_64_a_trigger_naming_another_job_as_parent_is_refused(make_dag):
    """Issue 64: any job was accepted as a run's parent. The continuation's entry still is."""
    dag = make_dag("lineage_closed")
    continuation = {**PARENT, "parentJobName": "lineage_closed.continue", **ROOT_PARENT,
                    "rootParentJobName": "lineage_closed"}
    assert door(dag, {"job_id": "pr", "openlineage": continuation}) is None
    assert door(dag, {"openlineage": {**PARENT, "parentJobName": "lineage_closed"}}) is None
    refused = door(dag, {"openlineage": {**PARENT, "parentJobName": "payroll.publish"}})
    assert refused.startswith("DAG lineage_closed: openlineage: parentJobName 'payroll.publish' in namespace "
                              "'default' is not a parent a run of this DAG may name"), refused
    refused = door(dag, {"openlineage": {**continuation, "rootParentJobName": "payroll"}})
    assert "rootParentJobName 'payroll'" in refused
    assert "lineage_parents" not in dag.params, "no param unless the author allows other parents"


def test_the_author_allows_other_parents_in_a_param_no_run_changes(make_dag):
    from airflow.sdk.definitions.param import ParamValidationError

    dag = make_dag("lineage_open", lineage_parents=[("scheduler", "nightly.*")])
    hidden = dag.params.get_param("lineage_parents")
    assert hidden.schema["const"] == [["scheduler", "nightly.*"]], "const: a hidden field of the trigger form"
    external = {**PARENT, "parentJobNamespace": "scheduler", "parentJobName": "nightly.graph"}
    assert door(dag, {"openlineage": external}) is None
    assert "'nightly.*' in 'scheduler' (its author's lineage_parents)" in door(
        dag, {"openlineage": {**external, "parentJobName": "hourly.graph"}})
    with pytest.raises(ParamValidationError):
        hidden.resolve([["*", "*"]])  # a run's conf cannot widen it
    from include.errors import ConfigError

    with pytest.raises(ConfigError, match=r"lineage_parents: 'nightly.\*' is not a \(namespace, job name pattern\)"):
        make_dag("lineage_bad", lineage_parents=["nightly.*"])


class Recorded:
    """A task's logger that keeps its warnings."""

    def __init__(self):
        self.warnings: list[str] = []

    def warning(self, message, *args):
        self.warnings.append(message % args)

    def __getattr__(self, name):
        return lambda *a, **k: None


def test_a_run_made_inside_the_deployment_gets_a_warning_naming_the_parent(make_dag):
    """A run another DAG's TriggerDagRunOperator made (the provider writes the triggering task
    into its conf) did not pass the API server: its first task warns, once, and goes on."""
    dag = make_dag("lineage_inside")
    task, finish = dag.get_task("epoch_0.run"), dag.get_task("finish")
    task._cached_logger, finish._cached_logger = Recorded(), Recorded()
    params = {**{k: dag.params[k] for k in dag.params}, "openlineage": {**PARENT, "parentJobName": "upstream.trigger"}}
    assert task.settings({"params": params})["job_id"] == "pr"
    task.settings({"params": params})
    [warned] = task.log.warnings
    assert warned.startswith("openlineage: parentJobName 'upstream.trigger' in namespace") and \
        "not triggered through the API server" in warned, warned
    finish.settings({"params": {**params, "openlineage": {**PARENT, "parentJobName": "lineage_inside.continue"}}})
    assert finish.log.warnings == []
