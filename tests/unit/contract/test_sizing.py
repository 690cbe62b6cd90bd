"""Settings from the input's size (include.contract.sizing): the rule, the input's bytes as the readers
take them, and a log's partition count decided once and kept."""

from __future__ import annotations

import json
import os
import threading

import boto3
import networkx as nx
import pytest

from include.checkpoints.record_schemas import DamagedRecord
from include.contract import sizing
from include.contract.config import InputSpec, JobConfig
from include.contract.sizing import GiB, MiB, connect_server_heap, derive, input_bytes, log_partitions, server_heap
from include.epoch.job import IterationJob
from include.errors import ConfigError, InputDataError
from include.store import LocalStore
from tests.helpers import publish_edges


def test_the_rule():
    """At least the count and heap every job had before; one partition per 64 MiB; the heap
    by format, rounded up to a whole GiB, at most half of the machine."""
    small = derive(10 * MiB, "parquet", 24 * GiB)
    assert (small.num_partitions, small.driver_memory, small.capped) == (4, "2g", False)
    graph_50m = derive(512_433_805, "parquet", 24 * GiB)  # bench.common.graph(50_000_000)
    assert (graph_50m.num_partitions, graph_50m.driver_memory, graph_50m.capped) == (8, "6g", False)
    assert derive(512_433_805, "csv", 24 * GiB).driver_memory == "2g"  # text: a third of the density
    too_big = derive(40 * GiB, "parquet", 24 * GiB)
    assert (too_big.driver_memory, too_big.capped) == ("12g", True)
    assert "capped" in too_big.describe_heap() and "cluster" in too_big.describe_heap()
    assert derive(10**15, "parquet", 24 * GiB).num_partitions == sizing.MAX_PARTITIONS
    assert derive(0, "json", 1 * GiB).driver_memory == "2g"  # a small machine still gets the minimum


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True, None])
def test_a_bad_size_is_named(bad):
    with pytest.raises(ConfigError, match="bytes >= 0, got " + repr(bad).replace(".", r"\.")):
        derive(bad)


def test_an_unknown_format_is_named():
    with pytest.raises(ConfigError, match="'orc' has no sizing rule"):
        derive(1, "orc")


def test_the_shared_servers_heap_comes_from_the_machine():
    assert server_heap(24 * GiB) == "6g"
    assert server_heap(4 * GiB) == "2g"
    assert server_heap(256 * GiB) == "16g"


def test_the_shared_servers_heap_can_be_set_and_a_bad_one_is_named():
    machine = server_heap()
    assert connect_server_heap({}) == (machine, "a quarter of this machine's memory; "
                                                "ITERATIONS_SPARK_CONNECT_MEMORY overrides it")
    assert connect_server_heap({"SPARK_DRIVER_MEMORY": "3g"}) == ("3g", "SPARK_DRIVER_MEMORY sets it")
    both = {"SPARK_DRIVER_MEMORY": "3g", "ITERATIONS_SPARK_CONNECT_MEMORY": "1536m"}
    assert connect_server_heap(both) == ("1536m", "ITERATIONS_SPARK_CONNECT_MEMORY sets it")
    assert connect_server_heap({"ITERATIONS_SPARK_CONNECT_MEMORY": ""})[0] == machine  # empty: unset
    for bad in ("2", "2 g", "-2g", "0g", "2gb --conf x=y", "lots"):
        with pytest.raises(ConfigError, match=f"ITERATIONS_SPARK_CONNECT_MEMORY={bad!r} is not a heap size"):
            connect_server_heap({"ITERATIONS_SPARK_CONNECT_MEMORY": bad})
    with pytest.raises(ConfigError, match="SPARK_DRIVER_MEMORY='4 GiB' is not a heap size"):
        connect_server_heap({"SPARK_DRIVER_MEMORY": "4 GiB"})


def test_an_inputs_bytes_are_its_data_files(tmp_path):
    one = tmp_path / "edges.parquet"
    one.write_bytes(b"x" * 1000)
    assert input_bytes(InputSpec(str(one))) == 1000
    folder = tmp_path / "parts"
    (folder / "day=1").mkdir(parents=True)
    (folder / "day=1" / "part-0.parquet").write_bytes(b"x" * 300)
    (folder / "part-1.parquet").write_bytes(b"x" * 200)
    (folder / "_SUCCESS").write_bytes(b"x" * 5000)  # what Spark leaves out, left out
    (folder / ".part-1.parquet.crc").write_bytes(b"x" * 7000)
    assert input_bytes(InputSpec(str(folder))) == 500
    with pytest.raises(InputDataError, match="missing.parquet does not exist"):
        input_bytes(InputSpec(str(tmp_path / "missing.parquet")))


def test_a_published_inputs_bytes_are_its_pinned_versions(tmp_path):
    manifest = publish_edges(str(tmp_path / "up"), nx.DiGraph([(i, i + 1) for i in range(20)]), job="up",
                             checkpoint=1)
    store = LocalStore(str(tmp_path / "store"))
    from include.publication.pinned_inputs import pin_input

    spec = pin_input(store, "job", InputSpec(str(tmp_path / "up" / "edges")))
    assert input_bytes(spec) == sum(f["size"] for f in manifest["files"]) > 0


def test_an_s3_inputs_bytes_are_its_data_objects(moto_endpoint, bucket):
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    for key, size in [("in/a.parquet", 100), ("in/b/c.parquet", 50), ("in/_DONE", 9), ("in/.hidden", 9),
                      ("inside/x.parquet", 1000), ("in/empty.parquet", 0)]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x" * size)
    options = {"endpoint_url": moto_endpoint}
    assert input_bytes(InputSpec(f"s3://{bucket}/in", "parquet"), options) == 150  # not inside/
    assert input_bytes(InputSpec(f"s3://{bucket}/in/a.parquet"), options) == 100
    with pytest.raises(InputDataError, match=f"s3://{bucket}/nothing does not exist or holds no data files"):
        input_bytes(InputSpec(f"s3://{bucket}/nothing", "parquet"), options)


@pytest.fixture
def small_partitions(monkeypatch):
    """One partition per KiB of input: a test input takes the path a large one does."""
    monkeypatch.setattr(sizing, "PARTITION_INPUT_BYTES", 1024)


def _input(tmp_path, size: int) -> InputSpec:
    path = tmp_path / "edges.csv"
    path.write_bytes(b"x" * size)
    return InputSpec(str(path))


def test_a_log_is_sized_once_for_its_life(tmp_path, small_partitions, caplog):
    store = LocalStore(str(tmp_path / "store"))
    spec = _input(tmp_path, 6 * 1024 - 10)
    caplog.set_level("INFO", "include.contract.sizing")
    assert log_partitions(store, "job", spec, latest_partitions=lambda: None) == 6
    assert "job job: 6 partitions (input" in caplog.text
    record = json.loads(store.get("jobs/job/sizing.json"))
    assert record == {"format": "iterations.sizing/1", "num_partitions": 6, "input_bytes": 6 * 1024 - 10,
                      "partition_input_bytes": 1024}
    spec = _input(tmp_path, 50 * 1024)  # the input grew: the log keeps its count
    assert log_partitions(store, "job", spec, latest_partitions=lambda: None) == 6
    assert log_partitions(store, "other", spec, latest_partitions=lambda: None) == 50  # a new log: sized anew


def test_a_log_started_before_the_rule_keeps_its_count(tmp_path, small_partitions):
    store = LocalStore(str(tmp_path / "store"))
    spec = _input(tmp_path, 50 * 1024)
    assert log_partitions(store, "old", spec, latest_partitions=lambda: 3) == 3
    assert json.loads(store.get("jobs/old/sizing.json"))["input_bytes"] is None


def test_an_input_not_there_yet(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    spec = InputSpec(str(tmp_path / "incoming"), "parquet")
    with pytest.raises(InputDataError, match="incoming does not exist"):
        log_partitions(store, "static", spec, latest_partitions=lambda: None)
    assert not store.exists("jobs/static/sizing.json")
    assert log_partitions(store, "splits", spec, latest_partitions=lambda: None, static=False) == sizing.MIN_PARTITIONS


def test_tasks_sizing_a_log_at_once_agree(tmp_path, small_partitions):
    """Six tasks, each seeing another input size: one record, every task its count."""
    store = LocalStore(str(tmp_path / "store"))
    specs = []
    for i in range(6):
        path = tmp_path / f"edges-{i}.csv"
        path.write_bytes(b"x" * (1024 * (i + 2)))
        specs.append(InputSpec(str(path)))
    got, barrier = [None] * 6, threading.Barrier(6)

    def size(i):
        barrier.wait()
        got[i] = log_partitions(store, "job", specs[i], latest_partitions=lambda: None)

    threads = [threading.Thread(target=size, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and got[0] == json.loads(store.get("jobs/job/sizing.json"))["num_partitions"]


@pytest.mark.parametrize("forged", [{"num_partitions": 0}, {"num_partitions": 10**9}, {"num_partitions": "8"},
                                    {"format": "iterations.sizing/9"}, {"input_bytes": -1}])
def test_a_damaged_sizing_record_is_refused(tmp_path, forged):
    store = LocalStore(str(tmp_path / "store"))
    record = {"format": "iterations.sizing/1", "num_partitions": 4, "input_bytes": 10, **forged}
    store.put("jobs/job/sizing.json", json.dumps(record).encode())
    with pytest.raises(DamagedRecord, match="sizing.json is not a sizing record"):
        log_partitions(store, "job", _input(tmp_path, 10), latest_partitions=lambda: None)


def test_a_jobs_plan_uses_its_logs_count(tmp_path, small_partitions):
    """num_partitions null: the plan takes the log's count; a run naming one overrides it."""
    from tests.helpers import write_edges

    edges = write_edges(tmp_path / "edges.csv", nx.DiGraph([(i, (i + 1) % 1500) for i in range(1500)]))
    size = os.path.getsize(edges)
    base = dict(job_id="pr", body="pagerank", input=str(edges), checkpoint_root=str(tmp_path / "store"))
    assert JobConfig(**base).num_partitions is None
    plan = IterationJob(JobConfig(**base)).attempts.plan_epoch()
    assert plan.num_partitions == -(-size // 1024) > 4
    assert len(plan.head_state["heads"]["ranks"]["partitions"]) == plan.num_partitions
    assert IterationJob(JobConfig(**base, num_partitions=2)).attempts.plan_epoch().num_partitions == 2


def test_a_drivers_heap_for_a_job(tmp_path, monkeypatch):
    """What the library runner and an epoch's spark-submit give their driver: the input's,
    unless SPARK_DRIVER_MEMORY names one; the default while the input is not there."""
    monkeypatch.delenv("SPARK_DRIVER_MEMORY", raising=False)
    monkeypatch.setattr(sizing, "machine_memory", lambda: 24 * GiB)
    spec = _input(tmp_path, 1000)
    assert sizing.driver_memory(spec) == ("2g", "input 0.0 MiB: a local driver's heap 2g; "
                                                "SPARK_DRIVER_MEMORY overrides it")
    monkeypatch.setattr(sizing, "HEAP_PER_INPUT_BYTE", {**sizing.HEAP_PER_INPUT_BYTE, "csv": 5 * GiB // 1000})
    assert sizing.driver_memory(spec)[0] == "5g"
    monkeypatch.setenv("SPARK_DRIVER_MEMORY", "3g")
    assert sizing.driver_memory(spec) == (None, "the driver's heap is SPARK_DRIVER_MEMORY's (3g)")
    monkeypatch.delenv("SPARK_DRIVER_MEMORY")
    memory, why = sizing.driver_memory(InputSpec(str(tmp_path / "later"), "parquet"))
    assert memory is None and why.startswith("the driver's heap is the default one: input path") and "later" in why
