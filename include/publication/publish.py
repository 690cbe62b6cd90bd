"""Phase two of the outputs' two-phase commit: publishing what a committed checkpoint staged
(include.publication.outputs writes each sink), and the job's history of what it published."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Protocol, Sequence

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.lifecycle import Lifecycle, OperatorState
from include.checkpoints.manifest import JobState, Manifest
from include.contract.config import JobConfig
from include.errors import CheckpointError, IterationError
from include.process.failpoints import failpoint, trace
from include.publication.output_owners import OutputOwner, claim_output
from include.publication.outputs import (
    check_not_in_store,
    output_uri,
    publish_dataset,
    publish_delta,
    publish_increment,
    version_of,
)
from include.publication.outputs import published as current_publication
from include.store import ObjectStore, open_store

log = logging.getLogger("iterations")


class HeldLease(Protocol):
    def check(self) -> None:
        """Raise when the run no longer holds the job."""


class PublishingJob(Protocol):
    """What a Publisher needs of its job (an IterationJob gives it): the job's configuration,
    checkpoint log, store and store options, the lease its run holds (None outside a run), who
    owns its output, whether the run takes the output over, and the checkpoint of another job
    it was forked from (include.runs.forks; None for a job that is not a fork)."""

    config: JobConfig
    log: CheckpointLog
    store: ObjectStore
    store_options: Mapping[str, Any]
    lease: HeldLease | None
    output_owner: OutputOwner
    take_over: bool
    forked_from: Mapping[str, Any] | None


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
        crash between its commit and its publication left (a no-op when all are published)."""
        return self.notify_checkpoint_complete(state.latest) if state.latest is not None else {}

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
        output, a final checkpoint's outputs replace theirs. Called after every commit and again on
        every restore (the latest checkpoint's outputs may be the ones a crash left unpublished).

        Exactly once per sink and checkpoint: a sink whose publication is recorded is skipped
        (it is fully finished); the others are published, each idempotently, then recorded. Once
        every sink of an epoch checkpoint is published its staged files are deleted, so no later
        checkpoint leaves staged data behind. Returns output name -> where it was published."""
        if not manifest.outputs or not self.config.output_path:
            return {}
        done = self.log.publications.of(manifest.checkpoint_id)
        if all(name in done for name in manifest.outputs):
            return {name: done[name]["location"] for name in sorted(manifest.outputs)}
        job = self.job
        if job.lease is not None:
            job.lease.check()  # a run that lost the job publishes nothing
        out = open_store(self.config.output_path, **job.store_options)
        if not self._output_claimed:
            claim_output(out, job.output_owner, take_over=job.take_over)
            self._output_claimed = True
        stamp = {"job_id": manifest.job_id, "checkpoint_id": manifest.checkpoint_id, "attempt_id": manifest.attempt_id}
        published = {}
        for name, ds in sorted(manifest.outputs.items()):
            if name in done:
                published[name] = done[name]["location"]
                continue
            failpoint("publish.before_output", job=manifest.job_id, checkpoint=manifest.checkpoint_id, output=name)
            if self.config.output_format == "delta":
                check_not_in_store(out, name)
                where = out.url(name)
                mode = "overwrite" if manifest.kind == "final" else "append"
                publish_delta(self.store, where, ds, stamp, store_options=job.store_options, mode=mode)
            elif manifest.kind == "final":
                publish_dataset(self.store, out, name, ds, stamp, history=self.history)
                where = out.location(name)
            else:
                publish_increment(self.store, out, name, ds, stamp)
                where = out.location(name)
            failpoint("publish.after_output", job=manifest.job_id, checkpoint=manifest.checkpoint_id, output=name)
            trace("output.published", job=manifest.job_id, checkpoint=manifest.checkpoint_id, output=name,
                  kind=manifest.kind, rows=ds.rows)
            self.log.publications.record(manifest.checkpoint_id, name, {
                "location": where, "format": self.config.output_format, "rows": ds.rows,
                "attempt_id": manifest.attempt_id})
            published[name] = where
            log.info("job %s checkpoint %d: sink %s PUBLISHED to %s", manifest.job_id, manifest.checkpoint_id, name, where)
        if manifest.kind == "epoch":
            self._release_staged(manifest)
        return published

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
