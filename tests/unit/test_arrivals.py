"""What arrived (include.arrivals): a published input is read at one version for a log's whole
life, and an asset event's extra is read as untrusted."""

from __future__ import annotations

import json
import logging
import os
import threading

import networkx as nx
import pytest

from include.arrivals import arrival, check_still_there, describe, pin_input
from include.config import InputSpec
from include.errors import ConfigError, InputDataError
from include.schemas import DamagedRecord
from include.store import LocalStore
from tests.helpers import publish_edges

CYCLE = nx.DiGraph([(i, (i + 1) % 6) for i in range(6)])


@pytest.fixture
def graph_dir(tmp_path):
    return str(tmp_path / "graph")


def test_an_events_extra_is_read_field_by_field():
    """Only the fields a finish writes, of their shapes; every other key named, never used."""
    a = arrival("file:///g/edges", {"job_id": "up", "checkpoint_id": 4, "version": "v-up-4", "rows": 12,
                                    "format": "parquet", "replaces": None, "files": ["/etc/passwd"],
                                    "rows_": 1, "checkpoint_id_": True},
                source="upstream/run_1/finish", at="2026-01-01T00:00:00+00:00")
    assert a == {"uri": "file:///g/edges", "source": "upstream/run_1/finish", "at": "2026-01-01T00:00:00+00:00",
                 "job_id": "up", "checkpoint_id": 4, "version": "v-up-4", "rows": 12, "format": "parquet",
                 "replaces": None, "ignored": ["checkpoint_id_", "files", "rows_"]}
    hostile = arrival("s3://b/x" + "y" * 5000, {"version": "../../etc", "checkpoint_id": True, "rows": -1,
                                                "job_id": "a/b", "format": "exe"}, source=None, at=None)
    assert set(hostile) == {"uri", "source", "at", "ignored"} and len(hostile["uri"]) == 1024
    assert hostile["ignored"] == ["checkpoint_id", "format", "job_id", "rows", "version"]
    assert arrival("file:///x", "not a mapping")["uri"] == "file:///x"
    assert "no version named" in describe(hostile) and "keys not read" in describe(hostile)


def test_a_log_reads_the_version_current_at_its_first_epoch_for_good(tmp_path, graph_dir):
    store = LocalStore(tmp_path / "store")
    first = publish_edges(graph_dir, CYCLE, job="up", checkpoint=1)
    spec = InputSpec(os.path.join(graph_dir, "edges"))
    pinned = pin_input(store, "job", spec)
    assert pinned.published["version"] == first["version"] == "v-up-1"
    assert [f["key"] for f in pinned.published["files"]] == ["v-up-1/part-00000.parquet", "v-up-1/part-00001.parquet"]
    assert pinned.path == spec.path and spec.published is None
    publish_edges(graph_dir, nx.DiGraph([(0, 1)]), job="up", checkpoint=2)  # the upstream publishes again
    assert pin_input(store, "job", spec).published == pinned.published, "the same log reads the same version"
    assert pin_input(store, "job.r1", spec).published["version"] == "v-up-2", "a new log reads the current one"
    record = json.loads(store.get("jobs/job/input.json"))
    assert record["uri"] == f"file://{os.path.join(graph_dir, 'edges')}" and record["rows"] == 6


def test_an_input_that_is_not_a_published_output_is_read_as_it_is(tmp_path):
    store = LocalStore(tmp_path / "store")
    plain = tmp_path / "edges.csv"
    plain.write_text("src,dst\n1,2\n")
    spec = InputSpec(str(plain))
    assert pin_input(store, "job", spec) is spec
    missing = InputSpec(str(tmp_path / "nothing" / "here"))
    assert pin_input(store, "job", missing) is missing
    assert not (tmp_path / "nothing").exists(), "looking for a manifest creates nothing"
    assert store.list("jobs/") == []


def test_tasks_pinning_at_once_all_read_the_first_record(tmp_path, graph_dir):
    """Single winner (exclusive create): whatever the upstream publishes meanwhile, every task
    of the log reads the version the one record names."""
    store = LocalStore(tmp_path / "store")
    publish_edges(graph_dir, CYCLE, job="up", checkpoint=1)
    spec = InputSpec(os.path.join(graph_dir, "edges"))
    got, start = [], threading.Barrier(6)

    def task(i: int) -> None:
        start.wait()
        if i == 3:
            publish_edges(graph_dir, CYCLE, job="up", checkpoint=2)
        got.append(pin_input(store, "job", spec).published["version"])

    threads = [threading.Thread(target=task, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 6 and len(set(got)) == 1
    assert json.loads(store.get("jobs/job/input.json"))["version"] == got[0]


def test_a_pin_of_another_input_or_a_forged_one_is_refused(tmp_path, graph_dir):
    store = LocalStore(tmp_path / "store")
    publish_edges(graph_dir, CYCLE, job="up", checkpoint=1)
    publish_edges(str(tmp_path / "other"), CYCLE, job="up", checkpoint=1)
    pin_input(store, "job", InputSpec(os.path.join(graph_dir, "edges")))
    with pytest.raises(ConfigError, match="this run names input file://.*/other/edges: use another job_id"):
        pin_input(store, "job", InputSpec(str(tmp_path / "other" / "edges")))
    record = json.loads(store.get("jobs/job/input.json"))
    for forged in ({"files": [{**record["files"][0], "key": "../../secrets/part-00000.parquet"}]},
                   {"files": [{**record["files"][0], "key": "v-other-9/part-00000.parquet"}]},
                   {"version": "not a version"}, {"checkpoint_id": "7"}):
        store.put("jobs/job/input.json", json.dumps({**record, **forged}).encode())
        with pytest.raises((ConfigError, DamagedRecord)):
            pin_input(store, "job", InputSpec(os.path.join(graph_dir, "edges")))
    with pytest.raises(ConfigError, match="is a published output .* not 'csv'"):
        pin_input(store, "job2", InputSpec(os.path.join(graph_dir, "edges"), "csv"))
    with pytest.raises(ConfigError, match="part-NNNNN.parquet"):  # a plan's spec is checked as it is read
        InputSpec.from_dict({"path": os.path.join(graph_dir, "edges"), "format": "parquet",
                             "published": {**record, "files": [{"key": "/etc/passwd", "size": 1}]}})


def test_a_version_that_is_gone_is_named(tmp_path, graph_dir):
    store = LocalStore(tmp_path / "store")
    publish_edges(graph_dir, CYCLE, job="up", checkpoint=1)
    spec = pin_input(store, "job", InputSpec(os.path.join(graph_dir, "edges")))
    sizes = [f["size"] for f in spec.published["files"]]
    check_still_there(spec, sizes)
    with pytest.raises(InputDataError, match=r"version v-up-1, .* is no longer whole \(1 of 2 files missing"):
        check_still_there(spec, [sizes[0], None])


def test_the_event_that_started_a_run_and_a_newer_version(tmp_path, graph_dir, caplog):
    """The run reads the current version; the event's older version is said in the log, and
    what arrived is recorded beside the pin."""
    store = LocalStore(tmp_path / "store")
    publish_edges(graph_dir, CYCLE, job="up", checkpoint=1)
    publish_edges(graph_dir, CYCLE, job="up", checkpoint=2)
    uri = f"file://{os.path.join(graph_dir, 'edges')}"
    arrived = [arrival(uri, {"version": "v-up-1", "job_id": "up", "checkpoint_id": 1}, source="api", at="t")]
    with caplog.at_level(logging.WARNING, logger="iterations"):
        spec = pin_input(store, "job", InputSpec(os.path.join(graph_dir, "edges")), arrivals=arrived)
    assert spec.published["version"] == "v-up-2"
    assert "names version v-up-1" in caplog.text and "reading v-up-2" in caplog.text
    assert json.loads(store.get("jobs/job/input.json"))["arrived"] == arrived


def test_a_spec_without_a_pin_keeps_its_recorded_form(tmp_path):
    """A job's owner record holds its input spec: the form without a pin is the earlier one."""
    spec = InputSpec(str(tmp_path / "edges.csv"))
    assert spec.to_dict() == {"path": str(tmp_path / "edges.csv"), "format": "csv", "options": {}}
    assert InputSpec.from_dict(spec.to_dict()) == spec


def test_a_damaged_manifest_at_the_input_is_refused_not_read_around(tmp_path, graph_dir):
    """An input whose _PUBLISHED.json is not a valid manifest is not taken for a plain directory
    (which would read every version in it): the first epoch fails naming the manifest."""
    store = LocalStore(tmp_path / "store")
    publish_edges(graph_dir, CYCLE, job="up", checkpoint=1)
    with open(os.path.join(graph_dir, "edges", "_PUBLISHED.json"), "w") as f:
        f.write('{"format": "iterations.published/1"}')
    with pytest.raises(DamagedRecord, match="_PUBLISHED.json is not a publication manifest"):
        pin_input(store, "job", InputSpec(os.path.join(graph_dir, "edges")))
    assert store.list("jobs/") == []
