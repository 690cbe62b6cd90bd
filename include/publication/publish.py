"""Phase two of the outputs' two-phase commit: publishing what a committed checkpoint staged
(include.publication.outputs writes each sink), and the job's history of what it published."""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Protocol, Sequence

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.lifecycle import Lifecycle, OperatorState
from include.checkpoints.manifest import DatasetRef, JobState, Manifest
from include.contract.config import JobConfig
from include.errors import CheckpointError, IterationError
from include.process.failpoints import failpoint, trace
from include.publication.output_owners import OutputOwner, claim_output
from include.publication.outputs import (
    append_increment,
    check_not_in_store,
    discard_version,
    increment_key,
    output_uri,
    publish_dataset,
    publish_delta,
    publish_increment,
    stage_increment,
    stage_version,
    switch_version,
    version_of,
)
from include.publication.outputs import published as current_publication
from include.store import LocalStore, ObjectStore, open_store

log = logging.getLogger("iterations")


class HeldLease(Protocol):
    def check(self) -> None:
        """Raise when the run no longer holds the job."""


class PublishingJob(Protocol):
    """What a Publisher needs of its job (an IterationJob gives it): the job's configuration,
    checkpoint log, store and store options, the lease its run holds (None outside a run), who
    owns its output, whether the run takes the output over, and the checkpoint of another job
    it was forked from (include.runs.forks; None for a job that is not a fork), and whether a
    person approves its publication first."""

    config: JobConfig
    log: CheckpointLog
    store: ObjectStore
    store_options: Mapping[str, Any]
    lease: HeldLease | None
    output_owner: OutputOwner
    take_over: bool
    forked_from: Mapping[str, Any] | None
    reviewed: bool


class Publisher:
    """Phase two of a job's two-phase commit of outputs (``IterationJob.publisher``): what its
    committed checkpoints staged, published once under its ``output_path``, claimed as its
    own there first (include.publication.output_owners); ``family``: the jobs (in its store)
    whose published versions this one's replace and may delete."""

    def __init__(self, job: PublishingJob, family: Sequence[str] = ()):
        self.job = job
        self.config = job.config
        self.log = job.log
        self.store = job.store
        self.history = PublicationHistory(job.log, [CheckpointLog(job.store, j) for j in family])
        self._output_claimed = False  # once per process: the output location is this job's

    def settle(self, state: JobState) -> dict[str, str]:
        """Nothing is planned on a checkpoint whose outputs are not published: publish what a
        crash between its commit and its publication left (a no-op when all are published).
        Returns what this call published (output -> where), of the latest checkpoint's own
        outputs: nothing when its commit had published them all, so that a caller announces
        each publication once."""
        return self._complete(state.latest)[1] if state.latest is not None else {}

    def lifecycle(self, manifest: Manifest) -> Lifecycle:
        """The operators' states at ``manifest``: what it recorded, with the fully finished sinks
        that have published its outputs PUBLISHED. (A per-epoch sink keeps RUNNING in epoch
        checkpoints; each epoch's publication is in ``log.publications.of(checkpoint_id)``.)"""
        lc = manifest.lifecycle
        done = [f"sink:{s}" for s in self.log.publications.of(manifest.checkpoint_id)]
        done = [s for s in done if s in lc.states and lc.states[s] is OperatorState.FULLY_FINISHED]
        return lc.advance(done, OperatorState.PUBLISHED) if done else lc

    def notify_checkpoint_complete(self, manifest: Manifest) -> dict[str, str]:
        """Commit the outputs a committed checkpoint covers (FLIP-147's notifyCheckpointComplete
        for two-phase-commit sinks): an epoch checkpoint's per-epoch outputs are appended to their
        output, a final checkpoint's outputs replace theirs (after the per-epoch outputs it still
        carries: ``pending_outputs``). Called after every commit and again on every restore (the
        latest checkpoint's outputs may be the ones a crash left unpublished).

        A reviewed job (``job.reviewed``) publishes nothing until a person approved its final
        checkpoint's publication (``stage``, ``approve``): its epochs' outputs wait in its
        checkpoints, and the approved publication switches what ``stage`` copied.

        Exactly once per sink and checkpoint: a sink whose publication is recorded is skipped
        (it is fully finished); the others are published, each idempotently, then recorded. Once
        every sink of an epoch checkpoint is published its staged files are deleted, so no later
        checkpoint leaves staged data behind. Returns output name -> where it was published."""
        return self._complete(manifest)[0]

    def _complete(self, manifest: Manifest) -> tuple[dict[str, str], dict[str, str]]:
        """``notify_checkpoint_complete``: where each of ``manifest``'s own outputs is published,
        and which of them this call published."""
        if not (manifest.outputs or manifest.pending_outputs) or not self.config.output_path:
            return {}, {}
        items = self._items(manifest)
        done = {cid: self.log.publications.of(cid) for cid in {cid for _, cid, _, _ in items}}
        if all(name in done[cid] for _, cid, name, _ in items):
            return {name: done[manifest.checkpoint_id][name]["location"] for name in sorted(manifest.outputs)}, {}
        if self.job.reviewed and self.log.reviews.approval(manifest.checkpoint_id) is None:
            return {}, {}  # staged, reviewed and approved first (stage, approve)
        job = self.job
        if job.lease is not None:
            job.lease.check()  # a run that lost the job publishes nothing
        out = self._output()
        staged = self.log.reviews.staged(manifest.checkpoint_id) if self.job.reviewed else None
        records = (staged or {}).get("records") or {}
        published, new = {}, {}
        for kind, cid, name, ds in items:
            if name in done[cid]:
                if cid == manifest.checkpoint_id:
                    published[name] = done[cid][name]["location"]
                continue
            stamp = self._stamp(manifest, cid, ds)
            failpoint("publish.before_output", job=manifest.job_id, checkpoint=cid, output=name)
            record = self._staged(out, records.get(f"{kind}/{cid}/{name}"), ds, stamp)
            if self.config.output_format == "delta":
                check_not_in_store(out, name)
                where = out.url(name)
                mode = "overwrite" if kind == "final" else "append"
                publish_delta(self.store, where, ds, stamp, store_options=job.store_options, mode=mode)
            elif kind == "final":
                if record is not None:
                    switch_version(out, name, record, history=self.history)
                else:
                    publish_dataset(self.store, out, name, ds, stamp, history=self.history)
                where = out.location(name)
            else:
                if record is not None:
                    append_increment(out, name, record)
                else:
                    publish_increment(self.store, out, name, ds, stamp)
                where = out.location(name)
            failpoint("publish.after_output", job=manifest.job_id, checkpoint=cid, output=name)
            trace("output.published", job=manifest.job_id, checkpoint=cid, output=name,
                  kind=manifest.kind if cid == manifest.checkpoint_id else "epoch", rows=ds.rows)
            self.log.publications.record(cid, name, {
                "location": where, "format": self.config.output_format, "rows": ds.rows,
                "attempt_id": stamp["attempt_id"]})
            if cid == manifest.checkpoint_id:
                published[name] = new[name] = where
            log.info("job %s checkpoint %d: sink %s PUBLISHED to %s", manifest.job_id, cid, name, where)
        if manifest.kind == "epoch":
            self._release_staged(manifest)
        elif manifest.pending_outputs:  # their increments are published: the copies in the checkpoints go
            self.store.delete([f.key for outputs in manifest.pending_outputs.values()
                               for ds in outputs.values() for f in ds.files])
        if staged is not None:
            self.log.reviews.forget_staged(manifest.checkpoint_id)
        return published, new

    @staticmethod
    def _staged(out: ObjectStore, record: Mapping[str, Any] | None, ds: DatasetRef,
                stamp: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """``record`` (what ``stage`` copied of ``ds``) if it is still exactly that - the same
        version, the same files by size and SHA-256, each there in the output with its size -
        else None, and the output is copied again: a publication never names a file the
        checkpoint does not vouch for, nor one that is gone."""
        if not isinstance(record, Mapping) or record.get("version") != version_of(stamp):
            return None
        files = record.get("files") or []
        if [(f.get("size"), f.get("sha256")) for f in files] != [(f.size, f.sha256) for f in ds.files]:
            return None
        there = {o.key: o.size for o in out.list(f"{record['name']}/{record['version']}/")}
        if any(there.get(f.get("key")) != f.get("size") for f in files):
            log.warning("output %s: the staged version %s is not all there any more: copied again",
                        out.location(str(record.get("name"))), record["version"])
            return None
        return record

    @staticmethod
    def _items(manifest: Manifest) -> list[tuple[str, int, str, DatasetRef]]:
        """(kind, checkpoint id, output name, dataset) of everything ``manifest`` publishes, in
        the order it is published: the per-epoch outputs it carries, oldest first, then its own."""
        items = [("increment", cid, name, ds) for cid, outputs in sorted(manifest.pending_outputs.items())
                 for name, ds in sorted(outputs.items())]
        kind = "final" if manifest.kind == "final" else "increment"
        return items + [(kind, manifest.checkpoint_id, name, ds) for name, ds in sorted(manifest.outputs.items())]

    def _stamp(self, manifest: Manifest, cid: int, ds: DatasetRef) -> dict[str, Any]:
        """The stamp of the publication of ``ds``, checkpoint ``cid``'s output: its job, its
        checkpoint, the attempt that wrote it (a carried per-epoch output's, from its key)."""
        attempt = manifest.attempt_id
        if cid != manifest.checkpoint_id and ds.files:
            parsed = self.log.layout.epoch_and_attempt(ds.files[0].key, "attempts")
            attempt = parsed[1] if parsed else attempt
        return {"job_id": manifest.job_id, "checkpoint_id": cid, "attempt_id": attempt}

    def _output(self) -> ObjectStore:
        """The output location's store, claimed as this job's (once per process)."""
        out = open_store(self.config.output_path, **self.job.store_options)
        if not self._output_claimed:
            claim_output(out, self.job.output_owner, take_over=self.job.take_over)
            self._output_claimed = True
        return out

    # -- a reviewed job: stage, then approve or reject ----------------------------------------

    def stage(self, manifest: Manifest) -> dict[str, Any]:
        """Copy what final checkpoint ``manifest`` publishes (its outputs and the per-epoch
        outputs it carries) into the output location as versions no reader sees: not named by
        any ``_PUBLISHED.json`` or increment record, no asset event (Delta Lake outputs stay in
        the checkpoint: a Delta version is only ever written by the publication itself). Every
        byte is verified as it is copied. What is staged is recorded first (the keys each version
        writes), so that a crash half way leaves nothing ``reject`` cannot delete; staging again
        (a retried finish) copies again into the same keys. Returns the staged record."""
        if manifest.kind != "final":
            raise CheckpointError(f"only a final checkpoint's publication is staged, not checkpoint "
                                  f"{manifest.checkpoint_id}")
        if self.job.lease is not None:
            self.job.lease.check()
        fmt = self.config.output_format
        made = None  # the first local directory staging makes: it goes again if nothing is published (``reject``)
        location = self.config.output_location
        if location.is_local:
            here = location.path
            while not os.path.exists(here) and os.path.dirname(here) != here:
                made, here = here, os.path.dirname(here)
        out = open_store(self.config.output_path, **self.job.store_options)  # not claimed: nothing is published yet
        items = []
        for kind, cid, name, ds in self._items(manifest):
            version = version_of(self._stamp(manifest, cid, ds))
            keys = [] if fmt == "delta" else [f"{name}/{version}/part-{i:05d}.parquet" for i in range(len(ds.files))]
            items.append({"kind": kind, "name": name, "checkpoint_id": cid, "version": version, "keys": keys})
        record = {"location": out.location(), "format": fmt, "items": items, "complete": False,
                  "made_location": made}
        self.log.reviews.record_staged(manifest.checkpoint_id, record)
        records: dict[str, Any] = {}
        if fmt == "parquet":
            for kind, cid, name, ds in self._items(manifest):
                stamp = self._stamp(manifest, cid, ds)
                records[f"{kind}/{cid}/{name}"] = (
                    stage_version(self.store, out, name, ds, stamp, history=self.history) if kind == "final"
                    else stage_increment(self.store, out, name, ds, stamp))
        record = {**record, "complete": True, "records": records}
        self.log.reviews.record_staged(manifest.checkpoint_id, record)
        failpoint("publish.after_stage", job=manifest.job_id, checkpoint=manifest.checkpoint_id)
        log.info("job %s checkpoint %d: %d output version(s) staged in %s for review (not published)",
                 manifest.job_id, manifest.checkpoint_id, len(items), out.location())
        return self.log.reviews.staged(manifest.checkpoint_id) or record

    def approve(self, manifest: Manifest, by: str | None) -> None:
        """A person approved the publication of final checkpoint ``manifest``: the approval is
        recorded (once); from then on its publication (``notify_checkpoint_complete``) switches
        what ``stage`` copied, each output exactly once across retries."""
        self.log.reviews.approve(manifest.checkpoint_id, by)

    def reject(self, manifest: Manifest, by: str | None, why: str) -> int:
        """A person rejected the publication of ``manifest`` (or nobody answered in time): what
        was staged is deleted (only the keys staging recorded, each checked by shape), the
        rejection recorded; nothing visible ever changed. How many files were deleted."""
        if self.log.reviews.approval(manifest.checkpoint_id) is not None:
            raise CheckpointError(f"the publication of checkpoint {manifest.checkpoint_id} of job {manifest.job_id} "
                                  "was approved already; it is not rejected")
        staged = self.log.reviews.staged(manifest.checkpoint_id)
        deleted = 0
        if staged is not None and staged["format"] == "parquet":
            out = open_store(self.config.output_path, **self.job.store_options)
            for item in staged["items"]:
                files = [{"key": k} for k in item["keys"]]
                if item["kind"] == "final":
                    deleted += discard_version(out, item["name"], {"version": item["version"], "files": files},
                                               history=self.history)
                elif not out.exists(increment_key(item["name"], {"job_id": manifest.job_id,
                                                                 "checkpoint_id": item["checkpoint_id"]})):
                    deleted += discard_version(out, item["name"], {"version": item["version"], "files": files})
            made = staged.get("made_location")
            if isinstance(made, str) and isinstance(out, LocalStore) and \
                    (out.root == made or out.root.startswith(made.rstrip(os.sep) + os.sep)):
                here = out.root  # the directories staging made, if empty again: the location is as it was
                while not os.listdir(here):
                    os.rmdir(here)
                    if here == made:
                        break
                    here = os.path.dirname(here)
        self.log.reviews.reject(manifest.checkpoint_id, by, why)
        self.log.reviews.forget_staged(manifest.checkpoint_id)
        log.info("job %s checkpoint %d: publication not approved (%s): %d staged file(s) deleted, nothing published",
                 manifest.job_id, manifest.checkpoint_id, why, deleted)
        return deleted

    def awaits_approval(self, manifest: Manifest | None) -> bool:
        """A reviewed job's final checkpoint whose publication is neither approved nor done."""
        return (self.job.reviewed and manifest is not None and manifest.kind == "final"
                and bool(manifest.outputs or manifest.pending_outputs) and bool(self.config.output_path)
                and self.log.reviews.approval(manifest.checkpoint_id) is None)

    def _release_staged(self, manifest: Manifest) -> None:
        """close() of an epoch's sinks: their staged files were published; delete them."""
        keys = [f.key for ds in manifest.outputs.values() for f in ds.files]
        if keys:
            self.store.delete(keys)

    def publications(self, manifest: Manifest, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """What checkpoint ``manifest`` published, one record per output, in the form an
        orchestrator announces it (an Airflow asset event, an OpenLineage output dataset):
        ``{"name", "uri", "extra": {"job_id", "checkpoint_id", "version", ...}}`` (a fork's also
        ``forked_from``: its parent's job id, checkpoint and epoch). ``version``
        names the publication (the same for a retry, another for a recompute). A final
        checkpoint's outputs (``names``: None, the recorded publications): also ``rows``,
        ``format`` and ``replaces``, the version it replaced, when it replaced one. An epoch
        checkpoint's appended outputs: ``names``, the ones its commit published (no I/O)."""
        if not manifest.outputs or not self.config.output_path:
            return []
        stamp = {"job_id": manifest.job_id, "checkpoint_id": manifest.checkpoint_id}
        version = version_of(stamp)
        forked = self.job.forked_from
        parent = {"forked_from": {k: forked[k] for k in ("job_id", "checkpoint_id", "epoch")}} if forked else {}

        def record(name: str, **extra: Any) -> dict[str, Any]:
            return {"name": name, "uri": output_uri(self.config.output_path, name),
                    "extra": {**stamp, "version": version, **parent, **extra}}

        if manifest.kind != "final":
            return [record(name) for name in sorted(names or ())]
        done = self.log.publications.of(manifest.checkpoint_id)
        records = []
        for name in sorted(manifest.outputs):
            if name not in done or (names is not None and name not in names):
                continue
            fmt = done[name].get("format", "parquet")
            replaces = None
            if fmt == "parquet":
                try:
                    current = current_publication(self.config.output_path, name, **self.job.store_options).manifest
                except (IterationError, OSError) as e:  # a reader's problem, not the announcement's
                    log.warning("output %s: its manifest could not be read (%s)",
                                output_uri(self.config.output_path, name), e)
                    current = None
                if current is not None and current.get("version") == version:
                    replaces = current.get("replaces")
            records.append(record(name, rows=int(done[name].get("rows", 0)), format=fmt, replaces=replaces))
        return records

    def publish(self, manifest: Manifest) -> dict[str, str]:
        """Publish the outputs of the final checkpoint under ``output_path`` (see
        ``notify_checkpoint_complete``): each output replaced atomically, as Parquet files behind
        a manifest or as a Delta Lake table version (``output_format``); idempotent."""
        if manifest.kind != "final":
            raise CheckpointError(f"only a final checkpoint has outputs to publish, not checkpoint {manifest.checkpoint_id}")
        return self.notify_checkpoint_complete(manifest)


class PublicationHistory:
    """The job's record of the versions it wrote into its outputs (include.publication.outputs), read over
    the job and the jobs it replaces; retired in the log that recorded them."""

    def __init__(self, own: CheckpointLog, family: Sequence[CheckpointLog] = ()):
        self.own = own
        self.family = list(family)

    def wrote(self, location: str, name: str, version: str, keys: Sequence[str]) -> None:
        self.own.publications.record_written(location, name, version, list(keys))

    def written(self, location: str, name: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for log_ in [*self.family, self.own]:
            out.update(log_.publications.written(location, name))
        return out

    def retired(self, location: str, name: str, version: str) -> None:
        for log_ in [self.own, *self.family]:
            log_.publications.mark_retired(location, name, version)
