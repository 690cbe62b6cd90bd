"""Recomputing a job from an epoch (``rewind_to``, include.runs.generations) through the library
runner: a new generation starts from a verified copy of checkpoint k-1, computes epochs k..,
and replaces the outputs when it ends; the rewound generation stays readable and can no longer
publish."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.errors import CheckpointCorrupted, CheckpointError, ConfigError
from include.publication.outputs import published
from include.runs.generations import Lineage, attach, job_options, retire
from include.runs.leases import Holder, JobLease
from include.runs.overview import job_overview
from include.runs.ownership import JobBusy, JobOwner, OwnershipError, claim, owner_key, read_owner
from include.store import open_store
from spark_jobs.runner import IterationRunner
from tests.conftest import ROOT
from tests.helpers import graph_with_dangling, pagerank_config, read_published, write_edges

pytestmark = pytest.mark.spark


def ranks(out):
    frame = read_published(out, "ranks")
    return dict(zip(frame["node"], frame["rank"]))


def test_a_rewound_job_recomputes_from_the_epoch_and_replaces_its_outputs(spark, tmp_path):
    """Rewound with the same parameters, the epochs are recomputed exactly (a fix, such as more
    epochs, is in tests/dags/test_dags_run.py::test_iterate_pagerank)."""
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.12, seed=11))
    out = tmp_path / "out"

    def config(damping, max_epochs=5):
        return pagerank_config(tmp_path, edges, max_epochs=max_epochs, tolerance=0.0, output_path=str(out),
                               body_params={"damping": damping}, retain_last=10)

    first = IterationRunner(config(0.85), spark).run()
    assert first.job_id == "pr" and first.checkpoint_id == 5
    store = open_store(str(tmp_path / "store"))
    old = CheckpointLog(store, "pr")
    before = ranks(out)

    # the same parameters from epoch 3: the epochs recomputed exactly, the outputs replaced
    same = IterationRunner(config(0.85), spark, rewind_to=3)
    assert same.config.job_id == "pr.r1"
    result = same.run()
    assert result.restored_from == 2 and result.epochs_computed == [3, 4]
    assert [d.metrics for d in result.decisions] == [old.load(e).decision.metrics for e in (3, 4)]
    seeded, original = CheckpointLog(store, "pr.r1").load(2, verify="full"), old.load(2)
    assert [f.sha256 for v in seeded.variables.values() for f in v.files] == \
        [f.sha256 for v in original.variables.values() for f in v.files]
    assert all(f.key.startswith("jobs/pr.r1/") for f in seeded.objects), "copied into the new generation"
    assert published(str(out), "ranks").job_id == "pr.r1"
    assert ranks(out) == before

    # a later run works on the newest generation: it is done
    again = IterationRunner(config(0.85), spark).run()
    assert again.job_id == "pr.r1" and again.epochs_computed == []

    # the rewound generations stay readable; they can no longer publish
    lineage = Lineage.of_job(store, "pr")
    assert lineage.generations() == ["pr", "pr.r1"]
    assert old.latest_id() == 5 and old.load(4, verify="full").decision is not None
    with pytest.raises(CheckpointError, match="generation pr was superseded by pr.r1"):
        job_options(lineage, "pr")["may_publish"]()
    job_options(lineage, "pr.r1")["may_publish"]()
    assert lineage.record("pr.r1")["rewound_from"] == {"job_id": "pr", "epoch": 3}

    # the Iterations view shows the generations on each of them
    for name in ("pr", "pr.r1"):
        view = job_overview(store, name)
        assert [(g.job_id, g.rewound_from, g.newest) for g in view.generations] == \
            [("pr", None, False), ("pr.r1", {"job_id": "pr", "epoch": 3}, True)]
    assert job_overview(store, "pr").status == "TERMINATED", "the rewound generation is readable as it was"
    from iterations.views.page import job_page

    html = job_page(job_overview(store, "pr"), str(tmp_path / "store"), "/iterations/")
    assert 'href="/iterations/jobs/pr.r1?' in html and "from epoch 3 of pr · <b>newest</b>" in html

    # Retiring the old generation deletes its log. Refused first, nothing deleted: the newest,
    # a name that is no generation, another owner, and while a run holds the old one's lease.
    def log_objects():  # the lease records change with every acquire
        return sorted(o.key for o in store.list("jobs/pr/") if not o.key.startswith("jobs/pr/lease/"))

    objects = log_objects()
    for name, match in (("pr.r1", "its newest is pr.r1"), ("pr.r9", "not an older generation"),
                        ("jobs/pr", "not an older generation"), (None, "not an older generation")):
        with pytest.raises(ConfigError, match=match):
            same.retire(name)
    with pytest.raises(OwnershipError, match="cannot retire"):
        same.retire("pr", dag_id="iterate_pagerank")  # the job is the library's, no DAG's
    owner = read_owner(store, "pr")
    with pytest.raises(OwnershipError, match="cannot retire"):
        retire(store, "pr", "pr", dataclasses.replace(owner, output_path=str(tmp_path / "elsewhere")))
    lease = JobLease(store, "pr").acquire(Holder.dag_run("iterate_pagerank", "old-run"))
    with pytest.raises(JobBusy, match="old-run"):
        same.retire("pr")
    JobLease(store, "pr").release(lease)
    assert log_objects() == objects
    lineage.fix_run("old-run", "pr")

    done = subprocess.run([sys.executable, "-m", "spark_jobs.run_job", "--job-id", "pr", "--body", "pagerank",
                           "--input", edges, "--checkpoint-root", str(tmp_path / "store"), "--output-path", str(out),
                           "--param", "damping=0.85", "--retire", "pr"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    doomed = [k for k in objects if k != owner_key("pr")]
    assert summary["retired"] == "pr" and summary["objects"] == len(doomed) > 20 and summary["bytes"] > 0
    left = {o.key for o in store.list("jobs/pr/")}
    assert left and all(k == owner_key("pr") or k.startswith("jobs/pr/lease/") for k in left), left
    assert lineage.retired() == {"pr"} and old.checkpoint_ids() == []
    assert ranks(out) == before and published(str(out), "ranks").job_id == "pr.r1", "the outputs are untouched"
    assert IterationRunner(config(0.85), spark).run().epochs_computed == [], "the newest goes on"
    with pytest.raises(ConfigError, match="run old-run works on generation pr of job pr, which was retired"):
        attach(store, "pr", "old-run", rewind_to=None, owner=owner)
    assert [(g.job_id, g.retired) for g in job_overview(store, "pr.r1").generations] == [("pr", True), ("pr.r1", False)]
    assert "<code>pr</code> · retired (its log deleted)" in job_page(job_overview(store, "pr.r1"),
                                                                     str(tmp_path / "store"), "/iterations/")


def test_a_rewind_is_refused_before_anything_is_written(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(12, 0.2, seed=3))
    config = pagerank_config(tmp_path, edges, max_epochs=2, tolerance=0.0, retain_last=5)
    IterationRunner(config, spark).run()
    store = open_store(str(tmp_path / "store"))

    def refused(error, match, cfg=config, **kw):
        with pytest.raises(error, match=match):
            IterationRunner(cfg, spark, **kw)
        assert not store.list("lineages/"), "nothing recorded"

    refused(ConfigError, r"rewind_to=3: checkpoint 2 of job pr is its final checkpoint; rewind to an epoch up to 2",
            rewind_to=3)
    refused(ConfigError, r"rewind_to=7: job pr has no kept checkpoint 6 .*\(kept: \[0, 1, 2\]\)", rewind_to=7)
    for bad in (-1, True, 1.5, "2"):
        refused(ConfigError, r"rewind_to must be an epoch number \(an integer >= 0\), got", rewind_to=bad)
    other = pagerank_config(tmp_path, str(tmp_path / "other.csv"), max_epochs=2, tolerance=0.0)
    refused(OwnershipError, r"job pr belongs to .* it cannot rewind the job", cfg=other, rewind_to=1)

    # a job already named like the next generation (another's) is skipped, never continued
    claim(store, "pr.r1", JobOwner(dag_id="someone_else", body="pagerank", input={"path": "x"}, output_path=None))
    # a damaged source checkpoint is refused when the copy reads it; nothing is committed
    rewound = IterationRunner(config, spark, rewind_to=2)
    assert rewound.config.job_id == "pr.r2"
    victim = CheckpointLog(store, "pr").load(1).variables["ranks"].files[0]
    path = tmp_path / "store" / victim.key
    path.write_bytes(path.read_bytes()[::-1])
    with pytest.raises(CheckpointCorrupted, match="fails its checksum"):
        rewound.run()
    assert CheckpointLog(store, "pr.r2").latest_id() is None
    assert json.loads(store.get("lineages/pr/generations/pr.r2.json"))["rewound_from"] == {"job_id": "pr", "epoch": 2}
