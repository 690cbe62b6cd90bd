"""Forking a job (``fork_from``, include.runs.forks) through the library runner and run_job: a
new job starts from a verified copy of another job's committed checkpoint, with other params;
the parent is only read; refused forks say why before anything is written."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.errors import ConfigError, ForkRefused
from include.publication.outputs import published
from include.runs.forks import forks_of, read_fork
from include.runs.generations import seed
from include.runs.overview import job_overview
from include.runs.ownership import OwnershipError, claim, read_owner
from include.store import open_store
from spark_jobs import run_job
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, read_published, tree_digest, write_edges

pytestmark = pytest.mark.spark


def variable(store, job_id: str, checkpoint_id: int, name: str = "ranks") -> dict:
    """node -> value of a variable of a committed checkpoint, read with pyarrow (verified)."""
    import pyarrow.parquet as pq

    manifest = CheckpointLog(store, job_id).load(checkpoint_id, verify="full")
    table = {}
    for ref in manifest.variables[name].files:
        frame = pq.read_table(store.local_path(ref.key)).to_pandas()
        table.update(zip(frame["node"], frame["rank"]))
    return table


def pagerank_steps(graph, ranks: dict, damping: float, epochs: int) -> list[dict]:
    """``epochs`` PageRank epochs from ``ranks`` by numpy, as the body defines them (edges a
    set, dangling mass spread uniformly): the ranks after each."""
    nodes = sorted(ranks)
    index = {n: i for i, n in enumerate(nodes)}
    n = len(nodes)
    out_degree = np.zeros(n)
    edges = sorted(set(graph.edges()))
    for u, _ in edges:
        out_degree[index[u]] += 1
    r = np.array([ranks[v] for v in nodes])
    history = []
    for _ in range(epochs):
        contribution = np.zeros(n)
        for u, v in edges:
            contribution[index[v]] += r[index[u]] / out_degree[index[u]]
        dangling = r[out_degree == 0].sum()
        r = (1 - damping) / n + damping * (contribution + dangling / n)
        history.append(dict(zip(nodes, r)))
    return history


def test_a_fork_goes_on_from_its_parents_checkpoint_with_its_own_params(spark, tmp_path, capsys):
    graph = graph_with_dangling(30, 0.12, seed=5)
    edges = write_edges(tmp_path / "edges.csv", graph)
    store_root = tmp_path / "store"

    def config(job_id, damping, **kw):
        return pagerank_config(tmp_path, edges, job_id=job_id, tolerance=0.0,
                               output_path=str(tmp_path / "out" / job_id), body_params={"damping": damping},
                               retain_last=10, **{"max_epochs": 6, **kw})

    parent = IterationRunner(config("pr", 0.85), spark).run()
    assert parent.checkpoint_id == 6 and parent.decisions[-1].reason == "max epochs reached (6)"
    store = open_store(str(store_root))
    parent_files = tree_digest(store_root / "jobs" / "pr")

    fork = IterationRunner(config("pr-d60", 0.6, fork_from="pr:3"), spark)
    assert fork.job.forked_from == {"job_id": "pr", "checkpoint_id": 3, "epoch": 3}
    result = fork.run()
    assert result.restored_from == 3 and result.epochs_computed == [4, 5]
    assert result.decisions[-1].reason == "max epochs reached (6)"

    # epoch for epoch: 3 epochs at 0.85 (the parent's checkpoint 3), then 0.6 from there
    start = variable(store, "pr", 3)
    expected = pagerank_steps(graph, start, 0.6, 2)
    for epoch, want in zip((4, 5), expected):
        got = variable(store, "pr-d60", epoch)
        assert got.keys() == want.keys()
        assert max(abs(got[k] - want[k]) for k in want) < 1e-12, epoch
    assert abs(sum(expected[-1].values()) - 1) < 1e-9
    # ... and it is not the parent's own epoch 5 (at 0.85)
    assert max(abs(variable(store, "pr", 5)[k] - expected[-1][k]) for k in expected[-1]) > 1e-4

    # its own log, owner, output; the seed a verified copy in its own directory; the parent untouched
    seeded = CheckpointLog(store, "pr-d60").load(3, verify="full")
    assert all(f.key.startswith("jobs/pr-d60/") for f in seeded.objects)
    assert seeded.decision.terminated is False and seeded.head_state.status.value == "RUNNING"
    assert read_fork(store, "pr-d60") == {"job_id": "pr", "checkpoint_id": 3, "epoch": 3}
    assert read_owner(store, "pr-d60").output_path.endswith("/out/pr-d60")
    assert published(str(tmp_path / "out" / "pr-d60"), "ranks").job_id == "pr-d60"
    ranks = read_published(tmp_path / "out" / "pr-d60", "ranks")
    assert max(abs(r - expected[-1][n]) for n, r in zip(ranks["node"], ranks["rank"])) < 1e-12
    assert tree_digest(store_root / "jobs" / "pr") == parent_files, "the parent's store is only read"
    assert store.get("jobs/pr-d60/input.json") == store.get("jobs/pr/input.json"), "the parent's pinned input"

    # the plans, the asset events' extra and the lineage name the parent
    done = CheckpointLog(store, "pr-d60").load(6)
    records = fork.job.publisher.publications(done)
    assert records and all(r["extra"]["forked_from"] == {"job_id": "pr", "checkpoint_id": 3, "epoch": 3}
                           for r in records)
    from include.publication import job_lineage

    assert job_lineage(fork.job)["job"]["forkedFrom"] == {"job": "iterations.pr", "checkpointId": 3, "epoch": 3}
    unforked = IterationRunner(config("pr", 0.85), spark).job.publisher.publications(CheckpointLog(store, "pr").load(6))
    assert unforked and all("forked_from" not in r["extra"] for r in unforked)
    probe = IterationRunner(config("pr-plan", 0.5, fork_from="pr:2"), spark).job
    seed(probe)  # what a run does first, under its lease
    plan = probe.attempts.plan_epoch(run={"runner": "test"})
    assert (plan.epoch, plan.parent_id, plan.forked_from) == (3, 2, {"job_id": "pr", "checkpoint_id": 2, "epoch": 2})
    assert plan.first_of_fork and plan.parent_metrics == {}, "no previous__<metric> across two sets of params"
    assert json.loads(store.get(probe.log.layout.plan(3, plan.attempt_id)))["forked_from"]["job_id"] == "pr"

    # a fork from the job's newest epoch by run_job, with more epochs: it goes on from epoch 5
    assert run_job.main(["--job-id", "pr-more", "--body", "pagerank", "--input", edges, "--checkpoint-root",
                         str(store_root), "--num-partitions", "3", "--output-path", str(tmp_path / "out" / "pr-more"),
                         "--param", "damping=0.85", "--max-epochs", "8", "--tolerance", "0", "--fork-from", "pr"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["forked_from"] == {"job_id": "pr", "checkpoint_id": 5, "epoch": 5}
    assert summary["epochs_computed"] == [6, 7] and summary["restored_from"] == 5
    more = pagerank_steps(graph, variable(store, "pr", 5), 0.85, 2)[-1]
    assert max(abs(variable(store, "pr-more", 7)[k] - more[k]) for k in more) < 1e-12

    # a fork that ends at its parent's epoch by its own criteria only finishes
    short = IterationRunner(config("pr-short", 0.85, fork_from="pr:4", max_epochs=5), spark).run()
    assert short.epochs_computed == [] and short.status.value == "TERMINATED" and short.checkpoint_id == 5

    # the Iterations view: the parent lists its forks, each fork names its parent
    assert [f["job_id"] for f in forks_of(store, "pr")] == ["pr-d60", "pr-more", "pr-plan", "pr-short"]
    view = job_overview(store, "pr-d60")
    assert view.forked_from == {"job_id": "pr", "checkpoint_id": 3, "epoch": 3}
    from iterations.views.page import job_page

    html = job_page(view, str(store_root), "/iterations/")
    assert 'id="forked-from">a fork of <a href="/iterations/jobs/pr?' in html and "at epoch 3" in html
    html = job_page(job_overview(store, "pr"), str(store_root), "/iterations/")
    assert '<ul id="forks">' in html and "/iterations/jobs/pr-d60?" in html and "from epoch 3" in html

    # a relative the user may not see: a parent is not named, a fork not listed
    from iterations.views.app import visible_overview

    class Access:  # sees every job but pr and pr-more
        def visible(self, store, job_ids):
            return [j for j in job_ids if j not in ("pr", "pr-more")]

    hidden = visible_overview(Access(), store, "pr-d60", None)
    assert hidden.forked_from == {"job_id": None, "checkpoint_id": 3, "epoch": 3}
    assert "a fork of a job you may not see at epoch 3" in job_page(hidden, str(store_root), "/iterations/")
    assert [f["job_id"] for f in visible_overview(Access(), store, "pr", None).forks] == \
        ["pr-d60", "pr-plan", "pr-short"]

    # a later run of the fork goes on as the fork (with or without fork_from): it is done
    again = IterationRunner(config("pr-d60", 0.6), spark)
    assert again.job.forked_from["job_id"] == "pr" and again.run().epochs_computed == []
    with pytest.raises(ForkRefused, match="was forked from pr:3 already"):
        IterationRunner(config("pr-d60", 0.6, fork_from="pr:2"), spark)
    # rewinding a fork stays within its own epochs
    with pytest.raises(ConfigError, match="its own epochs start at 4"):
        IterationRunner(config("pr-d60", 0.6), spark, rewind_to=3)
    assert tree_digest(store_root / "jobs" / "pr") == parent_files


def test_refused_forks_say_why_before_anything_is_written(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(20, 0.15, seed=2))
    other_edges = write_edges(tmp_path / "other.csv", graph_with_dangling(20, 0.15, seed=3))

    def config(job_id, **kw):
        return pagerank_config(tmp_path, edges, job_id=job_id, tolerance=0.0, retain_last=2,
                               **{"body_params": {"damping": 0.85}, "max_epochs": 5, **kw})

    IterationRunner(config("pr"), spark).run()
    store = open_store(str(tmp_path / "store"))
    assert CheckpointLog(store, "pr").checkpoint_ids() == [4, 5]

    def refused(kind, match, **kw):
        before = sorted(o.key for o in store.list(""))
        with pytest.raises(kind, match=match):
            IterationRunner(config("fork", **kw), spark)
        assert sorted(o.key for o in store.list("")) == before, "nothing written"

    refused(ForkRefused, r"checkpoint 1 of job pr was retired by retention.*kept checkpoints of pr are \[4, 5\]",
            fork_from="pr:1")
    refused(ForkRefused, r"checkpoint 9 of job pr was never committed", fork_from="pr:9")
    refused(ForkRefused, r"checkpoint 5 of job pr is its final checkpoint \(after epoch 4\)", fork_from="pr:5")
    refused(ForkRefused, r"there is no job nope in the checkpoint store", fork_from="nope:1")
    refused(ForkRefused, r"was computed by body 'pagerank'; this job runs body 'components'",
            fork_from="pr:4", body="components", body_params={})
    refused(ForkRefused, r"job pr reads input .*edges.csv; this job names input .*other.csv",
            fork_from="pr:4", input=other_edges)
    with pytest.raises(ConfigError, match="names job pr itself"):
        config("pr", fork_from="pr:4")
    with pytest.raises(ConfigError, match="fork_from must be JOB or JOB:EPOCH"):
        config("fork", fork_from="pr:four")
    with pytest.raises(ConfigError, match="not a rewind of one"):
        IterationRunner(config("fork", fork_from="pr:4"), spark, rewind_to=2)

    # a job of a DAG is forked only by that DAG's runs (include.runs.forks.check_fork's borders)
    owner = read_owner(store, "pr")
    claim(store, "pr", dataclasses.replace(owner, dag_id="iterate_pagerank"), take_over=True)
    from include.runs.forks import check_fork

    with pytest.raises(OwnershipError, match="belongs to DAG iterate_pagerank; a run of DAG iterate_kmeans forks only"):
        check_fork(store, config("fork", fork_from="pr:4"), "iterate_kmeans")
    assert check_fork(store, config("fork", fork_from="pr:4"), "iterate_pagerank")["checkpoint_id"] == 4
    claim(store, "pr", owner, take_over=True)
    with pytest.raises(OwnershipError, match="belongs to a run outside Airflow"):
        check_fork(store, config("fork", fork_from="pr:4"), "iterate_pagerank")

    # a job with checkpoints is not forked into
    IterationRunner(config("busy", max_epochs=2), spark).run()
    with pytest.raises(ForkRefused, match=r"job busy exists already .*a fork starts a new job"):
        IterationRunner(config("busy", max_epochs=2, fork_from="pr:4"), spark)


def test_a_fork_whose_body_changes_a_variables_schema_is_refused_at_its_first_commit(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(20, 0.15, seed=4))
    marker = tmp_path / "fault-on"
    marker.write_text("")

    def config(job_id, at_epoch, **kw):
        params = {"damping": 0.85, "fault": "schema", "at_epoch": at_epoch, "while_exists": str(marker)}
        return pagerank_config(tmp_path, edges, job_id=job_id, body="tests.faulty_bodies:FaultyPageRank",
                               max_epochs=6, tolerance=0.0, body_params=params, retain_last=10,
                               checks={"enabled": False}, **kw)

    IterationRunner(config("pr", at_epoch=99), spark).run()  # the fault never on: ranks are doubles
    fork = IterationRunner(config("pr-float", at_epoch=3, fork_from="pr:2"), spark)
    with pytest.raises(ForkRefused, match=r"variable ranks: \(node int, rank double\) in the parent, "
                                          r"\(node int, rank float\) in the fork"):
        fork.run()
    log = CheckpointLog(open_store(str(tmp_path / "store")), "pr-float")
    assert log.latest_id() == 2, "only the copy of the parent's checkpoint"
    assert all(log.is_aborted(3, a) for a in log.attempt_ids(3))


def test_a_kmeans_fork_with_another_k_keeps_its_parents_centroids_and_picks_the_rest(spark, tmp_path):
    """k is one of the params a fork may change: the body makes the state fit (IterationBody.fork):
    the parent's centroids stay (the lowest cluster ids when k shrinks), k-means++ picks the new ones."""
    import pandas as pd

    from include.contract.config import JobConfig
    from tests.integration.test_kmeans import blobs

    blobs(tmp_path / "points.parquet", n=240, seed=4)

    def config(job_id, k, **kw):
        return JobConfig(job_id=job_id, body="kmeans", input=str(tmp_path / "points.parquet"),
                         checkpoint_root=str(tmp_path / "store"), body_params={"k": k, "seed": 3},
                         max_epochs=4, tolerance=0.0, num_partitions=2, retain_last=10, **kw)

    IterationRunner(config("km", 3), spark).run()
    store = open_store(str(tmp_path / "store"))

    def centroids(job_id, checkpoint_id):
        manifest = CheckpointLog(store, job_id).load(checkpoint_id, verify="full")
        frame = pd.concat(pd.read_parquet(store.local_path(f.key)) for f in manifest.variables["centroids"].files)
        return {int(i): list(c) for i, c in zip(frame["cluster_id"], frame["center"])}

    parent = centroids("km", 1)
    for k in (5, 2):
        result = IterationRunner(config(f"km-{k}", k, fork_from="km:1"), spark).run()
        assert result.epochs_computed == [2, 3] and result.status.value == "TERMINATED"
        assert len(centroids(f"km-{k}", 3)) == k, "the data checks' centroids_count (k centroids) passed"
        assert sorted(result.outputs["centroids"].toPandas()["cluster_id"]) == list(range(k))
    assert len(parent) == 3
