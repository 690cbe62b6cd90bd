"""Settings derived from the size of a job's input: the partitions of its feedback datasets and
the heap of a Spark driver that runs in local mode (docs/cluster.md, "Sizing").
The shared Spark Connect server of the embedded default starts before any input is known: its
heap comes from the machine's memory (``server_heap``).

One rule for every runner: the library (spark_jobs.run_job) and the Airflow operators both
take a job's partition count from ``log_partitions`` (through IterationJob.num_partitions),
and a driver started for one job (the library's local session, an epoch's spark-submit) its
heap from ``driver_memory``. Each is a default: a ``num_partitions`` the job names, and
``SPARK_DRIVER_MEMORY``, win over it.

- Partitions: one per ``PARTITION_INPUT_BYTES`` of input (at least ``MIN_PARTITIONS``, the
  count every job had before it was derived; at most ``MAX_PARTITIONS``), decided once per
  checkpoint log and recorded there (``jobs/<log>/sizing.json``, create-if-absent, one
  winner), so every epoch, retry and batch of the log uses the same count even when the input
  grows. A log that was started before the rule (it has checkpoints but no record) keeps its
  checkpoint's count. A rewind or a new scheduled batch is a new log and derives it again.
- A local driver's heap (in local mode the executors' memory is the driver's):
  ``HEAP_PER_INPUT_BYTE`` times the input's bytes (by format: Parquet is compressed, text is
  not), at least ``MIN_HEAP``, at most half of the machine's memory (``capped``: then the job
  may not fit here, and a cluster is the place for it).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from include.checkpoints.layout import JobLayout
from include.checkpoints.record_schemas import SIZING
from include.errors import ConfigError, InputDataError, ObjectNotFound
from include.process.settings import SPARK_CONNECT_MEMORY, SPARK_DRIVER_MEMORY
from include.store import open_store

log = logging.getLogger(__name__)

GiB = 2**30
MiB = 2**20
PARTITION_INPUT_BYTES = 64 * MiB
MIN_PARTITIONS = 4
MAX_PARTITIONS = 4096
MIN_HEAP = 2 * GiB
HEAP_PER_INPUT_BYTE = {"parquet": 12, "csv": 4, "json": 3}
MACHINE_SHARE = 0.5  # of the machine's memory, at most, for a local driver's heap
SIZING_FORMAT = "iterations.sizing/1"


@dataclass(frozen=True)
class Sizing:
    """What a job's input's size asks for."""

    input_bytes: int
    num_partitions: int
    heap_bytes: int
    capped: bool  # the heap the input asks for is more than the machine's share

    @property
    def driver_memory(self) -> str:
        """The heap as Spark spells it (``6g``)."""
        return f"{self.heap_bytes // GiB}g"

    def describe_heap(self) -> str:
        """The heap and why, for a log line (the partitions are the log's: ``log_partitions``)."""
        text = f"input {self.input_bytes / MiB:,.1f} MiB: a local driver's heap {self.driver_memory}"
        if self.capped:
            text += (" (capped at half of this machine's memory, below what the rule asks for this input; "
                     "a job that needs more runs on a cluster)")
        return text


def machine_memory() -> int:
    """This machine's physical memory, in bytes."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume the minimum is all there is
        return 2 * MIN_HEAP


def server_heap(machine_bytes: int | None = None) -> str:
    """The heap of a Spark Connect server that runs every job's epochs in local mode (the
    embedded default, spark_jobs.connect_server): started before any job's input is known, so
    sized from the machine: a quarter of its memory, at least ``MIN_HEAP``, at most 16g."""
    machine = machine_memory() if machine_bytes is None else machine_bytes
    return f"{max(MIN_HEAP, min(machine // 4, 16 * GiB)) // GiB}g"


_MEMORY = re.compile(r"[1-9][0-9]*[kmgt]", re.IGNORECASE)


def connect_server_heap(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The heap of the embedded Spark Connect server, and why: ``ITERATIONS_SPARK_CONNECT_MEMORY``,
    else ``SPARK_DRIVER_MEMORY`` (every driver's), else ``server_heap()``. A set value must be
    a JVM memory size (``2g``, ``1536m``): ConfigError naming it otherwise."""
    for setting in (SPARK_CONNECT_MEMORY, SPARK_DRIVER_MEMORY):
        value = setting.get(environ)
        if value:
            if not _MEMORY.fullmatch(value):
                raise ConfigError(f"{setting.name}={value!r} is not a heap size; write a number and a unit, "
                                  f"for example 2g or 1536m")
            return value, f"{setting.name} sets it"
    return server_heap(), "a quarter of this machine's memory; ITERATIONS_SPARK_CONNECT_MEMORY overrides it"


def partitions_for(input_bytes: int) -> int:
    """The partitions an input of ``input_bytes`` asks for."""
    return max(MIN_PARTITIONS, min(MAX_PARTITIONS, math.ceil(input_bytes / PARTITION_INPUT_BYTES)))


def derive(input_bytes: int, fmt: str = "parquet", machine_bytes: int | None = None) -> Sizing:
    """The settings an input of ``input_bytes`` in format ``fmt`` asks for on a machine of
    ``machine_bytes`` (default: this one)."""
    if not isinstance(input_bytes, int) or isinstance(input_bytes, bool) or input_bytes < 0:
        raise ConfigError(f"an input's size must be a number of bytes >= 0, got {input_bytes!r}")
    if fmt not in HEAP_PER_INPUT_BYTE:
        raise ConfigError(f"input format {fmt!r} has no sizing rule; known: {', '.join(HEAP_PER_INPUT_BYTE)}")
    machine = machine_memory() if machine_bytes is None else machine_bytes
    want = max(MIN_HEAP, HEAP_PER_INPUT_BYTE[fmt] * input_bytes)
    cap = max(MIN_HEAP, int(machine * MACHINE_SHARE) // GiB * GiB)
    heap = min(math.ceil(want / GiB) * GiB, cap)
    return Sizing(input_bytes, partitions_for(input_bytes), heap, capped=want > cap)


def input_bytes(spec, store_options: Mapping[str, Any] | None = None) -> int:
    """The bytes of a job's input (an include.contract.config.InputSpec) as its readers take it: the
    pinned version's files; a local file, or the data files under a directory; the data
    objects under an S3 key or prefix (names starting with ``.`` or ``_`` left out, as Spark
    leaves them out). InputDataError when there is no input."""
    if spec.published:
        return sum(int(f["size"]) for f in spec.published["files"])
    location = spec.location
    if location.is_local:
        path = location.path
        if os.path.isfile(path):
            return os.path.getsize(path)
        if not os.path.isdir(path):
            raise InputDataError(f"input path {path} does not exist")
        return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path)
                   for n in names if not n.startswith((".", "_")))
    _store, objects = s3_input_objects(location, store_options or {})
    return sum(o.size for o in objects)


def s3_input_objects(location, store_options: Mapping[str, Any]):
    """The data objects of an S3 input at ``location`` (an include.store.Location): the
    object named, or those under the prefix (names starting with ``.`` or ``_`` and empty
    objects left out), and the store of its bucket. InputDataError when there are none."""
    key = location.path
    store = open_store(f"s3://{location.bucket}", **dict(store_options))
    objects = [o for o in store.list(key) if not o.key.rsplit("/", 1)[-1].startswith((".", "_")) and o.size > 0]
    objects = [o for o in objects if o.key == key or o.key.startswith(key.rstrip("/") + "/") or not key]
    if not objects:
        raise InputDataError(f"input {location.url} does not exist or holds no data files")
    return store, objects


def driver_memory(spec, store_options: Mapping[str, Any] | None = None) -> tuple[str | None, str]:
    """The heap to give a Spark driver started for one job whose input is ``spec`` (the
    library runner's local session, an epoch's spark-submit), and what to log about it: None
    when ``SPARK_DRIVER_MEMORY`` names one (Spark takes it from there) or the input is not there
    yet (Spark's or the session's default)."""
    if SPARK_DRIVER_MEMORY.is_set():
        return None, f"the driver's heap is SPARK_DRIVER_MEMORY's ({SPARK_DRIVER_MEMORY.get()})"
    try:
        size = input_bytes(spec, store_options)
    except InputDataError as e:
        return None, f"the driver's heap is the default one: {e}"
    sizing = derive(size, spec.format)
    return sizing.driver_memory, f"{sizing.describe_heap()}; SPARK_DRIVER_MEMORY overrides it"


def log_partitions(store, log_id: str, spec, *, latest_partitions: Callable[[], int | None],
                   store_options: Mapping[str, Any] | None = None, static: bool = True) -> int:
    """The partition count of log ``log_id`` when its job names none: the one recorded for the
    log; else, for a log with checkpoints (``latest_partitions()``: its latest checkpoint's
    count, None when it has none), theirs; else the one its input ``spec``'s size asks for,
    recorded at the first call (single winner: tasks that size the log at once all use the
    count the first record names). An input that arrives while the job runs (``static``
    False) may not be there yet: then ``MIN_PARTITIONS``."""
    key = JobLayout(log_id).sizing()
    record = _read_sizing(store, key)
    if record is not None:
        return record["num_partitions"]
    size, count = None, latest_partitions()
    if count is not None:
        why = "its latest checkpoint's"
    else:
        try:
            size = input_bytes(spec, store_options)
        except InputDataError:
            if static:
                raise
            count, why = MIN_PARTITIONS, f"input {spec.path}: not there yet"
        else:
            count, why = partitions_for(size), f"input {spec.path}: {size / MiB:,.1f} MiB"
    data = {"format": SIZING_FORMAT, "num_partitions": count, "input_bytes": size,
            "partition_input_bytes": PARTITION_INPUT_BYTES}
    if store.put_if_absent(key, json.dumps(data, indent=1).encode()):
        log.info("job %s: %d partitions (%s), for every epoch of this log; a run's num_partitions overrides it",
                 log_id, count, why)
        return count
    record = _read_sizing(store, key)  # another task of the log sized it first: its count is the one
    if record is None:
        raise ObjectNotFound(f"{store.location(key)} was created and is gone")
    return record["num_partitions"]


def _read_sizing(store, key: str) -> dict[str, Any] | None:
    try:
        data = store.get(key)
    except ObjectNotFound:
        return None
    return SIZING.load(data, store.location(key))


__all__ = ["HEAP_PER_INPUT_BYTE", "MIN_HEAP", "MIN_PARTITIONS", "PARTITION_INPUT_BYTES", "Sizing", "derive",
           "driver_memory", "input_bytes", "log_partitions", "machine_memory", "partitions_for",
           "s3_input_objects", "server_heap"]
