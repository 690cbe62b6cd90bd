"""A whole run under S3 faults: every S3 call of the job (driver and Spark workers) fails with a
probability of 7% before it is sent (500, 503, SlowDown, read time-out), and S3 accepts the
first checkpoint manifest write and its reply is lost. The run completes with the results of a
run without faults, each checkpoint is committed exactly once, and every object a kept
checkpoint references is there and intact."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from include.config import JobConfig
from include.runner import IterationRunner
from include.runtime import IterationJob
from include.store import S3Store
from tests.conftest import ROOT, S3_ENV
from tests.helpers import graph_with_dangling, ranks_of, write_edges

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]


def run_job_with_s3_faults(moto_endpoint, root, edges, job_id, seed, fault_log) -> subprocess.CompletedProcess:
    env = {**os.environ, **S3_ENV, "PYTHONPATH": ROOT, "PYSPARK_PYTHON": sys.executable,
           "ITERATIONS_S3_FAULTS": f"rate=0.07,seed={seed},lose_reply=/checkpoints/",
           "ITERATIONS_S3_FAULTS_LOG": str(fault_log)}
    env.pop("ITERATIONS_FAILPOINTS", None)
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.run_job", "--job-id", job_id, "--body", "pagerank", "--input", edges,
         "--checkpoint-root", root, "--endpoint-url", moto_endpoint, "--max-epochs", "4", "--tolerance", "0",
         "--num-partitions", "3", "--retain-last", "2"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("seed", [3])
def test_a_run_under_s3_faults_and_a_lost_commit_reply(spark, moto_endpoint, bucket, tmp_path, seed):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.1, seed=seed))
    reference = JobConfig(job_id="ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "ref"),
                          max_epochs=4, tolerance=0.0, num_partitions=3)
    expected = ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])

    root = f"s3://{bucket}/faults-{seed}"
    fault_log = tmp_path / "faults.log"
    done = run_job_with_s3_faults(moto_endpoint, root, edges, f"s3-faults-{seed}", seed, fault_log)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "TERMINATED" and summary["epochs_computed"] == [0, 1, 2, 3]

    faults = fault_log.read_text().splitlines()
    kinds = {line.split()[1] for line in faults}
    assert "lost-reply" in kinds and len(faults) >= 3, faults
    assert len({line.split()[0] for line in faults}) >= 2, "faults hit the Spark workers too, not only the driver"
    assert "transient error" in done.stderr, "the store retried"

    store = S3Store(bucket, f"faults-{seed}", endpoint_url=moto_endpoint)
    job = IterationJob(JobConfig(job_id=f"s3-faults-{seed}", body="pagerank", input=edges, checkpoint_root=root),
                       store, store_options={"endpoint_url": moto_endpoint})
    manifests = sorted(o.key.rsplit("/", 1)[-1] for o in store.list(f"{job.log.layout.root}/checkpoints/"))
    assert manifests == [f"{i:010d}.json" for i in range(5)], "checkpoints 0..4, each once, no gap"
    ids = job.log.checkpoint_ids()
    assert ids == [3, 4], "retention kept the last two"
    for cid in ids:
        manifest = job.log.load(cid, verify="full")  # every referenced object present, SHA-256 intact
        assert manifest.parent_id == cid - 1 and job.log.committed_by(cid) == manifest.attempt_id
    final = job.log.load(ids[-1], verify="full")
    from spark_jobs.storeio import read_dataset

    ours = ranks_of(read_dataset(spark, store, final.outputs["ranks"], 3))
    assert ours == expected, "the same ranks as a run without faults, bit for bit"
