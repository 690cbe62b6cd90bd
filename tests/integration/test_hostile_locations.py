"""Hostile locations, generated (hypothesis), through the door every run's locations take
(include.store.door.admit_run, then the borders start_run checks) and then the real readers:
Spark's for an input that is admitted, the store's for a checkpoint root. Whatever the text (glob
and list syntax, ``..``, URI escapes, links, other stores, S3 prefixes that share a stem, both
spellings of a bucket), nothing outside the allowed root is read, and no other job's store is
entered or enclosed."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from include.contract.config import InputSpec
from include.errors import ConfigError, InputDataError
from include.store import STORE_MARKER, AllowedRoots, LocalStore, Location, open_store
from include.store.borders import check_input_borders, check_store_borders
from include.store.door import admit_run
from spark_jobs.storeio import read_input
from tests.helpers import write_edges

pytestmark = pytest.mark.spark

SECRET_NODES = 1_000_000  # every node id of the secret graph is at least this

FRAGMENTS = ["in", "edges.csv", "..", ".", "", "{x,../../secret}", "{in,..}", "{in,../..}", "*", "?", "[a-z]*",
             "in,", ",/", "%2e%2e", "%2F", "link", "dirlink", "store", "store/jobs/victim", "jobs", "~", " ", "\\",
             "#x", "a:b", "u@h", "secret", "../secret", "..%2F..", "in/../..", "\x00", "\n", "caf\u00e9", "x=1"]


#: places of the world that exist (admitted or not), so that many examples reach the real reader
EXISTING = ["in", "in/edges.csv", "link", "link/edges.csv", "dirlink", "dirlink/edges.csv", "store",
            "store/jobs/victim/attempts/0000000000/a/ranks", "store/jobs/victim/attempts/0000000000/a/ranks/part-00000.csv"]


def _texts(prefix: str):
    hostile = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(min_size=1, max_size=4)), min_size=1,
                       max_size=5).map(lambda parts: prefix + "/".join(parts))
    existing = st.tuples(st.sampled_from(EXISTING), st.sampled_from(["", "/", "/.", "/*", "{,/..}", "/../in"])) \
        .map(lambda t: prefix + t[0] + t[1])
    return st.one_of(hostile, existing)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """An allowed root holding an input, a link out of it, a directory with a link inside, and
    another job's store; a secret graph beside the root."""
    top = tmp_path_factory.mktemp("hostile")
    root = top / "allowed"
    write_edges(root / "in" / "edges.csv", _graph(0))
    secret = write_edges(top / "secret" / "edges.csv", _graph(SECRET_NODES))
    os.symlink(top / "secret", root / "link")
    (root / "dirlink").mkdir()
    os.symlink(secret, root / "dirlink" / "edges.csv")
    victim = LocalStore(root / "store")
    victim.put(STORE_MARKER, b'{"format": "iterations.store/1"}')
    victim.put("jobs/victim/owner.json", b"{}")
    victim.put("jobs/victim/attempts/0000000000/a/ranks/part-00000.csv", b"src,dst\n1,2\n")
    return top, root


def _graph(base: int):
    import networkx as nx

    g = nx.DiGraph()
    g.add_edges_from((base + i, base + (i * 7 + 3) % 11) for i in range(11))
    return g


def _admitted(text: str, name: str, root, checkpoint: str) -> dict | None:
    settings_ = {"job_id": "j", "input_path": str(root / "in" / "edges.csv"), "checkpoint_root": checkpoint,
                 name: text}
    try:
        return admit_run(settings_, AllowedRoots([str(root)]))
    except ConfigError:
        return None


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_an_admitted_input_reads_nothing_outside_the_root(spark, world, data):
    top, root = world
    text = data.draw(st.one_of(_texts(f"{root}/"), _texts(f"{root}/in/"), _texts("file://" + str(root) + "/")))
    checkpoint = str(root / "ckpt")
    admitted = _admitted(text, "input_path", root, checkpoint)
    if admitted is None:
        return
    location = Location.parse(admitted["input_path"])
    try:
        check_input_borders(location, Location.parse(checkpoint))
    except ConfigError:
        return
    real = os.path.realpath(location.path)
    assert real == location.path and real.startswith(str(root) + "/"), (text, real)
    assert not real.startswith(str(root / "store")), (text, real)
    if not os.path.exists(real):
        return
    try:
        rows = read_input(spark, InputSpec(admitted["input_path"], "csv"), 2).collect()
    except (InputDataError, ConfigError):
        return
    except Exception as e:  # Spark's own refusal to read a directory of nothing: nothing read either
        assert "secret" not in str(e), e
        return
    assert all(int(v) < SECRET_NODES for r in rows for v in r), (text, rows[:5])


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_an_admitted_checkpoint_root_neither_enters_nor_encloses_another_store(world, data):
    top, root = world
    text = data.draw(st.one_of(_texts(f"{root}/"), _texts(f"{root}/store/")))
    admitted = _admitted(text, "checkpoint_root", root, text)
    if admitted is None:
        return
    location = Location.parse(admitted["checkpoint_root"])
    victim = Location.parse(str(root / "store"))
    try:
        check_store_borders(LocalStore(location.path))  # as a run opens it, then checks it
    except ConfigError:
        return
    assert location == victim or not location.overlaps(victim), (text, location)


@pytest.mark.s3
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_s3_locations_keep_to_their_prefix_and_out_of_other_stores(s3_world, data):
    endpoint, bucket = s3_world
    text = data.draw(st.one_of(_texts(f"s3://{bucket}/"), _texts(f"s3a://{bucket}/"), _texts(f"s3://{bucket}/ckpt")))
    roots = AllowedRoots([f"s3://{bucket}"])
    victim = Location.parse(f"s3://{bucket}/ckpt")
    try:
        location = roots.admit("checkpoint_root", text)
    except ConfigError:
        return
    assert location.bucket == bucket
    try:  # as a checkpoint root
        check_store_borders(open_store(location.url, endpoint_url=endpoint))
        assert location == victim or not location.overlaps(victim), (text, location)
    except ConfigError:
        pass
    try:  # as an input
        check_input_borders(location, None, {"endpoint_url": endpoint})
        assert not location.overlaps(victim), (text, location)
    except ConfigError:
        pass


@pytest.fixture(scope="module")
def s3_world(moto_endpoint):
    import uuid

    import boto3

    bucket = f"hostile-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=f"ckpt/{STORE_MARKER}", Body=b'{"format": "iterations.store/1"}')
    s3.put_object(Bucket=bucket, Key="ckpt/jobs/victim/owner.json", Body=b"{}")
    s3.put_object(Bucket=bucket, Key="ckpt2/data.csv", Body=b"src,dst\n1,2\n")
    return moto_endpoint, bucket
