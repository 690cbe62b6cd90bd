"""Every DAG file imports cleanly and fast, with tags, retries and docs (no secrets needed)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

DAG_FILES = sorted(glob.glob(os.path.join(ROOT, "dags", "*.py")))


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    os.environ.setdefault("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    sys.path.insert(0, os.path.join(ROOT, "plugins"))
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=os.path.join(ROOT, "dags"))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {"iterate_pagerank", "iterate_kmeans", "iterate_pagerank_daily", "iterations_stop",
                                   "iterate_sgd_incremental", "iterate_components", "pagerank_published",
                                   "iterate_pagerank_reviewed", "iterate_pagerank_on_asset", "iterate_sgd_on_asset"}


def test_the_outputs_are_assets(dagbag):
    """Every iteration DAG's finish publishes through its alias (a reviewed DAG's publish task,
    which follows the finish's staging and the review: finish >> review >> publish >> continue);
    the downstream example DAG is scheduled on iterate_pagerank's."""
    from airflow.sdk import AssetAlias

    for dag_id, dag in dagbag.dags.items():
        if not dag.has_task("finish"):
            continue
        publisher = "publish" if dag.has_task("review") else "finish"
        assert dag.get_task(publisher).outlets == [AssetAlias(f"{dag_id}.outputs")], dag_id
        if publisher == "publish":
            assert dag.get_task("finish").outlets == [], "the finish of a reviewed DAG publishes nothing"
            assert dag.get_task("review").downstream_task_ids == {"publish"}
            assert dag.get_task("publish").trigger_rule == "all_done", "it deletes what was staged, whatever happened"
            assert dag.get_task("continue").upstream_task_ids == {"finish", "publish"}
            assert dag.get_task("review").assigned_users == [{"id": "reviewer", "name": "reviewer"}]
            assert dag.get_task("review").defaults == ["Reject"], "no answer in time is a rejection"
    reviewed = dagbag.dags["iterate_pagerank_reviewed"]
    assert reviewed.get_task("review").response_timeout.total_seconds() == 86400
    downstream = dagbag.dags["pagerank_published"]
    assert list(downstream.timetable.asset_condition.objects) == [AssetAlias("iterate_pagerank.outputs")]
    assert downstream.doc_md and "iterations" in downstream.tags
    assert all(task.retries >= 1 for task in downstream.tasks)


def test_a_dag_scheduled_on_its_input_asset(dagbag):
    """iterate_pagerank_on_asset runs when its input is published: its schedule is the Asset of
    its default input, by the URI an upstream finish announces it by (output_uri)."""
    from airflow.sdk import Asset

    from include.process.paths import LOCAL_DIR
    from include.publication.outputs import output_uri

    dag = dagbag.dags["iterate_pagerank_on_asset"]
    assert list(dag.timetable.asset_condition.objects) == [Asset(output_uri(os.path.join(LOCAL_DIR, "graph"), "edges"))]
    assert dag.params["input_path"] == os.path.join(LOCAL_DIR, "graph", "edges")
    assert "batch_date" in dag.params and "recompute" in dag.params, "each run is a batch of a scheduled job"

    incremental = dagbag.dags["iterate_sgd_on_asset"]
    assert list(incremental.timetable.asset_condition.objects) == [Asset(output_uri(LOCAL_DIR, "incoming_on_asset"))]
    assert "batch_date" not in incremental.params, "every run goes on with the one job"
    sensor = incremental.get_task("epoch_1.wait_input")
    assert sensor.end_batch_without_input and not sensor.scheduled, "no sensor waits between events"
    assert not dagbag.dags["iterate_sgd_incremental"].get_task("epoch_1.wait_input").end_batch_without_input


def test_control_dag(dagbag):
    dag = dagbag.dags["iterations_stop"]
    assert dag.doc_md and "iterations" in dag.tags and dag.schedule is None
    assert {t.task_id for t in dag.tasks} == {"request_stop"}
    assert dag.get_task("request_stop").retries >= 1
    assert dag.params.get_param("mode").schema["enum"] == ["drain", "suspend"]


@pytest.mark.parametrize("path", DAG_FILES, ids=os.path.basename)
def test_dag_file_imports_fast_without_spark(path):
    """Parsing a DAG file must not import pyspark, the data libraries or the checks' Great
    Expectations, nor start anything: what it imports is checked, not how long it takes (a
    figure for a benchmark, not a test on a shared machine)."""
    heavy = ("pyspark", "great_expectations", "pandas", "numpy", "pyarrow", "boto3", "deltalake")
    code = (
        f"import sys, runpy; runpy.run_path({path!r}); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "plugins")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", f"imported at parse time: {done.stdout}"


@pytest.mark.parametrize("dag_id", ["iterate_pagerank", "iterate_kmeans", "iterate_pagerank_daily",
                                    "iterate_sgd_incremental", "iterate_pagerank_on_asset", "iterate_sgd_on_asset"])
def test_dag_shape(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert "iterations" in dag.tags and dag.doc_md
    assert dag.max_active_runs == 1
    for task in dag.tasks:
        assert task.retries >= 1, f"{task.task_id} has no retries"
    groups = sorted({t.task_id.split(".")[0] for t in dag.tasks if t.task_id.startswith("epoch_")},
                    key=lambda g: int(g.split("_")[1]))
    assert groups[0] == "epoch_0" and len(groups) >= 2
    expected = {"epoch_0.run", "epoch_0.align", "epoch_0.commit"}
    if dag_id in ("iterate_sgd_incremental", "iterate_sgd_on_asset"):  # input arrives while it runs
        expected.add("epoch_0.wait_input")
        assert dag.get_task("epoch_1.wait_input").upstream_task_ids == {"epoch_0.run", "epoch_0.commit"}
        assert dag.get_task("epoch_1.run").upstream_task_ids == {"epoch_1.wait_input"}
    assert {t.task_id for t in dag.tasks if t.task_id.startswith("epoch_0.")} == expected
    finish = dag.get_task("finish")
    assert finish.trigger_rule == "none_failed"
    assert {"job_id", "input_path", "checkpoint_root", "max_epochs", "tolerance", "num_partitions",
            "continuation", "stop", "checks"} <= set(dag.params)
    # the data checks' report is linked on whichever task committed (commit_in_head: the run task)
    for task in (dag.get_task("epoch_0.run"), dag.get_task("epoch_0.commit"), finish):
        assert [link.name for link in task.operator_extra_links] == ["Data checks"]
    continuation = dag.get_task("continue")
    assert continuation.upstream_task_ids == {"finish"} and continuation.trigger_dag_id == dag_id
    if dag.timetable.can_be_scheduled and dag_id != "iterate_sgd_on_asset":  # one job, not dated batches
        assert {"recompute", "batch_date"} <= set(dag.params)


@pytest.mark.parametrize(
    "dag_id, field, value",
    [
        ("iterate_pagerank", "job_id", "../escape"),
        ("iterate_pagerank", "damping", 1.5),
        ("iterate_pagerank", "max_epochs", 0),
        ("iterate_pagerank", "num_partitions", "4; rm -rf /"),
        ("iterate_kmeans", "k", 0),
        ("iterate_sgd_incremental", "learning_rate", 0),
        ("iterate_sgd_incremental", "max_splits_per_epoch", -1),
        ("iterate_kmeans", "tolerance", -1),
        ("iterate_pagerank_daily", "recompute", "yes"),
        ("iterate_kmeans", "output_format", "csv"),
        ("iterate_kmeans", "stop", "halt"),
        ("iterations_stop", "mode", "pause"),
        ("iterations_stop", "job_id", "../other"),
        ("iterate_pagerank", "checks", {"expectations": [{"name": "x", "severity": "fatal"}]}),
        ("iterate_pagerank", "checks", {"expectations": [{"type": "expect_column_to_exist"}]}),
        ("iterate_kmeans", "checks", {"enable": False}),
    ],
)
def test_bad_params_are_refused_naming_the_field(dagbag, dag_id, field, value):
    from airflow.sdk.definitions.param import ParamsDict, ParamValidationError

    dag = dagbag.dags[dag_id]
    params = ParamsDict({k: dag.params.get_param(k) for k in dag.params})
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {field}:"):
        params[field] = value


def test_data_checks_of_the_dags_and_the_plugin(dagbag):
    """iterate_pagerank carries its checks file; the plugin that registers the Data checks link
    loads; a checks param in the right shape validates."""
    from airflow.sdk.definitions.param import ParamsDict

    from include.checks import CheckSettings

    commit = dagbag.dags["iterate_pagerank"].get_task("epoch_0.commit")
    assert {e["name"] for e in CheckSettings.parse(commit.checks).expectations} >= {"no_dominant_node", "rank_mass"}
    assert dagbag.dags["iterate_kmeans"].get_task("epoch_0.commit").checks == {}
    dag = dagbag.dags["iterate_kmeans"]
    params = ParamsDict({k: dag.params.get_param(k) for k in dag.params})
    params["checks"] = {"expectations": [{"name": "no_empty_cluster", "severity": "warning"}]}

    sys.path.insert(0, os.path.join(ROOT, "plugins"))
    import iterations_plugin

    assert [link.name for link in iterations_plugin.IterationsPlugin.operator_extra_links] == ["Data checks"]


def test_airflow_loads_the_plugin_file_alone(tmp_path):
    """Airflow imports every ``.py`` file of its plugins folder as a top-level module named by
    its stem, each time a process loads plugins (a task process on a Celery worker, ``airflow
    dags test``, the triggerer): without ``plugins/.airflowignore`` that would run the whole
    ``iterations`` package a second time (``operators/base.py`` as ``base``, the view's FastAPI
    app as ``app``, seconds of imports). Loaded in a new process: the plugin, its extra link and
    view, none of the package's files as a module of its own, and no FastAPI."""
    probe = ("import sys; from airflow import plugins_manager as pm; plugins, errors = pm._get_plugins(); "
             "plugins = [p for p in plugins if p.name == 'iterations' or p.__module__.startswith('iterations')]; "
             "print([p.name for p in plugins], errors, "
             "sorted(m for m in ('app', 'base', 'head', 'epoch', 'executors', 'celery_preload') if m in sys.modules), "
             "'fastapi' in sys.modules, [len(p.operator_extra_links) for p in plugins], "
             "[a['name'] for p in plugins for a in p.fastapi_apps])")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"),
           "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "plugins")])}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "['iterations'] {} [] False [1] ['Iterations view']", out.stdout


def test_the_trigger_form_clamps_no_integer(dagbag):
    """Airflow's trigger form clamps a number field to its schema's ``minimum`` / ``maximum``
    without a word: no integer param of any DAG has them (dag_factory.form_bounds makes them
    exclusive), so 0 typed as max_epochs is refused as typed, in words."""
    from airflow.sdk.definitions.param import ParamsDict, ParamValidationError

    integers = 0
    for dag in dagbag.dags.values():
        for k in dag.params:
            schema = dag.params.get_param(k).schema
            types = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
            if "integer" in types and "number" not in types:
                integers += 1
                assert "minimum" not in schema and "maximum" not in schema, (dag.dag_id, k, schema)
    assert integers > 20
    dag = dagbag.dags["iterate_pagerank"]
    params = ParamsDict({k: dag.params.get_param(k) for k in dag.params})
    with pytest.raises(ParamValidationError, match="0 is less than or equal to the minimum of 0"):
        params["max_epochs"] = 0
    params["max_epochs"] = 1


def test_every_param_schema_is_draft_7_and_serialises_round_trip(dagbag):
    """Airflow checks a param's schema against its dialect's metaschema on every validation (of
    the DAG's params at each serialization, and as each task starts): the params declare draft
    7, whose metaschema check is about 4x cheaper than the default 2020-12 one
    (dag_factory.param). The serialized DAG keeps the dialect, and a run's params still validate
    against it."""
    from airflow.serialization.serialized_objects import DagSerialization

    from iterations.dag_factory import SCHEMA_DIALECT

    for dag in dagbag.dags.values():
        assert {k: dag.params.get_param(k).schema.get("$schema") for k in dag.params} == \
            {k: SCHEMA_DIALECT for k in dag.params}, dag.dag_id
        restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        for k in dag.params:
            assert restored.params.get_param(k).schema == dag.params.get_param(k).schema
    checks = dagbag.dags["iterate_pagerank"].params.get_param("checks")
    assert checks.resolve({"expectations": [{"name": "rank_mass", "severity": "warning"}]})


def test_tasks_carry_no_copy_of_the_dag_params(dagbag):
    """Airflow copies every DAG param into every task and validates each copy at every
    serialization: the iteration operators keep only their own (operators.base.own_params).
    The serialized tasks carry none, the serialized DAG all of them, and a task's context still
    gets the DAG's params with the run's conf over them."""
    from airflow.sdk import DAG, Param
    from airflow.sdk.definitions.param import process_params
    from airflow.serialization.serialized_objects import DagSerialization

    from iterations.operators.epoch import StopRequestOperator

    for dag in dagbag.dags.values():
        assert {t.task_id: dict(t.params) for t in dag.tasks if t.params} == {}, dag.dag_id
        serialized = DagSerialization.to_dict(dag)["dag"]
        assert not [t for t in serialized["tasks"] if "params" in t["__var"]], dag.dag_id
        assert set(serialized["params"] if isinstance(serialized["params"], dict) else dict(serialized["params"])) \
            == set(dag.params), dag.dag_id
    dag = dagbag.dags["iterate_pagerank"]
    commit = dag.get_task("epoch_3.commit")
    params = process_params(dag, commit, {"max_epochs": 7}, suppress_exception=False)
    assert params["max_epochs"] == 7 and params["job_id"] == "pagerank" and set(params) == set(dag.params)

    # a param given to the task itself, or one that differs from the DAG's, stays the task's
    with DAG("own_params_probe", params={"a": Param(1, type="integer"), "b": Param(2, type="integer")}):
        task = StopRequestOperator(task_id="stop", body="pagerank", params={"b": 3, "c": Param("x", type="string")})
    assert dict(task.params) == {"b": 3, "c": "x"}


def test_building_an_iteration_dag_copies_no_params(monkeypatch):
    """Airflow deep-copies a DAG's params into an operator once per class of its hierarchy as
    it is made (~80% of a 62-task DAG file's parse, which every task process repeats):
    ``iteration_dag`` gives the DAG its params once the tasks exist. The DAG still has them
    all, converted and validated as if given to ``DAG``."""
    from airflow.sdk.definitions.param import ParamsDict

    from iterations.dag_factory import iteration_dag, job_params, param

    copies = []
    original = ParamsDict.__deepcopy__
    monkeypatch.setattr(ParamsDict, "__deepcopy__", lambda self, memo: copies.append(len(self)) or original(self, memo))
    params = job_params(job_id="probe", input_path="/tmp/probe-in", output_path=None)
    dag = iteration_dag(dag_id="params_probe", body="pagerank", params=params, epochs_per_batch=4)
    assert [n for n in copies if n] == [] and len(dag.tasks) == 14
    assert isinstance(dag.params, ParamsDict) and set(params) <= set(dag.params) and "damping" in dag.params
    assert {t.task_id: dict(t.params) for t in dag.tasks if t.params} == {}
    bad = {**params, "max_epochs": param(0, description="probe", type="integer", minimum=1)}
    with pytest.raises(ValueError, match="not allowed to define a Schedule"):
        iteration_dag(dag_id="params_probe_daily", body="pagerank", params=bad, epochs_per_batch=2, schedule="@daily")


@pytest.mark.parametrize("wait_for_input", [False, True])
def test_commit_in_head_shape(monkeypatch, wait_for_input):
    """With ``commit_in_head`` each epoch group's first task starts when the previous head has
    succeeded and its commit succeeded or was skipped (none_failed); finish waits for the last
    head too; it is the default. Without it the groups chain one after the other; the
    deployment's override is checked both ways."""
    from iterations.dag_factory import iteration_dag, job_params

    monkeypatch.delenv("ITERATIONS_EPOCHS_PER_BATCH", raising=False)

    def build(**kw):
        return iteration_dag(dag_id="shape", body="pagerank", epochs_per_batch=3, wait_for_input=wait_for_input,
                             params=job_params(job_id="j", input_path="/tmp/in.csv", output_path=None), **kw)

    first = "wait_input" if wait_for_input else "run"
    monkeypatch.delenv("ITERATIONS_COMMIT_IN_HEAD", raising=False)
    for dag, inline in ((build(), True), (build(commit_in_head=False), False)):
        for i in (1, 2):
            task = dag.get_task(f"epoch_{i}.{first}")
            assert task.upstream_task_ids == ({f"epoch_{i - 1}.commit", f"epoch_{i - 1}.run"} if inline
                                              else {f"epoch_{i - 1}.commit"})
            assert task.trigger_rule == ("none_failed" if inline else "all_success")
            assert dag.get_task(f"epoch_{i}.run").commit_in_head is inline
        assert dag.get_task("epoch_0.run").trigger_rule == "all_success"
        assert dag.get_task("finish").upstream_task_ids == ({"epoch_2.commit", "epoch_2.run"} if inline
                                                            else {"epoch_2.commit"})
    monkeypatch.setenv("ITERATIONS_COMMIT_IN_HEAD", "0")
    assert build().get_task("epoch_1.run").commit_in_head is False
    monkeypatch.setenv("ITERATIONS_COMMIT_IN_HEAD", "true")
    assert build(commit_in_head=False).get_task("epoch_1.run").commit_in_head is True
    monkeypatch.setenv("ITERATIONS_COMMIT_IN_HEAD", "yes")
    with pytest.raises(ValueError, match="ITERATIONS_COMMIT_IN_HEAD must be 1 or 0, got 'yes'"):
        build()


def test_overlap_commits_options(monkeypatch):
    """``overlap_commits``: off by default; on, every head has it and only the batch's last is
    ``last`` (it commits its own epoch); the deployment's override both ways and its bad value;
    refused, naming why, without ``commit_in_head`` (the DAG's or the override's) and with
    ``wait_for_input``. The same task dependencies as ``commit_in_head`` alone."""
    from iterations.dag_factory import iteration_dag, job_params

    monkeypatch.delenv("ITERATIONS_EPOCHS_PER_BATCH", raising=False)
    monkeypatch.delenv("ITERATIONS_COMMIT_IN_HEAD", raising=False)
    monkeypatch.delenv("ITERATIONS_OVERLAP_COMMITS", raising=False)

    def build(**kw):
        return iteration_dag(dag_id="shape", body="pagerank", epochs_per_batch=3,
                             params=job_params(job_id="j", input_path="/tmp/in.csv", output_path=None), **kw)

    heads = lambda dag: [dag.get_task(f"epoch_{i}.run") for i in range(3)]  # noqa: E731
    assert [h.overlap_commits for h in heads(build())] == [False] * 3
    on = build(overlap_commits=True)
    assert [(h.overlap_commits, h.last) for h in heads(on)] == [(True, False), (True, False), (True, True)]
    assert {t.task_id: t.upstream_task_ids for t in on.tasks} == {t.task_id: t.upstream_task_ids for t in build().tasks}
    monkeypatch.setenv("ITERATIONS_OVERLAP_COMMITS", "1")
    assert heads(build())[1].overlap_commits is True
    monkeypatch.setenv("ITERATIONS_OVERLAP_COMMITS", "false")
    assert heads(build(overlap_commits=True))[1].overlap_commits is False
    monkeypatch.setenv("ITERATIONS_OVERLAP_COMMITS", "later")
    with pytest.raises(ValueError, match="ITERATIONS_OVERLAP_COMMITS must be 1 or 0, got 'later'"):
        build()
    monkeypatch.delenv("ITERATIONS_OVERLAP_COMMITS")
    with pytest.raises(ValueError, match=r"overlap_commits needs commit_in_head, which is off: "):
        build(overlap_commits=True, commit_in_head=False)
    monkeypatch.setenv("ITERATIONS_COMMIT_IN_HEAD", "0")
    with pytest.raises(ValueError, match=r"needs commit_in_head, which is off \(ITERATIONS_COMMIT_IN_HEAD=0\)"):
        build(overlap_commits=True)
    monkeypatch.delenv("ITERATIONS_COMMIT_IN_HEAD")
    with pytest.raises(ValueError, match="overlap_commits cannot be used with wait_for_input"):
        build(overlap_commits=True, wait_for_input=True)


def test_the_asset_scheduled_dag_of_the_docs(tmp_path, capsys):
    """docs/airflow.md's downstream DAG, as the page writes it: scheduled on the output's Asset;
    its task, given the asset event of a real publication (a local output), prints the version
    that arrived and that it is the current one."""
    import datetime as dt
    import types

    from airflow.sdk import Asset

    from include.publication.outputs import output_uri, publish_dataset
    from include.store import LocalStore
    from tests.docs import block
    from tests.unit.publication.test_outputs import staged, stamp

    page = block("docs/airflow.md", "import datetime as dt\n\nfrom airflow.sdk import DAG, task\n\n"
                                    "from iterations.assets import output_asset")
    scope: dict = {}
    exec(compile(page.text, "docs/airflow.md", "exec"), scope)
    dag = scope["dag"]
    assert list(dag.timetable.asset_condition.objects) == [Asset("s3://iterations-outputs/pagerank/ranks")]

    src, out = LocalStore(tmp_path / "ckpt"), LocalStore(tmp_path / "out")
    publish_dataset(src, out, "ranks", staged(src, "j", [b"a", b"bb"]), stamp("j", 4))
    uri = output_uri(str(tmp_path / "out"), "ranks")
    event = types.SimpleNamespace(asset=Asset(uri), source_dag_id="iterate_pagerank", source_run_id="r1",
                                  timestamp=dt.datetime(2026, 1, 1), extra={
                                      "job_id": "j", "checkpoint_id": 4, "version": "v-j-4", "rows": 3})
    dag.get_task("report").python_callable(triggering_asset_events={Asset(uri): [event]})
    assert capsys.readouterr().out.splitlines() == ["v-j-4 3 current: True"]


def test_the_input_asset_dag_of_the_docs():
    """docs/airflow.md's DAG scheduled on its input's Asset, as the page writes it: the Asset is
    the input's location by the URI an upstream's finish announces it by."""
    from airflow.sdk import Asset

    from include.process.paths import LOCAL_DIR
    from include.publication.outputs import output_uri
    from tests.docs import block

    page = block("docs/airflow.md", "import os\n\nfrom iterations.assets import input_asset")
    scope: dict = {}
    exec(compile(page.text, "docs/airflow.md", "exec"), scope)
    dag = scope["dag"]
    assert dag.dag_id == "pagerank_on_edges"
    assert list(dag.timetable.asset_condition.objects) == [Asset(output_uri(os.path.join(LOCAL_DIR, "graph"), "edges"))]
    assert {"batch_date", "recompute", "damping"} <= set(dag.params)
