"""Forks: a new job that starts from another job's committed checkpoint (``fork_from``).

A fork of job P at epoch k (``fork_from="P:k"``; ``"P"``: P's newest kept epoch checkpoint) is a
job of its own: its own id, owner, lease, directory in the checkpoint store and output. Its first
checkpoint is a copy of P's checkpoint k, every object verified against its SHA-256 as it is read
(include.runs.generations.seed, the one rule rewinds use too); it reads exactly the input P pinned
(P's pin is copied with it); from epoch k+1 on it runs with its own params (damping, k,
tolerance, max_epochs...), and whether epoch k already ends it is decided again by those
(``redecide``). P is only ever read, through a read-only view of the store: nothing of P changes.

Refused before anything is written (``check_fork``), each with the reason in words: a fork of a
job the run may not read (a DAG forks only its own DAG's jobs: the owner record's DAG), of a
job or checkpoint that is not there (never committed, or retired by retention), of a final
checkpoint, with another body, other heads, another input, or into a job that exists already;
a fork whose body gives a variable another schema than P's is refused at its first commit,
naming the variable and both schemas (include.epoch.commit).

Record (``jobs/<fork>/fork.json``, create-if-absent, under the fork's lease)::

    {"format": "iterations.fork/1", "job_id": <fork>, "parent": {"job_id", "checkpoint_id", "epoch"},
     "at": <time>}

Every later run of the fork finds it there: its plans, its asset events' extra and its lineage
name the parent (``forked_from``), and the Iterations view shows a job's parent and its forks
(``forks_of``: the fork records in the same store).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any, Mapping

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import HeadStatus
from include.checkpoints.job_records import now_iso
from include.checkpoints.layout import JOB_ID_PATTERN, JobLayout, check_job_id, report_foreign
from include.checkpoints.manifest import Manifest
from include.contract.body import resolve_body
from include.contract.config import JobConfig
from include.epoch.aligner import TerminationCriteria
from include.errors import CheckpointCorrupted, CheckpointError, ForkRefused, ObjectNotFound
from include.runs.ownership import OwnershipError, read_owner
from include.store import ObjectStore
from include.store.readonly import ReadOnlyStore

if TYPE_CHECKING:
    from include.epoch.job import IterationJob

log = logging.getLogger("iterations")

FORK_FORMAT = "iterations.fork/1"


def _origin(parent: str, manifest: Manifest) -> dict[str, Any]:
    return {"job_id": parent, "checkpoint_id": manifest.checkpoint_id, "epoch": manifest.epoch}


def _check_origin(value: Any, where: str) -> dict[str, Any]:
    """A fork record's ``parent``, checked by shape (CheckpointCorrupted naming ``where``)."""
    ok = (isinstance(value, Mapping) and set(value) == {"job_id", "checkpoint_id", "epoch"}
          and isinstance(value["job_id"], str) and JOB_ID_PATTERN.fullmatch(value["job_id"]) is not None
          and all(isinstance(value[k], int) and not isinstance(value[k], bool) and value[k] >= 0
                  for k in ("checkpoint_id", "epoch")))
    if not ok:
        raise CheckpointCorrupted(f"the fork record {where} is damaged: its parent is {value!r}"[:400])
    return dict(value)


def read_fork(store: ObjectStore, job_id: str) -> dict[str, Any] | None:
    """The checkpoint job ``job_id`` was forked from (``{"job_id", "checkpoint_id", "epoch"}``);
    None for a job that is not a fork. CheckpointCorrupted if the record is damaged."""
    key = JobLayout(check_job_id(job_id)).fork()
    try:
        data = store.get(key)
    except ObjectNotFound:
        return None
    where = store.location(key)
    try:
        record = json.loads(data)
    except ValueError:
        raise CheckpointCorrupted(f"the fork record {where} is not JSON") from None
    if not isinstance(record, dict) or record.get("format") != FORK_FORMAT or record.get("job_id") != job_id:
        raise CheckpointCorrupted(f"the fork record {where} is not the fork record of job {job_id}")
    return _check_origin(record.get("parent"), where)


def _describe(origin: Mapping[str, Any]) -> str:
    return f"{origin['job_id']}:{origin['epoch']}"


def _parent_checkpoint(parent_log: CheckpointLog, epoch: int | None, store: ObjectStore) -> Manifest:
    """The epoch checkpoint a fork of ``parent_log``'s job starts from (``epoch`` None: the
    newest kept one), read and shape-checked; ForkRefused saying why there is none."""
    parent = parent_log.job_id
    kept = parent_log.checkpoint_ids()
    if epoch is None:
        for cid in reversed(kept):
            manifest = parent_log.load(cid, verify="none")
            if manifest.kind == "epoch":
                return manifest
        raise ForkRefused(f"fork_from {parent}: job {parent} has no kept epoch checkpoint in {store.location()} to "
                          f"fork from (kept checkpoints: {kept or 'none'})")
    try:
        manifest = parent_log.load(epoch, verify="none")
    except CheckpointCorrupted:
        raise
    except CheckpointError:
        retired = epoch not in kept and parent_log.latest_id() is not None and epoch <= parent_log.latest_id()
        why = "was retired by retention (its data is deleted)" if retired else "was never committed"
        raise ForkRefused(f"fork_from {parent}:{epoch}: checkpoint {epoch} of job {parent} {why}; the kept "
                          f"checkpoints of {parent} are {kept or 'none'}") from None
    if manifest.kind != "epoch":
        raise ForkRefused(f"fork_from {parent}:{epoch}: checkpoint {epoch} of job {parent} is its {manifest.kind} "
                          f"checkpoint (after epoch {manifest.epoch}); fork from an epoch up to {manifest.epoch}, "
                          f"or name the job alone ({parent}) for its newest epoch")
    return manifest


def check_fork(store: ObjectStore, config: JobConfig, dag_id: str | None) -> dict[str, Any] | None:
    """What a run of ``config`` forks from, checked before anything is written: the recorded
    parent when the job was forked already (and ``fork_from``, if given, names the same), else
    the parent checkpoint ``config.fork_from`` names; None for a job that is not a fork.
    ForkRefused (OwnershipError for a job the run may not read) naming why otherwise.
    ``dag_id``: the DAG whose run forks (None: a run outside Airflow, which may fork any job of
    its store); a DAG's run forks only jobs of the same DAG."""
    recorded = read_fork(store, config.job_id)
    source = config.fork_source
    if recorded is not None:
        if source is not None and (source.job_id != recorded["job_id"]
                                   or source.epoch not in (None, recorded["epoch"])):
            raise ForkRefused(f"fork_from {source}: job {config.job_id} was forked from {_describe(recorded)} "
                              "already; a job has one parent: fork into another job_id")
        return recorded
    if source is None:
        return None
    parent = source.job_id
    if CheckpointLog(store, config.job_id).latest_id() is not None:
        raise ForkRefused(f"fork_from {source}: job {config.job_id} exists already in {store.location()} (it has "
                          "checkpoints); a fork starts a new job: choose a job_id no job has")
    readonly = ReadOnlyStore(store)
    owner = read_owner(readonly, parent)
    parent_log = CheckpointLog(readonly, parent)
    if owner is None and parent_log.latest_id() is None:
        raise ForkRefused(f"fork_from {source}: there is no job {parent} in the checkpoint store {store.location()}")
    if dag_id is not None and (owner is None or owner.dag_id != dag_id):
        whose = f"DAG {owner.dag_id}" if owner is not None and owner.dag_id else \
            "a run outside Airflow (or no recorded owner)"
        raise OwnershipError(f"fork_from {source}: job {parent} belongs to {whose}; a run of DAG {dag_id} forks only "
                             f"the jobs of DAG {dag_id} (the jobs its readers may see)")
    manifest = _parent_checkpoint(parent_log, source.epoch, store)
    meta = resolve_body(config.body).describe()
    if manifest.body.get("name") != meta["name"]:
        raise ForkRefused(f"fork_from {source}: checkpoint {manifest.checkpoint_id} of job {parent} was computed by "
                          f"body {manifest.body.get('name')!r}; this job runs body {meta['name']!r}: a fork runs its "
                          "parent's body")
    if sorted(manifest.head_state.heads) != sorted(meta["heads"]):
        raise ForkRefused(f"fork_from {source}: checkpoint {manifest.checkpoint_id} of job {parent} carries the "
                          f"variables {sorted(manifest.head_state.heads)}; body {meta['name']!r} carries "
                          f"{sorted(meta['heads'])}")
    if owner is not None:
        theirs = owner.input.get("path")
        if theirs != config.input.path:
            raise ForkRefused(f"fork_from {source}: job {parent} reads input {theirs}; this job names input "
                              f"{config.input.path}: a fork reads its parent's input")
    return _origin(parent, manifest)


def record_fork(store: ObjectStore, job_id: str, origin: Mapping[str, Any]) -> None:
    """Record that job ``job_id`` starts from ``origin`` (create-if-absent: a retry finds its own
    record); ForkRefused if another parent is recorded."""
    key = JobLayout(job_id).fork()
    record = {"format": FORK_FORMAT, "job_id": job_id, "parent": dict(origin), "at": now_iso()}
    if store.put_if_absent(key, json.dumps(record, indent=1, sort_keys=True).encode()):
        log.info("job %s: a fork of job %s at epoch %d (checkpoint %d)", job_id, origin["job_id"], origin["epoch"],
                 origin["checkpoint_id"])
        return
    recorded = read_fork(store, job_id)
    if recorded != dict(origin):
        raise ForkRefused(f"job {job_id} was forked from {_describe(recorded or {})} already, not from "
                          f"{_describe(origin)}")


def redecide(manifest: Manifest, criteria: TerminationCriteria) -> Manifest:
    """``manifest`` (a fork's copy of its parent's epoch checkpoint) with its termination decided
    again by the fork's own criteria (its max_epochs, tolerance): the parent's decision was made
    by the parent's, and the fork goes on, or finishes, by its own."""
    d = manifest.decision
    if d is None:
        return dataclasses.replace(manifest, head_state=manifest.head_state.with_status(HeadStatus.RUNNING))
    reason = criteria.reason(d.epoch, d.feedback_count, d.metrics)
    decision = dataclasses.replace(d, terminated=reason is not None, reason=reason)
    status = HeadStatus.TERMINATING if reason is not None else HeadStatus.RUNNING
    return dataclasses.replace(manifest, decision=decision, head_state=manifest.head_state.with_status(status))


def seed_fork(job: IterationJob, origin: Mapping[str, Any]) -> tuple[CheckpointLog, int]:
    """Before a fork's first epoch: its record written, its parent's input pin copied (the fork
    reads exactly what its parent read). The parent's log, read-only, and the checkpoint to copy."""
    record_fork(job.store, job.config.job_id, origin)
    readonly = ReadOnlyStore(job.store)
    pin = JobLayout(origin["job_id"]).input_pin()
    try:
        job.store.put_if_absent(job.log.layout.input_pin(), readonly.get(pin))
    except ObjectNotFound:
        pass  # a body without a static input pins nothing
    return CheckpointLog(readonly, origin["job_id"]), int(origin["checkpoint_id"])


def forks_of(store: ObjectStore, job_id: str) -> list[dict[str, Any]]:
    """The forks of job ``job_id`` in ``store`` (their fork records), ``{"job_id", "epoch",
    "checkpoint_id"}`` each, by fork job id. A damaged record is reported and left out."""
    out = []
    for o in store.list("jobs/"):
        parts = o.key.split("/")
        if len(parts) != 3 or parts[2] != "fork.json" or not JOB_ID_PATTERN.fullmatch(parts[1]):
            continue
        try:
            origin = read_fork(store, parts[1])
        except CheckpointCorrupted as e:
            report_foreign(store, o.key, str(e))
            continue
        if origin is not None and origin["job_id"] == job_id:
            out.append({"job_id": parts[1], "epoch": origin["epoch"], "checkpoint_id": origin["checkpoint_id"]})
    return sorted(out, key=lambda f: f["job_id"])


__all__ = ["FORK_FORMAT", "ForkRefused", "check_fork", "forks_of", "read_fork", "record_fork", "redecide",
           "seed_fork"]
