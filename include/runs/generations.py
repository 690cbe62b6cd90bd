"""Generations of a job: recomputing it from an epoch (``rewind_to``).

A checkpoint log only grows: a committed checkpoint id is never written again, and what was
published from it stays true of it. To recompute a job from epoch k (a body fixed, a parameter
changed, an input corrected), a run asks for ``rewind_to=k``. A new **generation** of the job, a
checkpoint log of its own, starts from a copy of checkpoint k-1 of the newest generation (its
objects copied, every byte verified against its SHA-256, before its first epoch: ``seed``),
computes epochs k.., and when it terminates its publication replaces the outputs in one step
(include.publication.outputs). The generation it rewinds stays as it is, readable (its checkpoints, the
Iterations view) until it is retired (``retire``: its log deleted); it can no longer publish. ``rewind_to=0`` starts the new
generation from nothing (a scheduled batch: from the checkpoint the batch warm-starts from).

Names: job J's first generation is its log ``J`` itself, then ``J.r1``, ``J.r2``...; the batch of
date D of a scheduled job is ``J.D``, ``J.D.r1``... (include.runs.schedule keeps those records the
same way, under ``schedules/J/``). Records, under the checkpoint root::

    lineages/J/generations/<G>.json   {"rewound_from": {"job_id", "epoch"} | null, "at"}
    lineages/J/runs/<run>.json        {"run", "generation"}: fixed by the run's first task
    lineages/J/retired/<G>.json       {"at", "objects", "bytes"}: G's log was deleted

So every task, retry and cleared task of a DAG run finds the generation its first task chose,
and a later run (a continuation, a new trigger) works on the newest. A job that was never
rewound has no records beyond its runs'.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import TYPE_CHECKING, Any, Callable, Mapping

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.job_records import now_iso
from include.checkpoints.layout import check_job_id
from include.checkpoints.manifest import DatasetRef, Manifest
from include.contract.body import resolve_body
from include.epoch.aligner import TerminationCriteria
from include.epoch.job import IterationJob
from include.errors import CheckpointCorrupted, CheckpointError, ConfigError, ObjectNotFound
from include.publication.pinned_inputs import pinned_input_changes
from include.runs.forks import read_fork, redecide, seed_fork
from include.runs.leases import Holder, JobLease
from include.runs.ownership import JobOwner, OwnershipError, owner_key, read_owner
from include.store import ObjectStore
from include.store.borders import check_store_borders
from include.store.transfer import copy_verified

if TYPE_CHECKING:
    from include.epoch.job import IterationJob

log = logging.getLogger("iterations")


def generation_number(name: str, base: str) -> int | None:
    """0 for ``base``, n for ``base.r<n>``, None for a name of another job or shape."""
    if name == base:
        return 0
    rest = name[len(base):] if name.startswith(base + ".r") else ""
    return int(rest[2:]) if rest[2:].isdigit() and not rest[2:].startswith("0") else None


def check_rewind_to(value: Any) -> int | None:
    """``rewind_to`` as a run gives it: None, or an epoch number (an int >= 0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"rewind_to must be an epoch number (an integer >= 0), got {value!r}")
    return value


class Lineage:
    """The generations of log ``base`` (a job, or a scheduled job's batch of one date), with
    their records under ``root``."""

    def __init__(self, store: ObjectStore, root: str, base: str):
        self.store = store
        self.root = root
        self.base = check_job_id(base)

    @classmethod
    def of_job(cls, store: ObjectStore, job_id: str) -> "Lineage":
        return cls(store, f"lineages/{check_job_id(job_id)}", job_id)

    def _read(self, key: str) -> dict[str, Any] | None:
        try:
            record = json.loads(self.store.get(key))
        except ObjectNotFound:
            return None
        except ValueError:
            raise CheckpointCorrupted(f"the record {self.store.location(key)} is not JSON") from None
        if not isinstance(record, dict):
            raise CheckpointCorrupted(f"the record {self.store.location(key)} is not a JSON object")
        return record

    def generations(self) -> list[str]:
        """The recorded generations, oldest first (``base``, ``base.r1``, ...)."""
        prefix = f"{self.root}/generations/"
        names = [o.key[len(prefix):-len(".json")] for o in self.store.list(prefix) if o.key.endswith(".json")]
        return sorted((n for n in names if generation_number(n, self.base) is not None),
                      key=lambda n: generation_number(n, self.base))

    def newest(self) -> str:
        """The generation later runs work on: the newest recorded, else ``base`` itself."""
        return ([self.base, *self.generations()])[-1]

    def record(self, log_id: str) -> dict[str, Any] | None:
        return self._read(f"{self.root}/generations/{check_job_id(log_id)}.json")

    def new(self, body: Mapping[str, Any], *, first: int = 0) -> str:
        """Record a new generation (the next free name from ``first``, skipping the name of a job
        that exists outside this lineage: a generation never continues another's log); its log id."""
        n = first
        while True:
            log_id = check_job_id(self.base + (f".r{n}" if n else ""))
            if self.store.exists(owner_key(log_id)) and self.record(log_id) is None:
                n += 1
                continue
            if self.store.put_if_absent(f"{self.root}/generations/{log_id}.json",
                                        json.dumps({**body, "at": now_iso()}, sort_keys=True).encode()):
                return log_id
            n += 1

    def retired_key(self, log_id: str) -> str:
        """The record that generation ``log_id``'s log was deleted (``retire``)."""
        return f"{self.root}/retired/{check_job_id(log_id)}.json"

    def retired(self) -> set[str]:
        """The generations whose logs were deleted (``retire``)."""
        prefix = f"{self.root}/retired/"
        return {o.key[len(prefix):-len(".json")] for o in self.store.list(prefix) if o.key.endswith(".json")}

    def run_generation(self, run: str) -> str | None:
        """The generation DAG run ``run`` works on, if its first task fixed it."""
        known = self._read(f"{self.root}/runs/{run}.json")
        if known is None:
            return None
        try:
            return check_job_id(known["generation"])
        except (KeyError, ConfigError):
            raise CheckpointCorrupted(f"the record of run {run} under {self.store.location(self.root)} "
                                      "names no valid generation") from None

    def fix_run(self, run: str, log_id: str) -> str:
        """Make ``log_id`` the generation of run ``run`` unless a task of it was first; the one it has."""
        key = f"{self.root}/runs/{run}.json"
        if self.store.put_if_absent(key, json.dumps({"run": run, "generation": log_id}).encode()):
            return log_id
        return self.run_generation(run) or log_id

    def superseded_by(self, log_id: str) -> str | None:
        """The newest generation, if it is newer than ``log_id``: only the newest may publish."""
        newest = self.generations()
        return newest[-1] if newest and newest[-1] != log_id and log_id in [self.base, *newest] else None

    def check_may_publish(self, log_id: str) -> None:
        """CheckpointError if a newer generation exists: an older generation's run (cleared, or
        still running when the rewind started) never publishes over the newer one."""
        newer = self.superseded_by(log_id)
        if newer is not None:
            raise CheckpointError(
                f"generation {log_id} was superseded by {newer} (a recompute or rewind): its outputs are "
                "not published")

    def family(self, log_id: str, names: list[str] | None = None) -> list[str]:
        """The other generations (of ``names``, the recorded ones if already listed): their
        versions in the outputs are the newest one's to replace."""
        names = self.generations() if names is None else names
        return [g for g in dict.fromkeys([self.base, *names]) if g != log_id]

    # --- a rewind -----------------------------------------------------------------------------

    def rewind(self, source: str, epoch: int, owner: JobOwner, body: Mapping[str, Any] | None = None) -> str:
        """A new generation that recomputes ``source`` from ``epoch`` (``check_rewind``), recorded
        with ``body`` besides; its log id."""
        rewound_from = check_rewind(self.store, source, epoch, owner)
        if not self.generations() and self.base == source:  # the job itself is generation 0
            self.store.put_if_absent(f"{self.root}/generations/{source}.json",
                                     json.dumps({"rewound_from": None, "at": now_iso()}).encode())
        log_id = self.new({**(body or {}), "rewound_from": rewound_from}, first=1)
        log.info("job %s: generation %s recomputes it from epoch %d of %s", self.base, log_id, epoch, source)
        return log_id


_REWOUND = re.compile(r"^(?P<base>.+)\.r[1-9][0-9]*$")
_BATCH = re.compile(r"^(?P<job>.+)\.(?P<date>[0-9]{8}T[0-9]{6}Z)$")


def lineage_of(store: ObjectStore, log_id: str) -> tuple[Lineage, list[str]] | None:
    """The lineage log ``log_id`` is a generation of (a rewound job's, or a scheduled batch's)
    and its generations, oldest first; None if it is the only generation of its job."""
    match = _REWOUND.match(log_id)
    base = match["base"] if match else log_id
    candidates = [Lineage.of_job(store, base)]
    if (batch := _BATCH.match(base)) is not None:
        candidates.append(Lineage(store, f"schedules/{batch['job']}", base))
    for lineage in candidates:
        names = lineage.generations()
        if log_id in names and len(names) > 1:
            return lineage, names
    return None


def _check_owner(store: ObjectStore, job_id: str, owner: JobOwner, who: str, what: str) -> None:
    """OwnershipError unless ``owner`` is job ``job_id``'s owner (or it has none)."""
    current = read_owner(store, job_id)
    differences = current.differences(owner) if current is not None else []
    if differences:
        raise OwnershipError(f"job {job_id} belongs to {current.describe()}; {who}: {'; '.join(differences)}: {what}")


def check_rewind(store: ObjectStore, source: str, epoch: int, owner: JobOwner) -> dict[str, Any]:
    """What a generation rewinding log ``source`` to ``epoch`` records, checked before anything is
    written: the run owns ``source`` (OwnershipError otherwise: nobody recomputes another's job
    into their own), and ``source`` keeps epoch checkpoint ``epoch - 1`` to start from."""
    epoch = check_rewind_to(epoch)
    _check_owner(store, source, owner, "this run differs", "it cannot rewind the job")
    forked = read_fork(store, _REWOUND.sub(r"\g<base>", source))
    if forked is not None and epoch <= forked["epoch"]:
        raise ConfigError(f"rewind_to={epoch}: job {source} is a fork of {forked['job_id']} at epoch "
                          f"{forked['epoch']}: its own epochs start at {forked['epoch'] + 1}; rewind to one of them, "
                          f"or fork {forked['job_id']} again")
    src = CheckpointLog(store, source)
    if epoch > 0:
        try:
            start = src.load(epoch - 1, verify="none")
        except CheckpointError:
            raise ConfigError(f"rewind_to={epoch}: job {source} has no kept checkpoint {epoch - 1} to recompute "
                              f"epoch {epoch} from (kept: {src.checkpoint_ids()})") from None
        if start.kind != "epoch":
            raise ConfigError(f"rewind_to={epoch}: checkpoint {epoch - 1} of job {source} is its {start.kind} "
                              f"checkpoint; rewind to an epoch up to {epoch - 1}")
    return {"job_id": source, "epoch": epoch}


ON_INPUT_CHANGE = ("refuse", "restart")


def check_on_input_change(value: Any) -> str:
    """``on_input_change`` as a run gives it: "refuse" (a changed input is refused, naming what
    changed) or "restart" (a new generation from epoch 0 on the new input)."""
    if value is None:
        return "refuse"
    if value not in ON_INPUT_CHANGE:
        raise ConfigError(f"on_input_change must be one of {', '.join(ON_INPUT_CHANGE)}, got {value!r}")
    return value


def attach(store: ObjectStore, job_id: str, run: str | None, *, rewind_to: int | None,
           owner: JobOwner, hold: Callable[[], Any] | None = None,
           input_changes: Callable[[str], list[str]] | None = None) -> tuple[str, Lineage]:
    """The generation (log id) of job ``job_id`` that a run works on: the one the run's first
    task fixed (``run``: a DAG run's batch id; None: a library run, not fixed), else a new one
    if ``rewind_to`` is given, else the newest. ``hold``: called before anything is written
    (a new generation, the run's binding to one): it takes the job's lease (``lineage.base``'s),
    so that a rewind waits for, or is refused by, a run that holds the job, as a new run is.
    ``input_changes`` (``on_input_change=restart``): how the input differs from what a log
    pinned (include.publication.pinned_inputs.pinned_input_changes); when the newest generation's input changed,
    the run starts a new generation from epoch 0 on the new input (``rewind_to=0``), recorded
    with what changed (``restarted``)."""
    lineage = Lineage.of_job(store, job_id)
    if run is not None:
        known = lineage.run_generation(run)
        if known is not None:
            if store.exists(lineage.retired_key(known)):
                raise ConfigError(f"run {run} works on generation {known} of job {job_id}, which was retired (its "
                                  f"log deleted): trigger a new run, which works on {lineage.newest()}")
            return known, lineage
    restarted: dict[str, Any] | None = None
    if rewind_to is None and input_changes is not None:
        changes = input_changes(lineage.newest())
        if changes:
            rewind_to, restarted = 0, {"reason": "input changed", "changes": changes[:10]}
            log.warning("job %s: its input changed since generation %s pinned it (%s): on_input_change=restart, "
                        "a new generation computes the job from epoch 0 on the new input", job_id, lineage.newest(),
                        "; ".join(changes[:3]))
    if rewind_to is not None:
        check_rewind(store, lineage.newest(), rewind_to, owner)  # refused before the lease is taken
    if hold is not None and (rewind_to is not None or run is not None):
        check_store_borders(store)  # the first write of a run (its lease) stays inside its own store
        hold()
    newest = lineage.newest()
    log_id = newest if rewind_to is None else lineage.rewind(
        newest, rewind_to, owner, {"restarted": restarted} if restarted else None)
    return (lineage.fix_run(run, log_id) if run is not None else log_id), lineage


def input_changes_of(store: ObjectStore, config, store_options: Mapping[str, Any] | None = None,
                     on_input_change: Any = None) -> Callable[[str], list[str]] | None:
    """``attach``'s ``input_changes`` for a run of ``config`` (an include.contract.config.JobConfig) with
    ``on_input_change`` (``check_on_input_change``): None unless it is "restart" and the body has a
    static input (nothing else is pinned)."""
    if check_on_input_change(on_input_change) != "restart" or not resolve_body(config.body).static_input:
        return None
    return lambda log_id: pinned_input_changes(store, log_id, config.input, store_options)


def retire(store: ObjectStore, job_id: str, generation: str, owner: JobOwner,
           holder: Holder | None = None) -> dict[str, int]:
    """Delete the log of an older generation of job ``job_id`` (never the newest, which later
    runs work on): its checkpoints, attempts and records, all but its owner record (the name stays
    the job's) and its lease records. Refused, before anything is deleted, for a name that is not
    an older generation of the job (ConfigError naming the generations), for a caller that is not
    the job's owner (OwnershipError), and while a run holds the generation's lease (JobBusy
    naming it): the retiring process holds the lease while it deletes. Its outputs are not
    touched: the newest generation's publication replaces them. Returns the objects and bytes
    deleted; a second call deletes what a crash left."""
    lineage = Lineage.of_job(store, job_id)
    names = lineage.generations()
    older = names[:-1]
    if not isinstance(generation, str) or generation not in older:
        raise ConfigError(
            f"{generation!r} is not an older generation of job {job_id}: "
            + (f"its newest is {names[-1]} (later runs work on it; it is never retired), the older ones "
               f"{older or 'none'}" if names else "the job was never rewound (one generation, never retired)"))
    _check_owner(store, job_id, owner, "this caller differs", "it cannot retire the job's generations")
    leases = JobLease(store, job_id)  # the job's lease: every generation of it is run under it
    lease = leases.acquire(holder or Holder.this_process())  # JobBusy while a run works on it
    try:
        keep = {owner_key(generation)}
        lease_prefix = JobLease(store, generation).layout.lease_prefix()
        doomed = [o for o in store.list(f"jobs/{generation}/") if o.key not in keep and not o.key.startswith(lease_prefix)]
        store.delete([o.key for o in doomed])
        done = {"objects": len(doomed), "bytes": sum(o.size for o in doomed)}
        store.put(lineage.retired_key(generation), json.dumps({**done, "at": now_iso()}).encode())
    finally:
        leases.release(lease)
    log.info("job %s: generation %s retired: %d objects, %d bytes deleted", job_id, generation, done["objects"],
             done["bytes"])
    return done


def open_newest(store: ObjectStore, config, store_options: Mapping[str, Any] | None = None, **job_options_: Any):
    """The job's newest generation as an ``IterationJob`` on ``store``, opened to be read:
    nothing is written (no lease, no generation record), as the determinism audit needs."""
    lineage = Lineage.of_job(store, config.job_id)
    log_id = lineage.newest()
    return IterationJob(dataclasses.replace(config, job_id=log_id), store, store_options=dict(store_options or {}),
                        **job_options(lineage, log_id), **job_options_)  # -> "IterationJob"


def job_options(lineage: Lineage, log_id: str) -> dict[str, Any]:
    """What ``IterationJob`` needs of generation ``log_id``: where it starts from, the other
    generations (their output versions are its to replace) and its publication gate. One
    listing; a generation's record is read only when it has one (a never-rewound job has none)."""
    names = lineage.generations()
    rewound_from = (lineage.record(log_id) or {}).get("rewound_from") if log_id in names else None
    return {"rewound_from": rewound_from, "publication_family": lineage.family(log_id, names),
            "may_publish": lambda: lineage.check_may_publish(log_id), "lease_id": lineage.base}


def seed(job: "IterationJob") -> Manifest | None:
    """Before the first epoch of a log that starts from another's checkpoint, its first
    checkpoint: a copy of that one, whose objects are copied into its own log (each verified
    against its SHA-256 as it is read: a damaged source is refused). The one rule of jobs from
    jobs: a rewound generation starts from checkpoint ``epoch - 1`` of the generation it
    rewinds (a scheduled batch's recompute is one), a fork from its parent's checkpoint
    (include.runs.forks: its record and input pin written first, only read from the parent, its
    termination decided again by its own params). Idempotent: a seeded log is left alone, a copy
    that died half way is made again. The staged outputs of that epoch are not copied: they were
    published by the job that made them."""
    if job.log.latest_id() is not None:
        return None
    rewound = job.rewound_from
    if rewound:
        if int(rewound["epoch"]) == 0:
            return None
        source, cid = CheckpointLog(job.store, check_job_id(rewound["job_id"])), int(rewound["epoch"]) - 1
    elif job.forked_from:
        source, cid = seed_fork(job, job.forked_from)
    else:
        return None
    start = source.load(cid, verify="sizes")
    src_root, own_root = source.layout.root + "/", job.log.layout.root + "/"

    def copied(ref):
        if not ref.key.startswith(src_root):
            raise CheckpointCorrupted(f"checkpoint {start.checkpoint_id} of job {source.job_id} names object "
                                      f"{ref.key!r} outside its job")
        key = own_root + ref.key[len(src_root):]
        copy_verified(job.store, job.store, ref, key)  # a damaged source is refused, nothing left at key
        return dataclasses.replace(ref, key=key)

    def dataset(ds: DatasetRef) -> DatasetRef:
        return DatasetRef(ds.schema, tuple(tuple(copied(f) for f in part) for part in ds.partitions))

    manifest = dataclasses.replace(
        start, job_id=job.config.job_id, variables={k: dataset(v) for k, v in start.variables.items()},
        outputs={}, pending_outputs={}, extra_objects=tuple(copied(f) for f in start.extra_objects), committed_at="")
    if not rewound:  # a fork goes on, or ends, by its own params
        manifest = redecide(manifest, TerminationCriteria(job.config.max_epochs, job.config.tolerance,
                                                          job.body_meta.get("convergence_metric")))
    job.log.seed(manifest)
    log.info("job %s: starts from checkpoint %d of %s (copied, verified): epoch %d is next",
             job.config.job_id, start.checkpoint_id, source.job_id, start.checkpoint_id + 1)
    return manifest

__all__ = ["ON_INPUT_CHANGE", "Lineage", "attach", "check_on_input_change", "check_rewind", "check_rewind_to",
           "generation_number", "input_changes_of", "job_options", "lineage_of", "open_newest", "seed"]
