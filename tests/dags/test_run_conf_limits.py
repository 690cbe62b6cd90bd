"""What a DAG run's conf may do, tried through ``airflow dags test`` as a user who may trigger a
DAG would: no code runs from it, no path outside the allowed roots or inside a checkpoint store
is reached, no safeguard of the DAG's author is switched off, no other owner's job is continued,
and what a retry cannot change fails at once, without the task's retries."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.store import LocalStore
from spark_jobs.runner import IterationRunner
from tests.dags.conftest import airflow
from tests.faults.airflow_sweep import task_tries
from tests.helpers import graph_with_dangling, pagerank_config, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def dags_test(env, dag_id, conf) -> tuple[bool, str, dict[str, int]]:
    """(succeeded, log, tries of each task)."""
    done = airflow(env, "dags", "test", dag_id, "--conf", json.dumps(conf))
    log = done.stdout + done.stderr
    return done.returncode == 0 and "state=success" in log, log, task_tries(log)


@pytest.fixture
def local(airflow_env, tmp_path):
    """The DAGs' embedded local directory moved under tmp_path (a DAG's default checkpoint root is
    ``<it>/dags/<dag_id>/store``), and the only root the deployment allows; runs point their
    paths inside it."""
    # two epoch groups: a refused run's task fails at once, and airflow dags test then marks the
    # tasks after it failed one layer per second (about a minute for the default twenty groups)
    return {**airflow_env, "ITERATIONS_LOCAL_DIR": str(tmp_path / "local"),
            "ITERATIONS_ALLOWED_ROOTS": str(tmp_path / "local"), "ITERATIONS_EPOCHS_PER_BATCH": "2"}, tmp_path / "local"


def pagerank_conf(root, **extra):
    edges = write_edges(root / "in" / "edges.csv", graph_with_dangling(10, 0.3, seed=1))
    return {"job_id": "pr", "input_path": edges, "checkpoint_root": str(root / "ckpt"),
            "output_path": str(root / "out"), "max_epochs": 2, "tolerance": 0, "num_partitions": 2,
            "continuation": False, **extra}


def test_a_run_conf_cannot_run_code_through_the_checks_param(local):
    env, root = local
    marker = root / "pwned"
    conf = pagerank_conf(root, checks={"expectations": [{
        "name": "innocent", "type": "expect_column_values_to_be_between",
        "kwargs": {"column": "ranks.rank.min", "min_value": 0, "condition_parser": "pandas",
                   "row_condition": f"@pd.io.common.os.system('touch {marker}')==0"}}]})
    ok, log, tries = dags_test(env, "iterate_pagerank", conf)
    assert not ok and not marker.exists(), "the shell command never ran"
    # the param's JSON schema refuses it as the run is created (the operators' own refusal, for
    # checks that reach them otherwise, is tested in tests/unit/checks/test_validation.py)
    assert "Invalid input for param checks" in log and "condition_parser" in log and not tries, log[-3000:]


def test_a_run_conf_cannot_switch_off_the_authors_checks(local):
    env, root = local
    for checks, says in (({"enabled": False}, "enabled"),
                         ({"expectations": [{"name": "rank_mass", "severity": "info"}]}, "rank_mass"),
                         ({"expectations": [{"name": "ranks_finite", "enabled": False}]}, "ranks_finite")):
        ok, log, tries = dags_test(env, "iterate_pagerank", pagerank_conf(root, checks=checks))
        assert not ok and says in log and "author" in log, log[-3000:]
        assert tries["epoch_0.run"] == 1, tries


def test_a_run_conf_cannot_reach_a_checkpoint_store_or_take_a_job_over(local):
    env, root = local
    default_store = root / "dags" / "iterate_pagerank" / "store"  # the DAG's default checkpoint root
    conf = pagerank_conf(root, output_path=str(default_store / "jobs" / "victim" / "checkpoints"))
    ok, log, tries = dags_test(env, "iterate_pagerank", conf)
    assert not ok and "overlaps the checkpoint root" in log and tries["epoch_0.run"] == 1, log[-3000:]
    assert not os.path.exists(default_store / "jobs"), "nothing written there"
    ok, log, _ = dags_test(env, "iterate_pagerank", pagerank_conf(root, take_over=True))
    assert not ok and "does not allow a run to take a job over" in log, log[-3000:]


def test_a_job_of_another_owner_is_not_continued(local, spark):
    env, root = local
    conf = pagerank_conf(root)
    lib = pagerank_config(root, conf["input_path"], checkpoint_root=conf["checkpoint_root"], max_epochs=2,
                          num_partitions=2, tolerance=0.0, output_path=conf["output_path"])
    IterationRunner(lib, spark).run(max_epochs_in_batch=1)  # the job started outside Airflow
    ok, log, tries = dags_test(env, "iterate_pagerank", conf)
    assert not ok and "job pr belongs to a run outside Airflow" in log and "dag_id None -> 'iterate_pagerank'" in log
    assert tries["epoch_0.run"] == 1
    assert CheckpointLog(LocalStore(conf["checkpoint_root"]), "pr").latest_id() == 0, "nothing committed"


def test_a_job_of_the_shared_store_of_earlier_versions_goes_on_where_the_deployer_allows(local):
    """The upgrade path of docs/configuration.md ("Each DAG's own directory"): a job in the
    shared store ``<local>/store`` goes on there when the deployment's roots allow it and the run
    names it; a run that leaves the default store starts the job anew in the DAG's own directory
    and its log says that the shared store holds a job of that id, and how to go on with it."""
    env, root = local  # ITERATIONS_ALLOWED_ROOTS is the local directory: the old places are allowed
    shared = root / "store"
    conf = pagerank_conf(root, checkpoint_root=str(shared), output_path=str(root / "output" / "pagerank" / "pr"),
                         max_epochs=4)  # two batches of two epochs
    ok, log, _ = dags_test(env, "iterate_pagerank", conf)
    old = CheckpointLog(LocalStore(str(shared)), "pr")
    assert ok and "starts anew" not in log and old.latest_id() == 1, log[-3000:]
    ok, log, _ = dags_test(env, "iterate_pagerank", conf)  # the same job goes on, in the shared store
    assert ok and old.latest_id() > 1, log[-3000:]
    done = old.latest_id()
    del conf["checkpoint_root"], conf["output_path"]
    ok, log, _ = dags_test(env, "iterate_pagerank", conf)
    own = root / "dags" / "iterate_pagerank" / "store"
    assert ok and f"job pr starts anew in {own}: the shared store {shared} of earlier versions holds a job pr" in log
    assert CheckpointLog(LocalStore(str(own)), "pr").latest_id() is not None, "a new job in the DAG's own store"
    assert old.latest_id() == done, "the old job untouched"


def test_the_determinism_audit_from_airflow_changes_nothing(local):
    """The ``verify_epoch`` param (docs/writing-a-body.md): a run of iterate_pagerank with it
    recomputes the job's epoch 1 in a scratch store on the DAG's Spark, logs ``verified: epoch 1
    identical``, computes no epoch, skips the rest of the run and leaves the job's store and
    outputs byte for byte as they were; given other params than the job's, it fails naming them."""
    from tests.integration.test_verify_epoch import tree_digest

    env, root = local
    conf = pagerank_conf(root)
    ok, log, _ = dags_test(env, "iterate_pagerank", conf)
    assert ok, log[-3000:]
    before = tree_digest(root)
    ok, log, tries = dags_test(env, "iterate_pagerank", {**conf, "verify_epoch": 1})
    assert ok and "verified: epoch 1 identical" in log, log[-3000:]
    assert list(tries) == ["epoch_0.run"], f"the audit's task only: {tries}"
    ok, log, _ = dags_test(env, "iterate_pagerank", {**conf, "verify_epoch": 1, "damping": 0.5})
    assert not ok and "body param damping 0.85 (committed) vs 0.5 (now)" in log, log[-3000:]
    assert tree_digest(root) == before, "the store and the outputs are left as they were"


def test_bad_input_fails_without_retries(local):
    env, root = local
    (root / "in").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": np.arange(6), "x": [1.0, 2.0, float("inf"), 4.0, 5.0, 6.0],
                  "y": [1.0] * 6}).to_parquet(root / "in" / "points.parquet")
    conf = {"job_id": "km", "input_path": str(root / "in" / "points.parquet"), "checkpoint_root": str(root / "ckpt"),
            "output_path": str(root / "out"), "max_epochs": 2, "num_partitions": 2, "k": 2, "continuation": False}
    ok, log, tries = dags_test(env, "iterate_kmeans", conf)
    assert not ok and "InputDataError" in log and "infinite values" in log and "id=2" in log, log[-3000:]
    assert tries["epoch_0.run"] == 1, f"one Spark attempt, not three: {tries}"


def test_the_stop_dag_keeps_to_the_allowed_roots_and_to_existing_jobs(local, tmp_path):
    env, root = local
    outside = tmp_path / "elsewhere" / "store"
    ok, log, _ = dags_test(env, "iterations_stop", {"job_id": "pr", "checkpoint_root": str(outside), "mode": "drain"})
    assert not ok and "outside the allowed roots" in log and not (tmp_path / "elsewhere").exists(), log[-3000:]
    missing = root / "no-store"
    ok, log, _ = dags_test(env, "iterations_stop", {"job_id": "pr", "checkpoint_root": str(missing), "mode": "drain"})
    assert not ok and "does not exist" in log and not missing.exists(), log[-3000:]
    (root / "ckpt").mkdir(parents=True)
    ok, log, _ = dags_test(env, "iterations_stop", {"job_id": "nobody", "checkpoint_root": str(root / "ckpt"),
                                                   "mode": "suspend"})
    assert not ok and "no job 'nobody'" in log and not os.listdir(root / "ckpt"), log[-3000:]


# --- locations: resolved once, owned (issue 45) -----------------------------------------------


def test_glob_list_or_escape_syntax_never_reaches_a_reader(local, tmp_path):
    """An input written in Hadoop glob syntax that would expand to a file outside the allowed
    roots (``{x,../../secret}``) is refused naming the character, before Spark sees it: the
    secret is never read, nothing is published."""
    env, root = local
    secret = write_edges(tmp_path / "secret" / "edges.csv", graph_with_dangling(5, 0.5, seed=9))
    (root / "in").mkdir(parents=True, exist_ok=True)
    assert os.path.realpath(root / "in" / ".." / ".." / "secret" / "edges.csv") == secret
    for hostile, char in ((f"{root}/in/{{x,../../secret}}/edges.csv", "'{'"), (f"{root}/in/*/edges.csv", "'*'"),
                          (f"{root}/in/a,{secret}", "','"), (f"{root}/in/%2e%2e/%2e%2e/secret/edges.csv", "'%'")):
        ok, log, tries = dags_test(env, "iterate_pagerank", pagerank_conf(root, input_path=hostile))
        assert not ok and f"contains the character {char}" in log and tries["epoch_0.run"] == 1, log[-3000:]
    assert not (root / "out").exists() and not (root / "ckpt").exists(), "nothing read, written or published"


def test_a_run_never_reaches_another_jobs_store_or_output(local):
    """The victim's run first; then runs that name the victim's store as their checkpoint root's
    parent, its state as their input, its output as their own, or a misspelt setting: each is
    refused by its first task naming what it would have reached; the victim's job is intact."""
    env, root = local
    victim = pagerank_conf(root, job_id="victim")
    ok, log, _ = dags_test(env, "iterate_pagerank", victim)
    assert ok, log[-3000:]
    store = LocalStore(victim["checkpoint_root"])
    before = {o.key: store.get(o.key) for o in store.list("jobs/victim/")}
    state = [o.key for o in store.list("jobs/victim/") if o.key.endswith(".parquet")][0]
    owner = json.loads((root / "out" / "_OWNER.json").read_text())["owner"]
    assert (owner["job_id"], owner["dag_id"]) == ("victim", "iterate_pagerank")
    for conf, says in (
            (pagerank_conf(root, job_id="intruder", checkpoint_root=f"{root}/ckpt/jobs/victim/checkpoints",
                           output_path=str(root / "out2")), "lies inside the checkpoint store"),
            (pagerank_conf(root, job_id="intruder", input_path=store.local_path(state), output_path=str(root / "out2"),
                           checkpoint_root=str(root / "ckpt2")), "lies inside the checkpoint store"),
            (pagerank_conf(root, job_id="intruder"), "belongs to job victim of the store"),
            ({**pagerank_conf(root, job_id="victim"), "tolerence": 0.1}, "'tolerence' (did you mean 'tolerance'?)")):
        ok, log, tries = dags_test(env, "iterate_pagerank", conf)
        assert not ok and says in log and tries["epoch_0.run"] == 1, log[-3000:]
    assert {o.key: store.get(o.key) for o in store.list("jobs/victim/")} == before, "the victim's job untouched"
    assert json.loads((root / "out" / "ranks" / "_PUBLISHED.json").read_text())["job_id"] == "victim"
    assert not [p for p in (root / "ckpt2").rglob("*") if p.is_file()], "nothing written in the intruder's store"
    assert not (root / "out2").exists()
    log_ = CheckpointLog(store, "victim")
    for cid in log_.checkpoint_ids():
        log_.load(cid, verify="full")
    ok, log, _ = dags_test(env, "iterate_pagerank", victim)
    assert ok and "job victim is TERMINATED" in log, log[-3000:]


def test_jobs_of_one_dag_publish_apart_by_default(local):
    """A run that leaves output_path at the DAG's default publishes under <default>/<job_id>."""
    env, root = local
    for job in ("first", "second"):
        conf = {k: v for k, v in pagerank_conf(root, job_id=job).items() if k != "output_path"}
        ok, log, _ = dags_test(env, "iterate_pagerank", conf)
        assert ok, log[-3000:]
    outputs = root / "dags" / "iterate_pagerank" / "output"  # the DAG's default output_path, in its own directory
    for job in ("first", "second"):
        assert json.loads((outputs / job / "ranks" / "_PUBLISHED.json").read_text())["job_id"] == job


def test_a_dag_run_reaches_no_other_dags_places_under_the_local_directory(airflow_env, tmp_path):
    """Each DAG keeps its store and outputs in its own directory under the embedded local
    directory, and a wider root (here the deployment's: the local directory as a whole) does not
    reach into another DAG's: a run of iterate_kmeans cannot read iterate_pagerank's published
    output (the refusal names the DAG and the output's owner) nor use its store, and a run of
    iterate_pagerank cannot publish into iterate_pagerank_reviewed's default output location;
    each is refused before any epoch runs, nothing written."""
    from include.publication.output_owners import OutputOwner, claim_output

    local = tmp_path / "local"
    env = {**airflow_env, "ITERATIONS_LOCAL_DIR": str(local), "ITERATIONS_ALLOWED_ROOTS": str(local),
           "ITERATIONS_EPOCHS_PER_BATCH": "2"}
    home = local / "dags" / "iterate_pagerank"
    ranks, store = home / "output" / "pr", home / "store"
    claim_output(LocalStore(ranks), OutputOwner(store=str(store), job_id="pr", dag_id="iterate_pagerank",
                                                body="pagerank"))
    ok, log, tries = dags_test(env, "iterate_kmeans", {"job_id": "km", "input_path": str(ranks / "ranks")})
    assert not ok and f"input_path '{ranks / 'ranks'}' lies in DAG iterate_pagerank's own directory {home}" in log, \
        log[-3000:]
    assert f"it is the output location {ranks} of job pr of the store {store} (DAG iterate_pagerank" in log
    assert tries["epoch_0.run"] == 1, tries
    ok, log, tries = dags_test(env, "iterate_kmeans", {"job_id": "km", "checkpoint_root": str(store)})
    assert not ok and f"checkpoint_root '{store}' lies in DAG iterate_pagerank's own directory" in log, log[-3000:]
    reviewed = local / "dags" / "iterate_pagerank_reviewed" / "output"
    ok, log, tries = dags_test(env, "iterate_pagerank", {"job_id": "pr2", "output_path": str(reviewed)})
    assert not ok and f"output_path '{reviewed}' lies in DAG iterate_pagerank_reviewed's own directory" in log, \
        log[-3000:]
    assert tries["epoch_0.run"] == 1, tries
    assert not store.exists() and not reviewed.exists() and not (local / "dags" / "iterate_kmeans").exists(), \
        "refused before anything was written"
