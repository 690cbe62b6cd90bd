"""Locations have owners and borders (include.store; docs/design.md, "Who may do what"), through the
library runner on real stores: no store inside another (either order, both spellings of an S3
bucket), a store's listings ignore what it did not write, no input inside a store, an output
belongs to the job that first published there, a manifest names only its own job's objects, a
rewind waits for the job's lease, and a damaged record is an error naming it."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.manifest import Manifest
from include.errors import CheckpointCorrupted, ConfigError
from include.publication.output_owners import OUTPUT_OWNER, OutputOwned
from include.runs.leases import Holder, JobLease
from include.runs.ownership import JobBusy
from include.store import LocalStore, LocationError, open_store
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, read_published, write_edges

pytestmark = pytest.mark.spark


@pytest.fixture
def edges(tmp_path):
    return write_edges(tmp_path / "in" / "edges.csv", graph_with_dangling(12, 0.25, seed=3))


def _files(store, prefix):
    return {o.key: store.get(o.key) for o in store.list(prefix)}


def test_a_store_inside_another_is_refused_whichever_came_first(spark, tmp_path, edges):
    """Victim first: a checkpoint root inside its store (in its job's directory) is refused
    before anything is written, and the victim resumes as if nothing happened. Intruder first:
    a store made around an existing one is refused too."""
    victim = pagerank_config(tmp_path, edges, job_id="victim", max_epochs=2)
    IterationRunner(victim, spark).run(max_epochs_in_batch=1)
    store = LocalStore(victim.checkpoint_root)
    before = _files(store, "jobs/victim/")
    for inside in ("jobs/victim/checkpoints", "jobs", "jobs/victim", "other-dir"):
        intruder = pagerank_config(tmp_path, edges, job_id="intruder", max_epochs=2,
                                   checkpoint_root=str(tmp_path / "store" / inside))
        with pytest.raises(LocationError, match="lies inside the checkpoint store .*/store"):
            IterationRunner(intruder, spark).run()
    assert _files(store, "jobs/victim/") == before, "nothing of the victim was touched"
    assert IterationRunner(victim, spark).run().checkpoint_id == 2, "the victim resumes"

    # the other order: a store first at outer/inner, then one around it at outer
    first = pagerank_config(tmp_path, edges, job_id="first", max_epochs=1, checkpoint_root=str(tmp_path / "outer" / "inner"))
    IterationRunner(first, spark).run()
    around = pagerank_config(tmp_path, edges, job_id="around", max_epochs=1, checkpoint_root=str(tmp_path / "outer"))
    with pytest.raises(LocationError, match="contains the checkpoint store"):
        IterationRunner(around, spark).run()
    assert not (tmp_path / "outer" / "_iterations").exists(), "refused before the store was marked"


@pytest.mark.s3
def test_an_s3_store_inside_another_is_refused_in_either_spelling(spark, tmp_path, edges, moto_endpoint, bucket):
    opts = {"endpoint_url": moto_endpoint}
    victim = pagerank_config(tmp_path, edges, job_id="victim", max_epochs=1, checkpoint_root=f"s3://{bucket}/ckpt")
    IterationRunner(victim, spark, store_options=opts).run()
    store = open_store(f"s3://{bucket}/ckpt", **opts)
    before = _files(store, "jobs/victim/")
    for inside in (f"s3a://{bucket}/ckpt/jobs/victim", f"s3://{bucket}/ckpt/jobs/victim/checkpoints"):
        intruder = pagerank_config(tmp_path, edges, job_id="intruder", max_epochs=1, checkpoint_root=inside)
        with pytest.raises(LocationError, match=f"lies inside the checkpoint store s3://{bucket}/ckpt"):
            IterationRunner(intruder, spark, store_options=opts).run()
    # a prefix that only shares a stem is another place: it runs, the victim is untouched
    beside = pagerank_config(tmp_path, edges, job_id="victim", max_epochs=1, checkpoint_root=f"s3://{bucket}/ckpt2")
    assert IterationRunner(beside, spark, store_options=opts).run().checkpoint_id == 1
    assert _files(store, "jobs/victim/") == before


def test_keys_a_store_did_not_write_are_ignored_and_reported(spark, tmp_path, edges, caplog):
    """Foreign files in a job's directory (under aborted/, checkpoints/, attempts/, batches/,
    checks/) neither fail its listings nor its garbage collection, nor are they deleted."""
    cfg = pagerank_config(tmp_path, edges, job_id="pr", max_epochs=2, retain_last=1)
    IterationRunner(cfg, spark).run(max_epochs_in_batch=1)
    store = LocalStore(cfg.checkpoint_root)
    foreign = {"jobs/pr/aborted/garbage": b"x", "jobs/pr/aborted/0000000000": b"x",
               "jobs/pr/checkpoints/7.json": b"{}", "jobs/pr/checkpoints/0000000009.json.bak": b"{}",
               "jobs/pr/attempts/junk": b"x", "jobs/pr/attempts/00000000zz/a/b": b"x",
               "jobs/pr/batches/notes.txt": b"x", "jobs/pr/checks/x": b"x", "jobs/pr/savepoints/7": b"x"}
    for key, data in foreign.items():
        store.put(key, data)
    with caplog.at_level(logging.WARNING, logger="iterations"):
        result = IterationRunner(cfg, spark).run()
    assert result.checkpoint_id == 2 and result.status.value == "TERMINATED"
    assert CheckpointLog(store, "pr").checkpoint_ids()[-1] == 2
    assert {k: store.get(k) for k in foreign} == foreign, "never deleted: they are not the store's"
    assert "not an object the checkpoint store wrote" in caplog.text and "aborted/garbage" in caplog.text


def test_an_input_inside_a_store_is_refused(spark, tmp_path, edges):
    victim = pagerank_config(tmp_path, edges, job_id="victim", max_epochs=1, checkpoint_root=str(tmp_path / "v" / "store"))
    IterationRunner(victim, spark).run()
    store = LocalStore(victim.checkpoint_root)
    state = [o.key for o in store.list("jobs/victim/attempts/") if o.key.endswith(".parquet")][0]
    for source, says in ((store.local_path(state), "lies inside the checkpoint store"),
                         (str(tmp_path / "v"), "holds checkpoint data"),
                         (str(tmp_path / "intruder-store" / "x.csv"), "overlaps the checkpoint root")):
        intruder = pagerank_config(tmp_path, source, job_id="intruder", max_epochs=1,
                                   checkpoint_root=str(tmp_path / "intruder-store"))
        with pytest.raises(LocationError, match=says):
            IterationRunner(intruder, spark).run()
    assert not LocalStore(tmp_path / "intruder-store").exists("jobs/intruder/owner.json"), "refused before claiming"


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_an_output_belongs_to_the_job_that_first_published_there(spark, tmp_path, edges, fmt):
    out = str(tmp_path / "o" / "out")
    victim = pagerank_config(tmp_path, edges, job_id="victim", max_epochs=1, output_path=out, output_format=fmt)
    IterationRunner(victim, spark).run()
    owner = json.loads((tmp_path / "o" / "out" / OUTPUT_OWNER).read_text())["owner"]
    assert (owner["job_id"], owner["dag_id"], owner["store"]) == ("victim", None, str(tmp_path / "store"))
    published = sorted(p.name for p in (tmp_path / "o" / "out" / "ranks").iterdir())
    for job, store in (("intruder", "store"), ("intruder", "elsewhere")):
        intruder = pagerank_config(tmp_path, edges, job_id=job, max_epochs=2, output_path=out, output_format=fmt,
                                   checkpoint_root=str(tmp_path / store))
        with pytest.raises(OutputOwned, match="belongs to job victim of the store .*this run publishes as job intruder"):
            IterationRunner(intruder, spark).run()
        assert CheckpointLog(LocalStore(tmp_path / store), job).latest_id() is None, "refused before any work"
    assert sorted(p.name for p in (tmp_path / "o" / "out" / "ranks").iterdir()) == published, "nothing replaced"
    if fmt == "parquet":
        assert read_published(out, "ranks").shape[0] > 0
    # nested either way: inside the victim's location, or around it
    for where in (str(tmp_path / "o" / "out" / "sub"), str(tmp_path / "o")):
        nested = pagerank_config(tmp_path, edges, job_id="nested", max_epochs=1, output_path=where,
                                 output_format=fmt, checkpoint_root=str(tmp_path / "nested-store"))
        with pytest.raises(OutputOwned, match="output location"):
            IterationRunner(nested, spark).run()
    # the explicit take-over
    taker = pagerank_config(tmp_path, edges, job_id="taker", max_epochs=1, output_path=out, output_format=fmt)
    IterationRunner(taker, spark, take_over=True).run()
    record = json.loads((tmp_path / "o" / "out" / OUTPUT_OWNER).read_text())
    assert record["owner"]["job_id"] == "taker" and record["previous"][-1]["job_id"] == "victim"


def test_a_manifest_naming_another_jobs_objects_is_refused(spark, tmp_path, edges):
    victim = pagerank_config(tmp_path, edges, job_id="victim", max_epochs=3)
    IterationRunner(victim, spark).run(max_epochs_in_batch=1)
    intruder = pagerank_config(tmp_path, edges, job_id="intruder", max_epochs=3)
    IterationRunner(intruder, spark).run(max_epochs_in_batch=1)
    store = LocalStore(victim.checkpoint_root)
    log = CheckpointLog(store, "intruder")
    key = log.layout.checkpoint(0)
    d = json.loads(store.get(key))
    d.pop("manifest_sha256")
    d["variables"] = json.loads(store.get(CheckpointLog(store, "victim").layout.checkpoint(0)))["variables"]
    store.put(key, _resealed(d))
    assert Manifest.from_bytes(store.get(key), key).variables, "a manifest in good shape, only not its own"
    with pytest.raises(CheckpointCorrupted, match="names objects outside job intruder's directory"):
        IterationRunner(intruder, spark).run()
    assert log.latest_id() == 0, "no epoch computed on another job's state"


def _resealed(d: dict) -> bytes:
    """A manifest body with its own checksum made again (what a forger would do)."""
    import hashlib

    canonical = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return json.dumps({**d, "manifest_sha256": hashlib.sha256(canonical.encode()).hexdigest()}).encode()


def test_a_rewind_waits_for_the_run_that_holds_the_job(spark, tmp_path, edges):
    cfg = pagerank_config(tmp_path, edges, job_id="pr", max_epochs=2)
    IterationRunner(cfg, spark).run()
    store = LocalStore(cfg.checkpoint_root)
    other = JobLease(store, "pr").acquire(Holder("process", host="other-host", pid=7, nonce="n"))
    with pytest.raises(JobBusy, match="job pr is being run by process 7 on other-host"):
        IterationRunner(cfg, spark, rewind_to=1)
    assert not store.list("lineages/pr/generations/"), "no generation was started"
    threading.Timer(1.0, other.release).start()
    runner = IterationRunner(cfg, spark, rewind_to=1, lease_wait=60)
    assert runner.config.job_id == "pr.r1" and runner.run().checkpoint_id == 2


def test_a_damaged_record_is_an_error_naming_it(spark, tmp_path, edges):
    from include.runs.overview import job_overview

    cfg = pagerank_config(tmp_path, edges, job_id="pr", max_epochs=1)
    IterationRunner(cfg, spark).run(batch_id="b1")
    store = LocalStore(cfg.checkpoint_root)
    key = [o.key for o in store.list("jobs/pr/batches/")][0]
    store.put(key, json.dumps({"final_checkpoint_id": 1}).encode())  # the batch id missing
    with pytest.raises(CheckpointCorrupted, match=f"{key}.* is not a batch record: it has no 'batch_id'"):
        job_overview(store, "pr")
    with pytest.raises(CheckpointCorrupted, match="is not a batch record"):
        CheckpointLog(store, "pr").retention.collect_garbage(1)
    with pytest.raises(ConfigError):  # and the library refuses a location outside the grammar
        pagerank_config(tmp_path, str(tmp_path / "in" / "{edges,x}.csv"))
