"""Writing (the tail): each partition of a dataset to one Parquet object through the store,
hashed, profiled for the data checks, and reported."""

from __future__ import annotations

import io
import logging
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from include.checkpoints import EpochReport, FileRef
from include.errors import CheckpointError, IterationError
from include.process import failpoint
from include.store import ObjectStore
from spark_jobs.frames import arrow_frame, arrow_of
from spark_jobs.storeio.hashing import partition_ids
from spark_jobs.storeio.sizing import sized_for_joins

log = logging.getLogger("iterations")


def write_dataset(
    df: DataFrame,
    *,
    store: ObjectStore,
    prefix: str,
    report_prefix: str,
    head: str,
    epoch: int,
    attempt_id: str,
    num_partitions: int,
    key_columns: Sequence[str] = (),
    metrics: Mapping[str, tuple[str, str]] | None = None,
    profile: bool = True,
    facts: Mapping[str, float] | None = None,
    kept: dict[str, tuple[DataFrame, DataFrame]] | None = None,
    job_id: str = "",
    on_driver: bool = False,
) -> list[EpochReport]:
    """Write ``df`` as P partitions of Parquet under ``prefix`` and one report per partition
    under ``report_prefix``. ``metrics``: name -> (column, aggregation); metric columns are
    aggregated per partition and not written. ``profile``: each report also carries the
    partition's profile (``Profile``), computed from the batches as they are written, for the
    data checks; ``facts``: scalars the body knows about the epoch, carried in every profile.

    A record's partition is ``pmod(hash(keys), P)`` (all columns when there are no keys),
    computed as a column: Spark may coalesce or reuse shuffles, so its own partition ids are
    not trusted. The records are shuffled by that column, so each partition's records reach one
    Spark task, and the shuffle is left to adaptive execution to coalesce (it merges whole
    shuffle partitions, never splits one): a small dataset is written by one task instead of P
    (each task's Python hand-over costs more than a small partition's data). Each Spark task
    writes one file per partition it holds, records sorted by key; partitions that received no
    record get an empty report from the driver.

    ``kept``: also keep the written records in Spark: the partitions the tail writes are
    local-checkpointed as it reads them (memory, spilling to disk; lineage cut), so the next
    epoch on this session can start from them instead of reading the files back. A lost block
    makes a later job fail; it is never recomputed. ``kept[head]``: (the records, data columns
    only; the checkpointed frame, for ``release_kept``, or None for a local frame).

    A local frame (``DataFrame.isLocal()``: rows the driver holds, such as k-means' k centroids
    made from pandas or Arrow) is written by the driver itself, the same way: a Spark job per
    small dataset would cost more than the data.

    ``on_driver``: the caller expects ``df`` to be small (``spark_jobs.epoch`` decides by the
    size of the variable the epoch started from): its records, each with Spark's partition id,
    are collected by one Spark job and written by the driver, as a local frame is, instead of by
    a shuffle and Spark's Python workers; what is kept is then a local frame of them, marked for
    broadcast joins as a small variable read from the store is, or, past ``LOCAL_FRAME_ROWS``
    records, a local checkpoint of them in Spark (one small job). Records past what the driver may
    collect (``spark.driver.maxResultSize``) are written in Spark after all. Each partition's file holds
    the same bytes either way (its name says which task wrote it: here "driver").

    ``job_id``: only named to the failure points (tests place faults in one job's tail).
    """
    metrics = dict(metrics or {})
    collected = None
    metric_columns = {col for col, _ in metrics.values()}
    columns = df.columns
    for name, (col, _agg) in metrics.items():
        if col not in columns:
            raise IterationError(f"metric {name!r} needs column {col!r}, which {head!r} does not have: {columns}")
    data_columns = [c for c in columns if c not in metric_columns]
    source = df
    # A frame local_frame made: its Arrow table is at hand, and the driver computes Spark's
    # partition ids itself (spark_jobs.storeio.hashing), so no plan is sent to Spark at all
    held = arrow_of(source)
    pids = partition_ids(held, key_columns or data_columns, num_partitions) \
        if held is not None and held.column_names == columns else None
    if pids is not None:
        local = True
        schema_json = StructType([source.schema[c] for c in data_columns]).json()
    else:
        schema_json = df.select(*data_columns).schema.json()
        local = df.isLocal()  # rows the driver holds (a frame made from pandas or Arrow): no Spark job
        df = df.withColumn(_PID, F.pmod(F.hash(*[F.col(c) for c in (key_columns or data_columns)]),
                                        F.lit(num_partitions)))
        if on_driver and not local:
            collected = _collect(df, head, epoch)
            local = collected is not None
        if not local:
            df = df.repartition(_PID).sortWithinPartitions(_PID, *key_columns)
            if kept is not None:
                df = df.localCheckpoint(eager=False)  # materialised by the tail's job below

    def tail(batches: Iterator[Any], task: Any = None) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        from pyspark import TaskContext

        task = TaskContext.get().taskAttemptId() if task is None else task
        out_schema = pa.schema([("report", pa.string())])
        current: _PartitionWriter | None = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            pids = batch.column(_PID).to_numpy(zero_copy_only=False)
            starts = [0, *(np.flatnonzero(np.diff(pids)) + 1).tolist()]
            for i, start in enumerate(starts):
                stop = starts[i + 1] if i + 1 < len(starts) else batch.num_rows
                pid = int(pids[start])
                if current is None or current.partition != pid:
                    if current is not None:
                        yield pa.RecordBatch.from_pylist([{"report": current.close()}], schema=out_schema)
                    current = _PartitionWriter(store, prefix, report_prefix, head, epoch, attempt_id,
                                               pid, task, metrics, data_columns, schema_json,
                                               Profile(key_columns, facts) if profile else None, job_id)
                current.write(batch.slice(start, stop - start))
        if current is not None:
            yield pa.RecordBatch.from_pylist([{"report": current.close()}], schema=out_schema)

    if local:
        # The same partitions, files and reports, written by the driver: the partition column is
        # still Spark's hash (computed by the driver, or by Spark on the local rows), the records
        # sorted as a task would.
        import pyarrow as pa
        import pyarrow.compute as pc

        if pids is not None:
            table = held.append_column(_PID, pa.array(pids, pa.int32()))
        elif held is not None and held.column_names == columns:
            # a type the driver does not hash as Spark does: Spark computes only the partition
            # ids (a collect over the local relation runs no Spark job; toArrow runs one)
            table = held.append_column(_PID, pa.array([row[0] for row in df.select(_PID).collect()], pa.int32()))
        elif collected is not None:  # the rows and their partition ids, in one Spark job
            table = collected
        else:  # a local relation: no Spark job
            table = df.toArrow()
        order = pc.sort_indices(table, sort_keys=[(c, "ascending", "at_start") for c in (_PID, *key_columns)])
        table = table.take(order)
        texts = [b.column(0)[0].as_py() for b in tail(iter(table.to_batches()), task="driver")]
        if kept is not None:
            records = table.select(data_columns)
    else:
        texts = [row.report for row in df.mapInArrow(tail, "report string").collect()]
    reports = by_partition(head, [EpochReport.from_json(t) for t in texts])
    if kept is not None:
        stored = sum(f.size for r in reports.values() for f in r.files)
        if not local:
            kept[head] = (sized_for_joins(df.select(*data_columns), stored), df)
        elif collected is None:  # the body's own local frame: kept as it came
            kept[head] = (arrow_frame(source.sparkSession, records), None)
        elif records.num_rows <= LOCAL_FRAME_ROWS:  # nothing held in Spark; joins as a read from the store would
            kept[head] = (sized_for_joins(arrow_frame(source.sparkSession, records), stored), None)
        else:  # too many rows for a local relation: held in Spark, as the tail in Spark would
            in_spark = source.sparkSession.createDataFrame(records).localCheckpoint(eager=True)
            kept[head] = (sized_for_joins(in_spark, stored), in_spark)
    for p in range(num_partitions):
        if p not in reports:
            empty = {name: 0.0 for name, (_c, agg) in metrics.items() if agg == "sum"}
            reports[p] = EpochReport(head, p, epoch, attempt_id, 0, empty, (), schema_json,
                                     Profile(key_columns, facts).to_dict() if profile else None)
            store.put(f"{report_prefix}/part-{p:05d}.json", reports[p].to_json().encode())
    return [reports[p] for p in range(num_partitions)]


_PID = "__iterations_partition"

# write_dataset(on_driver=True, kept=...): a collected variable of at most this many records is
# kept as a local frame (a local relation in the next epoch's plan); more are kept in Spark. The
# optimizer evaluates a local relation's projections and filters on the driver, once for every
# place a plan reads it: connected components' step reads its variable in some forty, and a
# local relation of 515,000 edges filled a 2g driver heap with forty copies of it.
LOCAL_FRAME_ROWS = 1000


def _collect(df: DataFrame, head: str, epoch: int) -> Any | None:
    """``df`` (its records and their partition ids) as one Arrow table on the driver: one Spark
    job. None when its results are more than ``spark.driver.maxResultSize`` allows (Spark stops
    the job before the driver holds them): a variable that was small in the checkpoint the epoch
    started from can grow past what the driver may hold in one epoch, and is then written in
    Spark, by the same rule whenever the epoch is computed again."""
    try:
        return df.toArrow()
    except Exception as e:
        if "maxResultSize" not in str(e):
            raise
        log.warning("epoch %s: %r grew past what the driver may collect (spark.driver.maxResultSize): "
                    "written in Spark instead", epoch, head)
        return None


def by_partition(head: str, reports: Sequence[EpochReport]) -> dict[int, EpochReport]:
    """The tasks' reports by partition. A partition is written by exactly one task: the tail's
    shuffle is by the partition column, whose shuffle partitions adaptive execution may merge
    but never splits; if two tasks ever reported one partition, keeping either report would
    drop the other's file from the checkpoint, so the attempt fails instead."""
    found: dict[int, EpochReport] = {}
    twice: set[int] = set()
    for r in reports:
        if r.partition in found:
            twice.add(r.partition)
        found[r.partition] = r
    if twice:
        raise CheckpointError(f"{head}: partition(s) {sorted(twice)} were written by more than one Spark task "
                              f"({[f.key for r in reports if r.partition in twice for f in r.files]}); "
                              "the attempt is not committed")
    return found


class _PartitionWriter:
    """Writes one partition's records to one Parquet object and reports it."""

    def __init__(self, store, prefix, report_prefix, head, epoch, attempt_id, partition, task,
                 metrics, data_columns, schema_json, profile=None, job_id=""):
        self.store, self.prefix, self.report_prefix = store, prefix, report_prefix
        self.job_id = job_id
        self.head, self.epoch, self.attempt_id = head, epoch, attempt_id
        self.partition, self.task = partition, task
        self.metrics, self.data_columns, self.schema_json = metrics, data_columns, schema_json
        self.buf = io.BytesIO()
        self.writer = None
        self.rows = 0
        self.partial: dict[str, float] = {}
        self.profile: Profile | None = profile

    def write(self, batch) -> None:
        import numpy as np
        import pyarrow.parquet as pq

        for name, (col, agg) in self.metrics.items():
            values = np.asarray(batch.column(col).to_numpy(zero_copy_only=False), dtype="float64")
            value = float({"sum": np.sum, "max": np.max, "min": np.min}[agg](values))
            if name not in self.partial:
                self.partial[name] = value
            elif agg == "sum":
                self.partial[name] += value
            else:
                self.partial[name] = (max if agg == "max" else min)(self.partial[name], value, key=_nan_first)
        data = batch.select(self.data_columns)
        if self.profile is not None:
            self.profile.add(data)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.buf, data.schema, compression="snappy")
        self.writer.write_batch(data)
        self.rows += batch.num_rows

    def close(self) -> str:
        import hashlib

        files: tuple[FileRef, ...] = ()
        if self.writer is not None:
            self.writer.close()
            blob = self.buf.getvalue()
            key = f"{self.prefix}/part-{self.partition:05d}-{self.task}.parquet"
            self.store.put(key, blob)
            files = (FileRef(key, len(blob), hashlib.sha256(blob).hexdigest(), self.rows),)
        failpoint("tail.partition_written", job=self.job_id, epoch=self.epoch, partition=self.partition,
                  head=self.head)
        for name, (_col, agg) in self.metrics.items():
            if agg == "sum":
                self.partial.setdefault(name, 0.0)
        report = EpochReport(self.head, self.partition, self.epoch, self.attempt_id, self.rows,
                             self.partial, files, self.schema_json,
                             None if self.profile is None else self.profile.to_dict())
        text = report.to_json()
        self.store.put(f"{self.report_prefix}/part-{self.partition:05d}.json", text.encode())
        return text


class Profile:
    """A partition's profile for the data checks, built from the record batches the tail
    writes (no second pass): records; per column its nulls; per numeric column its
    non-finite values (NaN, +-inf) and the min, max and sum of its finite values; the records
    whose key equals the previous record's (records arrive sorted by key, so these are the
    duplicate keys). ``include.checks`` combines the partitions' profiles."""

    def __init__(self, key_columns: Sequence[str] = (), facts: Mapping[str, float] | None = None):
        self.key_columns = tuple(key_columns)
        self.facts = {k: float(v) for k, v in (facts or {}).items()}
        self.rows = 0
        self.columns: dict[str, dict[str, Any]] = {}
        self.duplicate_keys = 0
        self._last_key: tuple | None = None

    def add(self, batch) -> None:
        import numpy as np
        import pyarrow as pa

        self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns):
            stats = self.columns.setdefault(name, {"nulls": 0})
            stats["nulls"] += column.null_count
            kind = column.type
            if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
                column, kind = column.flatten(), kind.value_type  # an array's stats: over its elements
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                continue
            values = column.drop_null().to_numpy(zero_copy_only=False)
            if pa.types.is_floating(kind):
                finite = np.isfinite(values)
                stats["nonfinite"] = stats.get("nonfinite", 0) + int(values.size - finite.sum())
                values = values[finite]
            else:
                stats.setdefault("nonfinite", 0)
            stats["sum"] = stats.get("sum", 0.0) + float(values.sum(dtype="float64"))
            if values.size:
                low, high = float(values.min()), float(values.max())
                stats["min"] = low if stats.get("min") is None else min(stats["min"], low)
                stats["max"] = high if stats.get("max") is None else max(stats["max"], high)
        if self.key_columns and batch.num_rows:
            keys = [batch.column(k).to_numpy(zero_copy_only=False) for k in self.key_columns]
            same = np.ones(batch.num_rows - 1, dtype=bool)
            for k in keys:
                same &= k[1:] == k[:-1]
            first = tuple(k[0] for k in keys)
            self.duplicate_keys += int(same.sum()) + int(self._last_key == first)
            self._last_key = tuple(k[-1] for k in keys)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rows": self.rows, "columns": self.columns}
        if self.key_columns:
            d["duplicate_keys"] = self.duplicate_keys
        if self.facts:
            d["facts"] = self.facts
        return d


def _nan_first(v: float) -> tuple[int, float]:
    # max/min that let NaN win, so a NaN anywhere reaches the checks instead of hiding.
    return (1, 0.0) if v != v else (0, v)


# --- reading -------------------------------------------------------------------------------
