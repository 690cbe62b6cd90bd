"""Reading through the store (the head's replay, static inputs on S3): a Spark 4 Python data
source whose partitions are explicit groups of objects, each checked against its size and
SHA-256 before it is decoded."""

from __future__ import annotations

import io
import json
import os
import threading
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from include.checkpoints import DatasetRef, FileRef
from include.contract import InputSpec
from include.errors import InputDataError
from include.store import ObjectStore, open_store


class _StoreSource(DataSource):
    """Reads explicit groups of store objects; one group per Spark partition."""

    store: ObjectStore | None = None  # set on the per-store subclass; pickled with it
    source_name = "iterations_store"

    @classmethod
    def name(cls) -> str:
        return cls.source_name

    def schema(self) -> str:
        return self.options["schema"]

    def reader(self, schema: StructType) -> "DataSourceReader":
        return _StoreReader(type(self).store, self.options, schema)


class _StoreReader(DataSourceReader):
    def __init__(self, store: ObjectStore, options: Mapping[str, str], schema: StructType):
        self.store = store
        self.groups = json.loads(options["groups"])
        self.format = options.get("format", "parquet")
        self.csv_header = options.get("header", "true").lower() == "true"
        self.source_column = options.get("source_column") or None
        self.schema_json = schema.json()

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(group) for group in self.groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(StructType.fromJson(json.loads(self.schema_json)))
        for f in partition.value:
            table = decode_column(_get(self.store, f), self.format, self.csv_header)
            if self.source_column:  # which object each row came from
                table = table.append_column(self.source_column, pa.array([f["key"]] * table.num_rows, pa.string()))
            missing = [n for n in target.names if n not in table.column_names]
            if missing:
                raise InputDataError(f"{self.store.location(f['key'])} has no column(s) {missing}")
            table = table.select(target.names).cast(target)
            yield from table.to_batches()


def decode_column(data: bytes, fmt: str, csv_header: bool = True):
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    if fmt == "parquet":
        return pq.read_table(io.BytesIO(data))
    if fmt == "csv":
        read_options = pcsv.ReadOptions(autogenerate_column_names=not csv_header)
        return pcsv.read_csv(io.BytesIO(data), read_options=read_options)
    if fmt == "json":
        return pjson.read_json(io.BytesIO(data))
    raise InputDataError(f"unsupported format {fmt!r}")


_registered: dict[tuple[Any, int], tuple[ObjectStore, str]] = {}
_registered_lock = threading.Lock()


def _source_for(spark: SparkSession, store: ObjectStore) -> str:
    """The name of the data source reading ``store``, registered in ``spark``'s session (a
    registration belongs to a session: one process may use a store with several sessions)."""
    with _registered_lock:
        key = (getattr(spark, "session_id", None) or id(spark), id(store))
        known = _registered.get(key)
        if known is None or known[0] is not store:
            name = f"iterations_store_{len(_registered)}_{os.getpid()}"
            cls = type(f"StoreSource{len(_registered)}", (_StoreSource,), {"store": store, "source_name": name})
            spark.dataSource.register(cls)
            _registered[key] = (store, name)
        return _registered[key][1]


def read_files(
    spark: SparkSession,
    store: ObjectStore,
    groups: Sequence[Sequence[Mapping[str, Any]]],
    schema: StructType,
    fmt: str = "parquet",
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A DataFrame with one partition per group of objects, rows in object order."""
    reader = (
        spark.read.format(_source_for(spark, store))
        .schema(schema)
        .option("schema", schema.simpleString())
        .option("groups", json.dumps([list(g) for g in groups]))
        .option("format", fmt)
    )
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    return reader.load()


def read_dataset(spark: SparkSession, store: ObjectStore, ds: DatasetRef, num_partitions: int) -> DataFrame:
    """Replay a committed dataset into ``num_partitions`` partitions: old partition i is read
    by new partition i mod P', in order (the mapping JobHeadState.redistribute assumes)."""
    groups: list[list[dict[str, Any]]] = [[] for _ in range(num_partitions)]
    for i, part in enumerate(ds.partitions):
        groups[i % num_partitions].extend(f.to_dict() for f in part)
    return read_files(spark, store, groups, StructType.fromJson(json.loads(ds.schema)))


# --- static inputs ---------------------------------------------------------------------------


def read_input(spark: SparkSession, spec: InputSpec, num_partitions: int, **store_options: Any) -> DataFrame:
    """Read a job's static input at its canonical location (include.store), literally:
    local paths with Spark's own readers, given as ``file://`` URIs whose grammar leaves Hadoop
    no glob, list or escape to expand; S3 with the store source, object by object."""
    options = {"header": "true", "inferSchema": "true"} if spec.format == "csv" else {}
    options.update(spec.options)
    if spec.published:
        return _read_pinned(spark, spec, num_partitions, options, store_options)
    if spec.files is not None:
        return _read_pinned_files(spark, spec, num_partitions, options, store_options)
    location = spec.location  # parsed again: nothing outside the grammar reaches a reader
    if location.is_local:
        path = _local_path(spec)
        if os.path.isdir(path) and not any(
            not n.startswith((".", "_")) for _, _, names in os.walk(path) for n in names
        ):
            raise InputDataError(f"input {path} is empty: the directory holds no data files")
        # Spark matches cached data by plan, across the sessions of a server: a plan that names
        # the files' sizes and times reads the input as it is now, not a copy cached earlier
        return spark.read.format(spec.format).options(**options).option(
            "iterations.input.version", _local_version(path)).load(location.hadoop_path())
    return _read_s3_input(spark, spec, num_partitions, options, store_options)


def _read_pinned(spark, spec: InputSpec, num_partitions: int, options, store_options) -> DataFrame:
    """A published output's one version (``spec.published``, include.publication.pinned_inputs): exactly its
    files, each there with its recorded size (InputDataError otherwise), never the directory."""
    from include.publication import check_still_there, pinned_files, published_sizes

    files = pinned_files(spec)
    version = spec.published["version"]
    check_still_there(spec, published_sizes(spec, store_options))
    if spec.location.is_local:
        return spark.read.format("parquet").options(**options).option(
            "iterations.input.version", version).load([f.hadoop_path() for f, _ in files])
    store = open_store(f"s3://{spec.location.bucket}", **store_options)
    return _read_s3_objects(spark, spec, store, [
        {"key": f.path, "size": size, "sha256": pinned.get("sha256")}  # each verified as it is read
        for (f, size), pinned in zip(files, spec.published["files"])], num_partitions, options)


def _read_pinned_files(spark, spec: InputSpec, num_partitions: int, options, store_options) -> DataFrame:
    """Exactly the files the log pinned (``spec.files``, include.publication.pinned_inputs), never the directory
    as it is now: the plan checked them against their pin before any Spark work. Local files by
    Spark's readers, the directory as their base (its partition columns kept); S3 objects by the
    store source, each read with a conditional GET on its pinned ETag (InputChanged if it was
    rewritten since)."""
    from include.publication import input_file_location

    located = [(input_file_location(spec.location, f["key"]), f) for f in spec.files]
    if spec.location.is_local:
        reader = spark.read.format(spec.format).options(**options).option(
            "iterations.input.version", input_version(spec))
        if os.path.isdir(spec.location.path):
            reader = reader.option("basePath", spec.location.hadoop_path())
        return reader.load([where.hadoop_path() for where, _f in located])
    store = open_store(f"s3://{spec.location.bucket}", **store_options)
    return _read_s3_objects(spark, spec, store, [
        {"key": where.path, "size": f["size"], "etag": f.get("etag")} for where, f in located], num_partitions, options)


def _local_path(spec: InputSpec) -> str:
    """The local input's path; InputDataError when nothing is there."""
    path = spec.location.path
    if not os.path.exists(path):
        raise InputDataError(f"input path {path} does not exist")
    return path


def _local_version(path: str) -> str:
    """A digest of the names, sizes and modification times of the files under ``path``."""
    import hashlib

    h = hashlib.sha256()
    paths = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, n) for d, _, names in os.walk(path) for n in names)
    for p in paths:
        st = os.stat(p)
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def input_version(spec: InputSpec, **store_options: Any) -> str:
    """What the input is now, as a digest: the names, sizes and (local files) modification
    times of its files, which the plan ``read_input`` makes also names. Two reads of the same
    version read the same files (as far as names, sizes and times tell)."""
    import hashlib

    if spec.published or spec.files is not None:  # pinned: what the pin names is what is read
        h = hashlib.sha256(json.dumps(spec.published or spec.files, sort_keys=True).encode())
        return h.hexdigest()[:32]
    if not spec.is_s3:
        return _local_version(_local_path(spec))
    _store, objects = _s3_objects(spec, store_options)
    h = hashlib.sha256()
    for o in objects:
        h.update(f"{o.key}\0{o.size}\n".encode())
    return h.hexdigest()[:32]


def _s3_objects(spec: InputSpec, store_options: Mapping[str, Any]) -> tuple[ObjectStore, list]:
    """The input's data files on S3 (include.contract.sizing.s3_input_objects: names starting with
    ``.`` or ``_`` and empty objects left out), and the store they are in."""
    from include.contract import s3_input_objects

    return s3_input_objects(spec.location, store_options)


def _read_s3_input(spark, spec, num_partitions, options, store_options) -> DataFrame:
    store, objects = _s3_objects(spec, store_options)
    return _read_s3_objects(spark, spec, store, [{"key": o.key, "size": o.size} for o in objects], num_partitions,
                            options)


def _read_s3_objects(spark, spec, store, objects: Sequence[Mapping[str, Any]], num_partitions, options) -> DataFrame:
    """The objects of ``store`` ({"key", "size"}, and the ``sha256`` or ``etag`` each must have)
    as one DataFrame, the schema the first one's."""
    from pyspark.sql.pandas.types import from_arrow_schema

    first = decode_column(_get(store, objects[0]), spec.format, options.get("header", "true").lower() == "true")
    schema = from_arrow_schema(first.schema)
    groups: list[list[dict[str, Any]]] = [[] for _ in range(min(num_partitions, len(objects)))]
    for i, o in enumerate(objects):  # sizes too: see read_input
        groups[i % len(groups)].append({**{k: v for k, v in o.items() if v is not None}, "input": 1})
    return read_files(spark, store, groups, schema, spec.format, {"header": options.get("header", "true")})


def _get(store: ObjectStore, f: Mapping[str, Any]) -> bytes:
    """An object's bytes, checked against what it must be: its pinned ETag (a conditional GET:
    InputChanged if it was rewritten) and, when known, its size and SHA-256 (InputDataError)."""
    from include.checkpoints import verify_bytes
    from include.errors import InputChanged
    from include.store import sha256_hex

    data = store.get_matching(f["key"], f["etag"]) if f.get("etag") else store.get(f["key"])
    if f.get("sha256") and f.get("input"):  # a pinned input's file: changed, not a damaged checkpoint
        if len(data) != f["size"] or sha256_hex(data) != f["sha256"]:
            raise InputChanged(f"{store.location(f['key'])} is not the file its pin names ({len(data)} bytes, pinned "
                               f"with {f['size']} and another SHA-256): it was rewritten since it was pinned")
    elif f.get("sha256"):
        verify_bytes(data, FileRef.from_dict(f), store.location(f["key"]))
    return data
