"""Pinned inputs (include.publication.pinned_inputs, DESIGN invariant 8) through the library runner: a job reads
exactly the files its log's first plan pinned; an input rewritten in place between batches, with
the same size and modification time, is refused before any Spark work, naming the file; with
``on_input_change=restart`` a new generation computes, from epoch 0, what a failure-free run on
the new input computes. (The DAG's param: tests/dags/test_dags_run.py; S3 and the published
versions: tests/unit/publication/test_pinned_inputs.py.)"""

from __future__ import annotations

import os

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.errors import InputChanged
from include.runs.generations import Lineage
from include.runs.overview import job_overview
from include.store import open_store
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, read_published, write_edges

pytestmark = pytest.mark.spark


def ranks(out):
    frame = read_published(out, "ranks")
    return dict(zip(frame["node"], frame["rank"]))


def reverse_one_edge(path) -> str:
    """Rewrite the edge list in place with one edge reversed (the same bytes, other order: the
    same size) and its modification time put back; the edge that was reversed."""
    st = os.stat(path)
    lines = open(path).read().splitlines()
    edges = {tuple(line.split(",")) for line in lines[1:]}
    i = next(i for i, line in enumerate(lines[1:], 1)
             if tuple(reversed(line.split(","))) not in edges and line.split(",")[0] != line.split(",")[1])
    u, v = lines[i].split(",")
    lines[i] = f"{v},{u}"
    with open(path, "r+") as f:
        f.write("\n".join(lines) + "\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    return f"{u},{v}"


def test_an_input_rewritten_between_batches_is_refused_and_restart_recomputes_on_the_new_one(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.12, seed=5))

    def config(root, path, out):
        return pagerank_config(tmp_path, path, checkpoint_root=str(tmp_path / root), max_epochs=4, tolerance=0.0,
                               output_path=str(tmp_path / out))

    # the failure-free runs, on the input as it was and as it will be
    before = IterationRunner(config("ref-before", edges, "out-before"), spark).run()
    changed_copy = write_edges(tmp_path / "changed" / "edges.csv", graph_with_dangling(30, 0.12, seed=5))
    reversed_edge = reverse_one_edge(changed_copy)
    IterationRunner(config("ref-after", changed_copy, "out-after"), spark).run()

    # a resume with the input untouched goes on as the failure-free run does
    first = IterationRunner(config("store", edges, "out"), spark).run(max_epochs_in_batch=2)
    assert first.epochs_computed == [0, 1]
    second = IterationRunner(config("store", edges, "out"), spark).run(max_epochs_in_batch=1)
    assert second.epochs_computed == [2]
    assert second.decisions[0].metrics == before.decisions[2].metrics

    # rewritten with the same size and time: only the content tells, and the next batch is refused
    assert reverse_one_edge(edges) == reversed_edge
    store = open_store(str(tmp_path / "store"))
    keys = sorted(o.key for o in store.list("jobs/pr/") if "/lease" not in o.key)
    with pytest.raises(InputChanged) as refused:
        IterationRunner(config("store", edges, "out"), spark).run()
    message = str(refused.value)
    assert f"{edges} was rewritten (same size and modification time)" in message
    assert "rewind_to=0" in message and "on_input_change=restart" in message
    assert sorted(o.key for o in store.list("jobs/pr/") if "/lease" not in o.key) == keys, \
        "refused before any attempt was planned"
    assert CheckpointLog(store, "pr").latest_id() == 2 and not (tmp_path / "out").exists()

    # restart: a new generation from epoch 0 on the new input, what the failure-free run on it gives
    restarted = IterationRunner(config("store", edges, "out"), spark, on_input_change="restart")
    assert restarted.config.job_id == "pr.r1"
    result = restarted.run()
    assert result.epochs_computed == [0, 1, 2, 3]
    assert ranks(tmp_path / "out") == ranks(tmp_path / "out-after") != ranks(tmp_path / "out-before")
    record = Lineage.of_job(store, "pr").record("pr.r1")
    assert record["rewound_from"] == {"job_id": "pr", "epoch": 0}
    assert record["restarted"]["reason"] == "input changed" and edges in record["restarted"]["changes"][0]
    generations = job_overview(store, "pr.r1").generations
    assert [g.job_id for g in generations] == ["pr", "pr.r1"]
    assert generations[1].restarted.startswith(f"input changed: {edges} was rewritten")
    from iterations.views.page import job_page

    html = job_page(job_overview(store, "pr.r1"), str(tmp_path / "store"), "/iterations/")
    assert "from epoch 0 of pr · restarted: input changed: " in html and "was rewritten (same size" in html
    # with the input as the new generation pinned it, a later run with restart goes on with it
    assert IterationRunner(config("store", edges, "out"), spark, on_input_change="restart").config.job_id == "pr.r1"
