"""The Spark entry point for one epoch (or the finish step) of a registered iteration body.

Called on a warm session (``EpochExecutor``) or spark-submitted as a script::

    python -m spark_jobs.epoch --checkpoint-root ROOT --job-id JOB --checkpoint-id K --attempt-id A

The plan is read from the attempt's ``_PLAN.json``; the job writes the feedback log, the
per-partition reports (and, for the finish step, the outputs) under the attempt, and nothing
else. Committing is not its business.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from typing import Any, Mapping

from include.checkpoints import CheckpointLog, EpochReport
from include.contract import EpochContext, IterationBody, body_reference, resolve_body
from include.epoch import EpochPlan
from include.errors import CheckpointError, InputDataError
from include.process import failpoint
from include.store import ObjectStore, open_store
from spark_jobs.executor_errors import first_line, lost_kept_block, raise_executor_error
from spark_jobs.handover import SessionHandover
from spark_jobs.session import is_classic, ship_body

log = logging.getLogger("iterations")

# EpochExecutor(driver_tail_bytes=...): a variable stored in at most this many bytes is small
# enough for the driver to hold and write (in memory, Parquet's size a few times over)
DRIVER_TAIL_BYTES = 4 << 20
# ... and of at most this many records: past them, collecting, writing from one Python process
# and handing the records back to Spark costs more than the tail in Spark (bench/RESULTS.md)
DRIVER_TAIL_ROWS = 100_000


class EpochExecutor:
    """Runs attempts on one Spark session, keeping each job's static data cached between epochs.

    ``handoff``: also keep each job's latest variables as the tail wrote them (local-checkpointed
    in Spark), and start the next epoch from them instead of reading the checkpoint back, when
    the plan restores exactly the files that attempt wrote (same object keys: the checkpoint
    it committed). Anything else (another attempt's checkpoint, a rewind, a new executor after a
    crash) reads the store. For an executor that runs epoch after epoch of a job on one session
    (the library runner); one that runs a single attempt gains nothing from it.

    ``driver_tail_bytes``: on a classic session (not Spark Connect), an epoch's variable whose
    previous value took at most this many bytes in the store (and ``DRIVER_TAIL_ROWS`` records)
    is written by the driver (``write_dataset(on_driver=True)``): one Spark job collects it,
    instead of a shuffle and a Python worker writing it; kept, it is a local frame (in Spark past
    ``write.LOCAL_FRAME_ROWS`` records). The rule reads only the checkpoint the
    plan restores, so an attempt that computes the epoch again writes it the same way. Epoch 0
    (restoring nothing) and Spark Connect sessions always write in Spark: there what is kept must
    stay on the server, for the next task process to take over. None: ``DRIVER_TAIL_BYTES``;
    -1: never."""

    def __init__(self, spark, store_options: Mapping[str, Any] | None = None, *, handoff: bool = False,
                 shared: bool = False, driver_tail_bytes: int | None = None):
        self.spark = spark
        self.store_options = dict(store_options or {})
        self.handoff = handoff
        # a classic session's small variables are written by its driver (``_driver_tail``)
        self.driver_tail_bytes = -1 if not is_classic(spark) else \
            DRIVER_TAIL_BYTES if driver_tail_bytes is None else driver_tail_bytes
        # a Spark Connect session that later processes attach to (an Airflow batch's): what the
        # tail kept is also named in the session, for the next process to take over
        self.shared = shared and handoff and type(spark).__module__.startswith("pyspark.sql.connect")
        self._data: dict[str, tuple[dict, list]] = {}
        # job id -> head -> (object keys the tail wrote, schema, (records, checkpointed frame))
        self._kept: dict[str, dict[str, tuple[frozenset[str], str, Any]]] = {}
        self._lock = threading.Lock()
        self._shipped: set[str] = set()  # the body references whose package this session has
        self.handover = SessionHandover(spark)

    def _load(self, body: IterationBody, plan: EpochPlan, params: Any) -> tuple[dict, str]:
        """The body's static data, and where it came from: "kept from an earlier epoch" of this
        executor, "taken over from the Spark Connect session" (another process's load, named in
        the shared session) or "loaded"."""
        from spark_jobs.storeio import input_version, read_input

        key = SessionHandover.static_key(plan)
        if key in self._data:
            return self._data[key][0], "kept from an earlier epoch"
        version = None
        if self.shared and body.static_input:
            version = input_version(plan.input_spec(), **self.store_options)
        data = self.handover.static_named(plan, key, version) if self.shared else None
        how = "taken over from the Spark Connect session"
        if data is None:
            raw = read_input(self.spark, plan.input_spec(), plan.num_partitions, **self.store_options) \
                if body.static_input else None
            data, how = body.load(raw, params), "loaded"
            if self.shared:
                self.handover.name_static(plan, key, version, data)
        self._data[key] = (data, [df for df in data.values() if hasattr(df, "unpersist")])
        return data, how

    def release(self) -> None:
        for key, (_data, frames) in list(self._data.items()):
            for df in frames:
                df.unpersist()
            if self.shared:  # uncached: the next process loads it again, and caches it
                self.handover.unname_static(key)
        self._data.clear()
        with self._lock:
            jobs = list(self._kept)
        for job_id in jobs:
            self._drop_kept(job_id)

    def _drop_kept(self, job_id: str, keep: Mapping[str, tuple] | None = None) -> None:
        """Forget a job's kept variables (and free them), or replace them by ``keep``."""
        with self._lock:
            old = self._kept.pop(job_id, {})
            if keep:
                self._kept[job_id] = dict(keep)
        if self.shared:
            for head in set(old) - set(keep or {}):
                self.handover.unname_kept(job_id, head)
            for head, (keys, schema, (_records, checkpointed)) in (keep or {}).items():
                self.handover.name_kept(job_id, head, keys, schema, checkpointed)
        if old:
            from spark_jobs.storeio import release_kept

            for _keys, _schema, (_records, checkpointed) in old.values():
                release_kept(checkpointed)

    @staticmethod
    def _release(kept: dict[str, Any] | None) -> None:
        """Free what an attempt's tail kept so far (and empty ``kept``)."""
        if not kept:
            return
        from spark_jobs.storeio import release_kept

        for _records, checkpointed in kept.values():
            release_kept(checkpointed)
        kept.clear()

    def _take_over(self, plan: EpochPlan, head: str, ds, keys: frozenset[str]) -> Any | None:
        """The records another process kept in the shared session for ``head`` (the objects
        ``keys`` of ``ds``), now kept by this executor; or None."""
        taken = self.handover.take_over_kept(plan, head, ds, keys)
        if taken is None:
            return None
        records, frame = taken
        with self._lock:
            self._kept.setdefault(plan.job_id, {})[head] = (keys, ds.schema, (records, frame))
        return records

    def _kept_for(self, plan: EpochPlan, ds, keys: frozenset[str]) -> Any | None:
        with self._lock:
            for kept_keys, schema, (records, _checkpointed) in self._kept.get(plan.job_id, {}).values():
                if kept_keys == keys and schema == ds.schema:
                    return records
        return None

    def _context(self, plan: EpochPlan) -> tuple[IterationBody, Any, EpochContext]:
        reference = plan.body.get("ref") or plan.body["name"]
        body = resolve_body(reference)
        if reference not in self._shipped:
            ship_body(self.spark, body_reference(reference))
            self._shipped.add(reference)
        params = body.parse_params(plan.body.get("params", {}))
        self.spark.conf.set("spark.sql.shuffle.partitions", str(plan.num_partitions))
        return body, params, EpochContext(plan.epoch, plan.num_partitions, params, self.spark, plan.events or {},
                                         plan.input_spec(), self.store_options)

    def _variables(self, plan: EpochPlan, store: ObjectStore) -> tuple[dict | None, list]:
        """The restored variables, and those of them read from the store (to unpersist)."""
        from spark_jobs.storeio import read_dataset, sized_for_joins

        if plan.restore is None:
            return None, []
        variables, read = {}, []
        for name, ds in plan.restore_datasets().items():
            kept = None
            keys = frozenset(f.key for f in ds.files)
            # nothing written (no records): nothing to match on, and nothing to read
            if self.handoff and len(ds.partitions) == plan.partitions_of(name) and keys:
                kept = self._kept_for(plan, ds, keys)
                if kept is None and self.shared:
                    kept = self._take_over(plan, name, ds, keys)
            if kept is not None:
                variables[name] = kept
                continue
            # Cached: a body may read its variables several times in one step (PageRank does 3
            # times); the replay then reads and verifies each object once.
            cached = read_dataset(self.spark, store, ds, plan.partitions_of(name)).cache()
            variables[name] = sized_for_joins(cached, ds.size)
            read.append(cached)
        if self.handoff:
            log.info("job %s %s %d: variables %s", plan.job_id, plan.kind, plan.checkpoint_id,
                     "kept in Spark from the attempt that wrote them" if not read else "read from the checkpoint")
        return variables, read

    def run_epoch(self, plan: EpochPlan, store: ObjectStore) -> list[EpochReport]:
        """Compute one epoch; the tail writes the feedback log and the reports."""
        if plan.kind != "epoch":
            raise CheckpointError(f"run_epoch() takes epoch plans, not {plan.kind}")
        started = time.monotonic()
        body, params, ctx = self._context(plan)
        data, data_from = self._load(body, plan, params)
        loaded = time.monotonic()
        restored, read = self._variables(plan, store)
        from_kept = restored is not None and len(read) < len(restored)
        restored_at = time.monotonic()
        kept: dict[str, Any] | None = {} if self.handoff else None
        try:
            try:
                reports = self._step(plan, store, body, data, ctx, restored, kept)
            except Exception as e:
                if not (from_kept and lost_kept_block(e)):
                    raise
                # A kept variable is gone with the executor that held it (Spark cannot recompute
                # a local checkpoint): the epoch starts again, in this attempt, from the
                # checkpoint the variables were written to. Nothing of the attempt is committed
                # yet; the tail's second pass writes every partition's report again.
                log.warning("job %s epoch %d attempt %s: variables kept in Spark were lost with an executor "
                            "(%s); the epoch runs again from the variables in checkpoint %s", plan.job_id, plan.epoch,
                            plan.attempt_id, first_line(e), plan.parent_id)
                self._release(kept)
                self._drop_kept(plan.job_id)
                restored, again = self._variables(plan, store)
                read += again
                restored_at = time.monotonic()
                reports = self._step(plan, store, body, data, ctx, restored, kept)
            stepped_at = time.monotonic()
            log.info("job %s epoch %d attempt %s: static input %.2fs (%s), restore %.2fs (%s), step and tail %.2fs",
                     plan.job_id, plan.epoch, plan.attempt_id, loaded - started, data_from, restored_at - loaded,
                     "none" if restored is None else "read from the checkpoint" if read else "kept in Spark",
                     stepped_at - restored_at)
            CheckpointLog(store, plan.job_id).record_phases(plan.epoch, plan.attempt_id, {
                "input": loaded - started, "restore": restored_at - loaded, "step": stepped_at - restored_at})
        except BaseException:
            if kept is not None:  # nothing of a failed attempt is kept, nor what it started from
                self._release(kept)
                self._drop_kept(plan.job_id)
            raise
        finally:
            for df in read:
                df.unpersist()
        if kept is not None:
            by_head = {h: frozenset(f.key for r in reports if r.head == h for f in r.files) for h in kept}
            schemas = {r.head: r.schema for r in reports}
            self._drop_kept(plan.job_id, {h: (by_head[h], schemas[h], df) for h, df in kept.items()})
        return reports

    def _step(self, plan, store, body, data, ctx, restored, kept=None) -> list[EpochReport]:
        if restored is None:
            variables = body.init(data, ctx)
        elif plan.warm_start and plan.parent_id is None:  # epoch 0 from another job's final state
            variables = body.warm_start(restored, data, ctx)
        elif plan.first_of_fork:  # a fork's first epoch: its parent's state, made to fit the fork's params
            variables = body.fork(restored, data, ctx)
        else:
            variables = restored
        result = body.step(variables, data, ctx)
        missing = set(plan.heads) - set(result.variables)
        if missing:
            raise CheckpointError(f"body {plan.body['name']!r} returned no variables for heads {sorted(missing)}")
        aggregations = plan.body["metric_aggregations"]
        undeclared = sorted(set(result.metrics) - set(aggregations))
        if undeclared:
            raise CheckpointError(f"body {plan.body['name']!r} returned undeclared metric(s) {undeclared}")
        bad = {k: v for k, v in result.facts.items()
               if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float))}
        if bad:
            raise CheckpointError(f"body {plan.body['name']!r} returned facts that are not numbers: {bad}")
        declared = list(plan.body.get("epoch_outputs", []))
        if sorted(result.outputs) != sorted(declared):
            raise CheckpointError(
                f"body {plan.body['name']!r} returned epoch outputs {sorted(result.outputs)}, "
                f"it declares epoch_outputs {sorted(declared)}")
        metrics: dict[str, dict[str, tuple[str, str]]] = {}
        for name, (head, col) in result.metrics.items():
            metrics.setdefault(head, {})[name] = (col, aggregations[name])
        failpoint("epoch.before_write", epoch=plan.epoch)
        # per-epoch outputs are staged like the finish step's: the checkpoint covers them and
        # they are published once it commits (a two-phase commit per epoch)
        if declared:
            self._write(plan, store, result.outputs, declared, data_dir="outputs", report_dir="_outputs")
        return self._write(plan, store, result.variables, list(plan.heads), data_dir="",
                           report_dir="_reports", keys=plan.heads, metrics=metrics, facts=result.facts, kept=kept,
                           on_driver=self._driver_tail(plan), heads=True)

    def _driver_tail(self, plan: EpochPlan) -> frozenset[str]:
        """The heads the driver writes (``driver_tail_bytes``): those whose dataset in the
        checkpoint the plan restores is that small, in bytes and in records (``DRIVER_TAIL_ROWS``)."""
        if plan.restore is None or self.driver_tail_bytes < 0:
            return frozenset()
        return frozenset(name for name, ds in plan.restore_datasets().items()
                         if name in plan.heads and ds.size <= self.driver_tail_bytes and ds.rows <= DRIVER_TAIL_ROWS)

    def _write(self, plan, store, frames, names, *, data_dir, report_dir, keys=None, metrics=None,
               facts=None, kept=None, on_driver=frozenset(), heads=False) -> list[EpochReport]:
        """The tail: write each named dataset under the attempt, one report per partition;
        ``heads``: the datasets are the heads, each in its own number of partitions
        (``EpochPlan.partitions_of``), else outputs, in the job's."""
        from spark_jobs.storeio import write_dataset

        root = CheckpointLog(store, plan.job_id).layout.attempt(plan.checkpoint_id, plan.attempt_id)
        shareable = plan.shareable() if heads else {}
        reports: list[EpochReport] = []
        for name in names:
            reports += write_dataset(
                frames[name],
                store=store,
                prefix="/".join(p for p in (root, data_dir, name) if p),
                report_prefix=f"{root}/{report_dir}/{name}",
                head=name,
                epoch=plan.checkpoint_id,
                attempt_id=plan.attempt_id,
                num_partitions=plan.partitions_of(name) if heads else plan.num_partitions,
                key_columns=(keys or {}).get(name, ()),
                metrics=(metrics or {}).get(name),
                profile=plan.profile,
                facts=facts,
                kept=kept,
                job_id=plan.job_id,
                on_driver=name in on_driver,
                previous=shareable.get(name),
                total_order=heads,
            )
        if shareable:
            shared = [f for r in reports for f in r.files if not f.key.startswith(root + "/")]
            if shared:
                log.info("job %s epoch %d attempt %s: %d partition file(s) unchanged since checkpoint %s, "
                         "referenced, not written again (%d of %d bytes)", plan.job_id, plan.checkpoint_id,
                         plan.attempt_id, len(shared), plan.parent_id, sum(f.size for f in shared),
                         sum(f.size for r in reports for f in r.files))
        return reports

    def run_finish(self, plan: EpochPlan, store: ObjectStore) -> list[EpochReport]:
        """Compute the outputs from the final variables and stage them under the attempt."""
        if plan.kind != "final":
            raise CheckpointError(f"run_finish() takes final plans, not {plan.kind}")
        body, params, ctx = self._context(plan)
        data, _kept = self._load(body, plan, params)
        restored, read = self._variables(plan, store)
        try:
            outputs = body.finish(restored, data, ctx)
            missing = [n for n in plan.body.get("outputs", []) if n not in outputs]
            if missing:
                raise CheckpointError(f"body {plan.body['name']!r} finish() returned no output(s) {missing}")
            return self._write(plan, store, outputs, plan.body.get("outputs", []), data_dir="outputs",
                               report_dir="_outputs")
        finally:
            for df in read:
                df.unpersist()
            self._drop_kept(plan.job_id)  # the job's last step: its variables are not needed here again

    def run(self, plan: EpochPlan, store: ObjectStore) -> list[EpochReport]:
        from spark_jobs.session import make_active

        make_active(self.spark)
        try:
            return self.run_finish(plan, store) if plan.kind == "final" else self.run_epoch(plan, store)
        except Exception as e:
            raise_executor_error(e)
            raise


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point: run one recorded attempt."""
    parser = argparse.ArgumentParser(prog="spark_jobs.epoch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint-root", required=True, help="local directory or s3://bucket/prefix")
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--checkpoint-id", type=int, required=True, help="the epoch (or the final checkpoint id)")
    parser.add_argument("--attempt-id", required=True)
    parser.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, moto); default from the environment")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)

    options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    store = open_store(args.checkpoint_root, **options)
    recorded = CheckpointLog(store, args.job_id).read_plan(args.checkpoint_id, args.attempt_id)
    if recorded is None:
        raise SystemExit(
            f"no plan for job {args.job_id} checkpoint {args.checkpoint_id} attempt {args.attempt_id} "
            f"under {store.location()}"
        )
    plan = EpochPlan.from_dict(recorded)
    from spark_jobs.session import get_spark

    started = time.monotonic()
    executor = EpochExecutor(get_spark(f"iterations-{plan.job_id}-{plan.checkpoint_id}"), options)
    try:
        reports = executor.run(plan, store)
    except InputDataError as e:
        log.error("%s", e)
        return 2
    log.info(
        "job %s %s %d attempt %s: %d partition reports, %d records, %.2fs",
        plan.job_id, plan.kind, plan.checkpoint_id, plan.attempt_id, len(reports),
        sum(r.feedback_count for r in reports), time.monotonic() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
