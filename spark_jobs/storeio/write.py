"""Writing (the tail): each partition of a dataset to one Parquet object through the store,
hashed, profiled for the data checks, and reported."""

from __future__ import annotations

import io
import logging
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import AtomicType, StructType

from include.checkpoints import EpochReport, FileRef
from include.errors import CheckpointError, IterationError
from include.process import failpoint
from include.store import ObjectStore
from spark_jobs.frames import arrow_frame, arrow_of
from spark_jobs.storeio.hashing import partition_ids
from spark_jobs.storeio.profile import Profile
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
    previous: Mapping[int, FileRef] | None = None,
    total_order: bool = False,
) -> list[EpochReport]:
    """Write ``df`` as P partitions of Parquet under ``prefix`` and one report per partition
    under ``report_prefix``. ``metrics``: name -> (column, aggregation); metric columns are
    aggregated per partition and not written. ``profile``: each report also carries the
    partition's profile (``Profile``), computed from the batches as they are written, for the
    data checks; ``facts``: scalars the body knows about the epoch, carried in every profile.

    A record's partition is ``pmod(hash(keys), P)`` (all columns when there are no keys and
    ``total_order``), computed as a column: Spark may coalesce or reuse shuffles, so its own
    partition ids are not trusted for where a key goes. The records are shuffled by that column,
    so each partition's records reach one Spark task, and the shuffle is left to adaptive
    execution to coalesce (it merges whole shuffle partitions, never splits one): a small dataset
    is written by one task instead of P (each task's Python hand-over costs more than a small
    partition's data). Each Spark task writes one file per partition it holds, records sorted by
    key; partitions that received no record get an empty report from the driver. A dataset with
    neither keys nor ``total_order`` (an output: no epoch reads it back by key) is written where
    Spark computed it instead, its partitions coalesced to at most P, each one partition, in its
    own order, with no shuffle (k-means' finish shuffled every point with its features only to
    spread them by a hash of all their columns).

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

    ``previous``: partition -> the file that partition has in the checkpoint the epoch started
    from (``EpochPlan.shareable``). A partition whose bytes come out the same (size and SHA-256)
    is not written again: its report names that file (docs/design.md, rules of the store).

    ``total_order``: each partition's records are sorted by the key columns, then by every other
    data column of an atomic type, so that a partition's bytes do not depend on the order its
    records reached the tail when keys repeat (a variable: an epoch is verifiable, and an
    unchanged partition is recognised as unchanged). Without it, by the key columns alone.

    ``job_id``: only named to the failure points (tests place faults in one job's tail).
    """
    tail = Tail.of(df, store=store, prefix=prefix, report_prefix=report_prefix, head=head, epoch=epoch,
                   attempt_id=attempt_id, num_partitions=num_partitions, key_columns=key_columns, metrics=metrics,
                   profile=profile, facts=facts, job_id=job_id, previous=previous, total_order=total_order)
    path = write_path(df, tail, keep=kept is not None, on_driver=on_driver)
    reports = by_partition(head, path.write(tail))
    if kept is not None:
        kept[head] = path.kept(sum(f.size for r in reports.values() for f in r.files))
    return tail.complete(reports)


def write_path(df: DataFrame, tail: Tail, *, keep: bool = False, on_driver: bool = False) -> WritePath:
    """How ``df`` is written: by the driver when it holds the records (``LocalFrameWrite``), or
    when ``on_driver`` and one Spark job can collect them (``CollectedWrite``); else by Spark's
    tasks (``SparkWrite``). Each computes a record's partition as Spark's ``pmod(hash(keys), P)``."""
    import pyarrow as pa

    keys = tail.key_columns or tail.data_columns
    # A frame local_frame made: its Arrow table is at hand, and the driver computes Spark's
    # partition ids itself (spark_jobs.storeio.hashing), so no plan is sent to Spark at all
    held = arrow_of(df)
    if held is not None and held.column_names != tail.columns:
        held = None
    pids = partition_ids(held, keys, tail.num_partitions) if held is not None else None
    if pids is not None:
        return LocalFrameWrite(df, held.append_column(_PID, pa.array(pids, pa.int32())))
    with_pid = df.withColumn(_PID, F.pmod(F.hash(*[F.col(c) for c in keys]), F.lit(tail.num_partitions)))
    if df.isLocal():  # rows the driver holds (a frame made from pandas or Arrow): no Spark job
        if held is not None:
            # a type the driver does not hash as Spark does: Spark computes only the partition
            # ids (a collect over the local relation runs no Spark job; toArrow runs one)
            pid_column = pa.array([row[0] for row in with_pid.select(_PID).collect()], pa.int32())
            return LocalFrameWrite(df, held.append_column(_PID, pid_column))
        return LocalFrameWrite(df, with_pid.toArrow())  # a local relation: no Spark job
    if on_driver:
        collected = _collect(with_pid, tail.head, tail.epoch)
        if collected is not None:
            return CollectedWrite(df, collected)
    if tail.in_place:  # nothing to partition by (an output): each Spark partition is one, written where it is
        return SparkWrite(df.coalesce(tail.num_partitions).withColumn(_PID, F.spark_partition_id()), tail, keep,
                          shuffle=False)
    return SparkWrite(with_pid, tail, keep)


class Tail:
    """What every partition's writer needs, whichever path writes it: where to write, the
    epoch and attempt, the data columns and the metrics, the profile. Sent to Spark's tasks by
    ``SparkWrite``: it holds no DataFrame."""

    def __init__(self, *, store: ObjectStore, prefix: str, report_prefix: str, head: str, epoch: int,
                 attempt_id: str, num_partitions: int, key_columns: Sequence[str], metrics: Mapping[str, tuple],
                 profile: bool, facts: Mapping[str, float] | None, job_id: str, columns: Sequence[str],
                 data_columns: Sequence[str], schema_json: str, previous: Mapping[int, FileRef] | None = None,
                 order: Sequence[str] | None = None, in_place: bool = False):
        self.store, self.prefix, self.report_prefix = store, prefix, report_prefix
        self.head, self.epoch, self.attempt_id, self.job_id = head, epoch, attempt_id, job_id
        self.num_partitions, self.key_columns = num_partitions, tuple(key_columns)
        self.metrics, self.profile, self.facts = dict(metrics), profile, facts
        self.columns, self.data_columns, self.schema_json = list(columns), list(data_columns), schema_json
        self.previous = dict(previous or {})
        # what each partition's records are sorted by (after the partition): the keys, then with
        # ``total_order`` the other atomic data columns
        self.order = tuple(self.key_columns if order is None else order)
        # no key columns and no total order (an output): written by Spark's own partitions
        # (``write_path``), not shuffled by a hash of every column
        self.in_place = in_place

    @classmethod
    def of(cls, df: DataFrame, *, metrics: Mapping[str, tuple[str, str]] | None, head: str, total_order: bool = False,
           **options) -> Tail:
        """The tail of ``df``; a metric whose column ``df`` lacks is refused, naming both.
        ``total_order``: see ``write_dataset``."""
        metrics = dict(metrics or {})
        schema = df.schema
        columns = schema.names
        for name, (col, _agg) in metrics.items():
            if col not in columns:
                raise IterationError(f"metric {name!r} needs column {col!r}, which {head!r} does not have: {columns}")
        metric_columns = {col for col, _ in metrics.values()}
        data_columns = [c for c in columns if c not in metric_columns]
        keys = tuple(options.get("key_columns", ()))
        ties = [c for c in data_columns if c not in keys and isinstance(schema[c].dataType, AtomicType)] \
            if total_order else []
        return cls(metrics=metrics, head=head, columns=columns, data_columns=data_columns,
                   schema_json=StructType([schema[c] for c in data_columns]).json(), order=(*keys, *ties),
                   in_place=not keys and not total_order, **options)

    def partitions(self, batches: Iterator[Any], task: Any = None) -> Iterator[str]:
        """Write the records of ``batches`` (sorted by partition, then key), one file and one
        report per partition: the reports' JSON, in order. ``task``: what the files' names say
        wrote them (default: the Spark task's attempt id)."""
        import numpy as np

        if task is None:
            from pyspark import TaskContext

            task = TaskContext.get().taskAttemptId()
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
                        yield current.close()
                    current = _PartitionWriter(self.store, self.prefix, self.report_prefix, self.head, self.epoch,
                                               self.attempt_id, pid, task, self.metrics, self.data_columns,
                                               self.schema_json, self._profile(), self.job_id,
                                               self.previous.get(pid))
                current.write(batch.slice(start, stop - start))
        if current is not None:
            yield current.close()

    def _profile(self) -> Profile | None:
        return Profile(self.key_columns, self.facts) if self.profile else None

    def complete(self, reports: dict[int, EpochReport]) -> list[EpochReport]:
        """Every partition's report, in order: the driver writes an empty one for each
        partition that received no record."""
        for p in range(self.num_partitions):
            if p not in reports:
                empty = {name: 0.0 for name, (_c, agg) in self.metrics.items() if agg == "sum"}
                profile = self._profile()
                reports[p] = EpochReport(self.head, p, self.epoch, self.attempt_id, 0, empty, (), self.schema_json,
                                         None if profile is None else profile.to_dict())
                self.store.put(f"{self.report_prefix}/part-{p:05d}.json", reports[p].to_json().encode())
        return [reports[p] for p in range(self.num_partitions)]


class WritePath:
    """One way of writing a dataset's partitions: ``write`` returns the reports, ``kept`` what
    is kept of the written records (``write_dataset(kept=...)``)."""

    def write(self, tail: Tail) -> list[EpochReport]:
        raise NotImplementedError

    def kept(self, stored: int) -> tuple[DataFrame, DataFrame | None]:
        """(the records, data columns only; the frame ``release_kept`` frees, or None).
        ``stored``: the bytes the records took in the store."""
        raise NotImplementedError


class LocalFrameWrite(WritePath):
    """Records the driver holds (a local frame): written by the driver, with their partition ids
    (computed by the driver, or by Spark on the local rows) in ``table``, sorted as a task would;
    kept as they came, a local frame."""

    def __init__(self, df: DataFrame, table: Any):
        self.spark, self.table, self.records = df.sparkSession, table, None

    def write(self, tail: Tail) -> list[EpochReport]:
        import pyarrow.compute as pc

        order = pc.sort_indices(self.table, sort_keys=[(c, "ascending", "at_start") for c in (_PID, *tail.order)])
        table = self.table.take(order)
        self.records = table.select(tail.data_columns)
        return [EpochReport.from_json(t) for t in tail.partitions(iter(table.to_batches()), task="driver")]

    def kept(self, stored: int) -> tuple[DataFrame, DataFrame | None]:
        return arrow_frame(self.spark, self.records), None


class CollectedWrite(LocalFrameWrite):
    """Records one Spark job collected (``write_dataset(on_driver=True)``), with their partition
    ids: written by the driver; kept as a local frame, marked for broadcast joins as a small
    variable read from the store is, or past ``LOCAL_FRAME_ROWS`` records in Spark, a local
    checkpoint of them (one small job)."""

    def kept(self, stored: int) -> tuple[DataFrame, DataFrame | None]:
        if self.records.num_rows <= LOCAL_FRAME_ROWS:  # nothing held in Spark; joins as a read from the store would
            return sized_for_joins(arrow_frame(self.spark, self.records), stored), None
        # too many rows for a local relation: held in Spark, as the tail in Spark would
        in_spark = self.spark.createDataFrame(self.records).localCheckpoint(eager=True)
        return sized_for_joins(in_spark, stored), in_spark


class SparkWrite(WritePath):
    """Records shuffled by their partition column, so each partition's records reach one Spark
    task, sorted by key, and written by the tasks (``mapInArrow``); only the reports come back.
    ``keep``: the shuffled records are local-checkpointed as the tail reads them (materialised by
    the tail's job) and kept in Spark."""

    def __init__(self, with_pid: DataFrame, tail: Tail, keep: bool, shuffle: bool = True):
        self.df = with_pid.repartition(_PID).sortWithinPartitions(_PID, *tail.order) if shuffle else with_pid
        if keep:
            self.df = self.df.localCheckpoint(eager=False)  # materialised by the tail's job below
        self.data_columns = tail.data_columns

    def write(self, tail: Tail) -> list[EpochReport]:
        def reports(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow as pa

            out_schema = pa.schema([("report", pa.string())])
            for text in tail.partitions(batches):
                yield pa.RecordBatch.from_pylist([{"report": text}], schema=out_schema)

        return [EpochReport.from_json(row.report) for row in self.df.mapInArrow(reports, "report string").collect()]

    def kept(self, stored: int) -> tuple[DataFrame, DataFrame | None]:
        return sized_for_joins(self.df.select(*self.data_columns), stored), self.df


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
                 metrics, data_columns, schema_json, profile=None, job_id="", previous=None):
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
        self.previous: FileRef | None = previous

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
        """Write the file (when it holds records) and the report: the report's JSON."""
        import hashlib

        files: tuple[FileRef, ...] = ()
        if self.writer is not None:
            self.writer.close()
            blob = self.buf.getvalue()
            digest = hashlib.sha256(blob).hexdigest()
            same = self.previous
            if same is not None and same.size == len(blob) and same.sha256 == digest and same.rows == self.rows:
                files = (same,)  # unchanged since the checkpoint the epoch started from: referenced, not written
            else:
                key = f"{self.prefix}/part-{self.partition:05d}-{self.task}.parquet"
                self.store.put(key, blob)
                files = (FileRef(key, len(blob), digest, self.rows),)
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


def _nan_first(v: float) -> tuple[int, float]:
    # max/min that let NaN win, so a NaN anywhere reaches the checks instead of hiding.
    return (1, 0.0) if v != v else (0, v)
