"""What arrived (include.publication.pinned_inputs): a published input is read at one version for a log's whole
life, and an asset event's extra is read as untrusted."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading

import networkx as nx
import pytest

from include.checkpoints.record_schemas import DamagedRecord
from include.contract.config import InputSpec
from include.errors import ConfigError, InputChanged, InputDataError
from include.publication.arrivals import arrival, describe
from include.publication.pinned_inputs import (
    check_input,
    check_still_there,
    input_changes,
    pin_input,
    pinned_input_changes,
)
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


def test_an_input_that_is_not_a_published_output_is_pinned_by_its_files(tmp_path):
    """Its first plan records every data file with size and SHA-256 (markers and hidden files
    left out, as Spark leaves them out); a missing input is refused and nothing is written."""
    store = LocalStore(tmp_path / "store")
    graph = tmp_path / "edges"
    (graph / "day=1").mkdir(parents=True)
    (graph / "day=1" / "part-0.csv").write_text("src,dst\n1,2\n")
    (graph / "part-1.csv").write_text("src,dst\n2,3\n")
    (graph / "_SUCCESS").write_text("")
    (graph / ".part-1.csv.crc").write_text("x")
    pinned = pin_input(store, "job", InputSpec(str(graph)))
    assert [f["key"] for f in pinned.files] == ["day=1/part-0.csv", "part-1.csv"]
    assert pinned.files[1]["sha256"] == hashlib.sha256(b"src,dst\n2,3\n").hexdigest()
    record = json.loads(store.get("jobs/job/input.json"))
    assert record["format"] == "iterations.input-files/1" and record["files"] == pinned.files
    assert pin_input(store, "job", InputSpec(str(graph))).files == pinned.files, "read back, the same pin"
    one = tmp_path / "one.csv"
    one.write_text("src,dst\n1,2\n")
    assert [f["key"] for f in pin_input(store, "single", InputSpec(str(one))).files] == [""]
    with pytest.raises(InputDataError, match="does not exist"):
        pin_input(store, "missing", InputSpec(str(tmp_path / "nothing" / "here")))
    assert not (tmp_path / "nothing").exists() and not store.exists("jobs/missing/input.json")


def _rewrite_keeping_size_and_time(path, text: str) -> None:
    """Rewrite a file in place with other bytes of the same length and put its modification
    time back: only its content identity tells."""
    st = os.stat(path)
    assert len(text.encode()) == st.st_size
    with open(path, "r+b") as f:
        f.write(text.encode())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size


def test_a_same_size_same_time_rewrite_is_refused_naming_the_file_and_the_ways_out(tmp_path):
    store = LocalStore(tmp_path / "store")
    graph = tmp_path / "edges"
    graph.mkdir()
    (graph / "a.csv").write_text("src,dst\n1,2\n")
    (graph / "b.csv").write_text("src,dst\n2,3\n")
    spec = pin_input(store, "job", InputSpec(str(graph)))
    check_input(spec, "job")  # untouched
    check_input(spec, "job", full=True)
    os.utime(graph / "a.csv")  # touched, the same bytes: the hash says it is the same file
    check_input(spec, "job")
    _rewrite_keeping_size_and_time(graph / "b.csv", "src,dst\n2,4\n")
    with pytest.raises(InputChanged) as refused:
        check_input(spec, "job")  # the cheap check: the change time moved, so the file is hashed
    message = str(refused.value)
    assert "b.csv was rewritten (same size and modification time)" in message and "a.csv" not in message
    assert "rewind_to=0" in message and "on_input_change=restart" in message and "job_id" in message
    assert input_changes(spec, full=True) == [f"{graph / 'b.csv'} was rewritten (same size and "
                                              "modification time): its SHA-256 is not the pinned one"]


def test_a_file_added_or_gone_is_a_change(tmp_path):
    store = LocalStore(tmp_path / "store")
    graph = tmp_path / "edges"
    graph.mkdir()
    (graph / "a.csv").write_text("src,dst\n1,2\n")
    spec = pin_input(store, "job", InputSpec(str(graph)))
    (graph / "b.csv").write_text("src,dst\n2,3\n")
    (graph / "_SUCCESS").write_text("")  # a marker is no data: not a change
    assert input_changes(spec) == [f"{graph / 'b.csv'} was added"]
    (graph / "a.csv").unlink()
    assert sorted(input_changes(spec)) == sorted([f"{graph / 'a.csv'} is gone",
                                                  f"{graph / 'b.csv'} was added"])


def test_a_same_size_rewrite_of_a_pinned_published_version_is_refused(tmp_path, graph_dir):
    """A published version's files carry the SHA-256 its publication recorded: a resume (the
    full check) hashes them."""
    store = LocalStore(tmp_path / "store")
    publish_edges(graph_dir, CYCLE, job="up", checkpoint=1)
    spec = pin_input(store, "job", InputSpec(os.path.join(graph_dir, "edges")))
    check_input(spec, "job", full=True)
    part = os.path.join(graph_dir, "edges", spec.published["files"][0]["key"])
    data = bytearray(open(part, "rb").read())
    data[-9] ^= 0xFF  # inside the footer's metadata: same size, other bytes
    st = os.stat(part)
    open(part, "wb").write(bytes(data))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
    check_input(spec, "job")  # the cheap check compares sizes
    with pytest.raises(InputDataError, match="SHA-256 is not the one its publication recorded"):
        check_input(spec, "job", full=True)


def test_a_pinned_files_record_read_back_is_checked_by_shape(tmp_path):
    store = LocalStore(tmp_path / "store")
    for files in ([{"key": "../../etc/passwd", "size": 1}], [{"key": "a.csv", "size": -1}], [],
                  [{"key": "a.csv", "size": 1, "sha256": "nothex"}], [{"key": "a*.csv", "size": 1}]):
        store.put("jobs/job/input.json", json.dumps({"format": "iterations.input-files/1", "uri": "file:///x",
                                                     "files": files}).encode())
        with pytest.raises(ConfigError, match="pinned files of the input"):
            pin_input(store, "job", InputSpec(str(tmp_path / "x")))


def test_an_s3_input_is_pinned_by_etags_and_read_only_as_pinned(moto_endpoint, bucket, tmp_path):
    """Same size, other bytes: the listing's ETag tells, and a read of the object by its pinned
    ETag (a conditional GET) is refused."""
    from include.store import open_store

    s3 = open_store(f"s3://{bucket}", endpoint_url=moto_endpoint)
    s3.put("in/a.csv", b"src,dst\n1,2\n")
    s3.put("in/b.csv", b"src,dst\n2,3\n")
    store = LocalStore(tmp_path / "store")
    options = {"endpoint_url": moto_endpoint}
    spec = pin_input(store, "job", InputSpec(f"s3://{bucket}/in"), store_options=options)
    assert [f["key"] for f in spec.files] == ["a.csv", "b.csv"] and all(f["etag"] for f in spec.files)
    check_input(spec, "job", options, full=True)
    s3.put("in/b.csv", b"src,dst\n2,4\n")
    with pytest.raises(InputChanged, match=r"b.csv was rewritten \(same size; ETag"):
        check_input(spec, "job", options)
    with pytest.raises(InputChanged, match="rewritten since it was pinned"):
        s3.get_matching("in/b.csv", spec.files[1]["etag"])
    assert s3.get_matching("in/a.csv", spec.files[0]["etag"]) == b"src,dst\n1,2\n"
    # what on_input_change=restart decides on (include.runs.generations.attach): the log's pin read back
    [change] = pinned_input_changes(store, "job", InputSpec(f"s3://{bucket}/in"), options)
    assert change.startswith(f"s3://{bucket}/in/b.csv was rewritten (same size; ETag")
    assert pinned_input_changes(store, "another-log", InputSpec(f"s3://{bucket}/in"), options) == [], "nothing pinned"


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


def test_an_events_claims_are_checked_against_the_inputs_manifest(graph_dir):
    """A forged event's well-shaped fields are claims: only an event of the run's input naming
    its current version is shown and recorded as what arrived, with the manifest's figures."""
    from include.publication.arrivals import CHECKED, check_arrivals
    from include.store import Location

    publish_edges(graph_dir, CYCLE, job="up", checkpoint=2)
    location = Location.parse(os.path.join(graph_dir, "edges"))
    uri = f"file://{location.path}"
    current = arrival(uri, {"version": "v-up-2", "job_id": "up", "checkpoint_id": 2, "rows": 999}, source="a")
    forged = arrival(uri, {"version": "v-evil-7", "job_id": "evil", "checkpoint_id": 7, "rows": 1}, source="b")
    elsewhere = arrival("file:///etc/other", {"version": "v-up-2", "job_id": "up"}, source="c")
    plain = arrival(uri, {}, source="d")
    got = check_arrivals([current, forged, elsewhere, plain], location)
    assert got[0]["checked"] == CHECKED and (got[0]["job_id"], got[0]["checkpoint_id"], got[0]["rows"]) == \
        ("up", 2, 6), "the manifest's figures, not the event's"
    assert "as the output's manifest says" in describe(got[0])
    assert got[1]["checked"] == "not the input's current version (v-up-2)" and "job_id" not in got[1]
    assert got[1]["claimed"] == {"job_id": "evil", "checkpoint_id": 7, "rows": 1}
    assert "the event's claim, not borne out" in describe(got[1])
    assert got[2]["checked"] == "an event of another location than this run's input" and "job_id" not in got[2]
    assert got[3] == plain


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
