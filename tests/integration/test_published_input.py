"""A job whose input is another job's published output reads one version of it, through its
manifest, for the whole job: not the directory (which keeps older versions beside the current
one), and not a newer version published while the job runs."""

from __future__ import annotations

import os

import networkx as nx
import pytest

from include.checkpoints.head_state import HeadStatus
from include.contract.config import InputSpec
from include.store import LocalStore
from spark_jobs.runner import IterationRunner
from spark_jobs.storeio import read_input
from tests.helpers import pagerank_config, publish_edges, ranks_of

pytestmark = pytest.mark.spark

FIRST = nx.DiGraph([(1, 2), (2, 3), (3, 1), (3, 4), (4, 1), (5, 4)])
SECOND = nx.DiGraph([(1, 2), (2, 1), (3, 2)])


def test_read_input_reads_the_pinned_version_only(spark, tmp_path):
    graph = str(tmp_path / "graph")
    publish_edges(graph, FIRST, job="up", checkpoint=1, parts=3)
    manifest = publish_edges(graph, SECOND, job="up", checkpoint=2)
    assert len(os.listdir(os.path.join(graph, "edges"))) == 3, "both versions are kept beside the manifest"
    from include.publication.pinned_inputs import pin_input

    spec = pin_input(LocalStore(tmp_path / "store"), "job", InputSpec(os.path.join(graph, "edges")))
    rows = {(r["src"], r["dst"]) for r in read_input(spark, spec, 2).collect()}
    assert rows == set(SECOND.edges()) and spec.published["version"] == manifest["version"]


def test_a_job_reads_one_version_of_its_input_across_runs(spark, tmp_path):
    """The graphs' node sets tell the versions apart: 1-5 in the first, 1-3 in the second."""
    graph = str(tmp_path / "graph")
    publish_edges(graph, FIRST, job="up", checkpoint=1)
    config = pagerank_config(tmp_path, os.path.join(graph, "edges"), job_id="pr-pinned", tolerance=0, max_epochs=4)
    first = IterationRunner(config, spark).run(max_epochs_in_batch=2)
    assert first.status is HeadStatus.RUNNING
    publish_edges(graph, SECOND, job="up", checkpoint=2)  # the upstream publishes while the job runs
    done = IterationRunner(config, spark).run()  # a new process, as the next batch of a DAG is
    assert done.status is HeadStatus.TERMINATED
    ours = ranks_of(done.outputs["ranks"])
    assert set(ours) == set(FIRST.nodes) and sum(ours.values()) == pytest.approx(1.0)

    later = pagerank_config(tmp_path, os.path.join(graph, "edges"), job_id="pr-later", tolerance=0, max_epochs=2)
    again = IterationRunner(later, spark).run()
    assert set(ranks_of(again.outputs["ranks"])) == set(SECOND.nodes), "a new job reads the current version"


@pytest.mark.s3
def test_on_s3_the_pinned_version_is_read_object_by_object(spark, tmp_path, moto_endpoint, bucket):
    """The same over a real HTTP S3 endpoint: the version's objects, each checked to be there with
    its size first; a version deleted since the pin is named, not read half."""
    import boto3

    from include.errors import InputDataError
    from include.publication.pinned_inputs import pin_input
    from include.store import open_store

    graph = str(tmp_path / "graph")
    publish_edges(graph, FIRST, job="up", checkpoint=1)
    publish_edges(graph, SECOND, job="up", checkpoint=2)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    for root, _, names in os.walk(os.path.join(graph, "edges")):
        for n in names:
            key = "graph/" + os.path.relpath(os.path.join(root, n), graph)
            s3.put_object(Bucket=bucket, Key=key, Body=open(os.path.join(root, n), "rb").read())
    options = {"endpoint_url": moto_endpoint}
    store = open_store(f"s3://{bucket}/ckpt", **options)
    spec = pin_input(store, "job", InputSpec(f"s3://{bucket}/graph/edges"), store_options=options)
    assert spec.published["version"] == "v-up-2"
    assert {(r["src"], r["dst"]) for r in read_input(spark, spec, 2, **options).collect()} == set(SECOND.edges())
    s3.delete_object(Bucket=bucket, Key=f"graph/edges/{spec.published['files'][1]['key']}")
    with pytest.raises(InputDataError, match="version v-up-2, .* no longer whole"):
        read_input(spark, spec, 2, **options)
