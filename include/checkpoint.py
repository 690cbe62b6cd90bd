"""The checkpoint log of a job: attempt-scoped staging, single-winner commits, verified restores,
idempotent commit/abort, retention and safe garbage collection (DESIGN.md section 4).

Layout under ``jobs/<job_id>/`` of the store::

    attempts/<epoch>/<attempt_id>/_PLAN.json                  what the attempt was asked to do
    attempts/<epoch>/<attempt_id>/<head>/part-<p>-<task>.parquet  feedback log (next variables)
    attempts/<epoch>/<attempt_id>/_reports/<head>/part-<p>.json   per-partition epoch reports
    attempts/<epoch>/<attempt_id>/outputs/<name>/part-...     staged outputs
    checkpoints/<id>.json      manifest; its create-if-absent write IS the commit
    rejected/<id>.json         a rewind (fall-back from a damaged checkpoint) rejected this
                               checkpoint: the reason and its manifest as it was
    retired/<id>               retention removed this checkpoint's data (its manifest stays a
                               tombstone so that nobody can ever commit that id again); holds
                               the checkpoint's summary (its decision: metrics, feedback)
    aborted/<epoch>/<attempt_id>  the attempt's fate, decided once by a create-if-absent write:
                               aborted (never adopted, its files are garbage), or claimed by
                               its own commit (``claim_commit``; removed with the epoch's GC)
    batches/<batch_id>.json    the final checkpoint of a batch (kept by retention)
    published/<id>/<sink>.json the outputs of checkpoint <id> a sink committed (2PC phase two)
    history/<where>/<sink>/<version>.json  the files the job wrote into an output (the only
                               files its later publications may delete: include.outputs)
    savepoints/<id>.json       the job was suspended at checkpoint <id> (kept by retention)
    control/stop.json          a pending stop request (drain or suspend) for the running job
    owner.json                 who the job belongs to: DAG, body, input, output (include.ownership)
    lease/<token>.json         which run may write; the highest token is current (include.ownership)

Nothing under ``attempts/`` is read by an epoch computation unless a committed manifest
references it. Ordering is by checkpoint id only, never by timestamps.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from include.errors import (
    CheckpointCorrupted,
    CheckpointError,
    CheckpointSuperseded,
    ConfigError,
    ObjectNotFound,
)
from include.failpoints import clock_skew, trace
from include.head import AlignmentDecision, EpochReport, FileRef, JobHeadState
from include.lifecycle import Lifecycle, StopMode
from include.store import ObjectStore, join_key, sha256_hex

log = logging.getLogger(__name__)

MANIFEST_FORMAT = "iterations.checkpoint/1"
JOB_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
ATTEMPT_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.fullmatch(job_id) or ".." in job_id:
        raise ConfigError(
            f"invalid job_id {job_id!r}: 1-128 characters of letters, digits, '_', '-', '.', "
            "starting with a letter or digit"
        )
    return job_id


def check_attempt_id(attempt_id: str) -> str:
    if not isinstance(attempt_id, str) or not ATTEMPT_ID_PATTERN.fullmatch(attempt_id) or ".." in attempt_id:
        raise ConfigError(f"invalid attempt id {attempt_id!r}")
    return attempt_id


class JobLayout:
    """Keys of one job's objects, relative to the store root."""

    def __init__(self, job_id: str):
        self.job_id = check_job_id(job_id)
        self.root = f"jobs/{job_id}"

    def checkpoint(self, checkpoint_id: int) -> str:
        return f"{self.root}/checkpoints/{checkpoint_id:010d}.json"

    def retired(self, checkpoint_id: int) -> str:
        return f"{self.root}/retired/{checkpoint_id:010d}"

    def attempts(self, epoch: int | None = None) -> str:
        return f"{self.root}/attempts/" if epoch is None else f"{self.root}/attempts/{epoch:010d}/"

    def attempt(self, epoch: int, attempt_id: str) -> str:
        return f"{self.root}/attempts/{epoch:010d}/{check_attempt_id(attempt_id)}"

    def plan(self, epoch: int, attempt_id: str) -> str:
        return f"{self.attempt(epoch, attempt_id)}/_PLAN.json"

    def reports(self, epoch: int, attempt_id: str) -> str:
        return f"{self.attempt(epoch, attempt_id)}/_reports/"

    def report(self, epoch: int, attempt_id: str, head: str, partition: int) -> str:
        return f"{self.reports(epoch, attempt_id)}{head}/part-{partition:05d}.json"

    def rejected(self, checkpoint_id: int) -> str:
        return f"{self.root}/rejected/{checkpoint_id:010d}.json"

    def aborted(self, epoch: int, attempt_id: str) -> str:
        return f"{self.root}/aborted/{epoch:010d}/{check_attempt_id(attempt_id)}"

    def checks(self, epoch: int, attempt_id: str) -> str:
        """Where an attempt's data-check results are kept (beside ``attempts/``: an aborted
        attempt's files are deleted, the evidence of why is not)."""
        return f"{self.root}/checks/{epoch:010d}/{check_attempt_id(attempt_id)}"

    def batch(self, batch_id: str) -> str:
        return f"{self.root}/batches/{check_attempt_id(batch_id)}.json"

    def publication(self, checkpoint_id: int, sink: str) -> str:
        return f"{self.root}/published/{checkpoint_id:010d}/{check_attempt_id(sink)}.json"

    def savepoint(self, checkpoint_id: int) -> str:
        return f"{self.root}/savepoints/{checkpoint_id:010d}.json"

    def stop_request(self) -> str:
        return f"{self.root}/control/stop.json"

    def history_prefix(self, location: str, name: str) -> str:
        """Where the job records what it wrote into output ``name`` at ``location``."""
        return f"{self.root}/history/{hashlib.sha256(location.encode()).hexdigest()[:24]}/{check_attempt_id(name)}/"

    def owner(self) -> str:
        """Who the job belongs to (include.ownership)."""
        return f"{self.root}/owner.json"

    def lease_prefix(self) -> str:
        return f"{self.root}/lease/"

    def lease(self, token: int) -> str:
        """One record of the job's lease; the highest token is the current one (include.ownership)."""
        return f"{self.lease_prefix()}{token:010d}.json"

    @staticmethod
    def parse_id(key: str) -> int | None:
        name = key.rsplit("/", 1)[-1].split(".", 1)[0]
        return int(name) if name.isdigit() else None


@dataclass(frozen=True)
class DatasetRef:
    """A dataset an attempt wrote: its Spark schema and its files, grouped by partition."""

    schema: str  # Spark StructType as JSON
    partitions: tuple[tuple[FileRef, ...], ...]

    @property
    def files(self) -> list[FileRef]:
        return [f for part in self.partitions for f in part]

    @property
    def rows(self) -> int:
        return sum(f.rows or 0 for f in self.files)

    @property
    def size(self) -> int:
        """Stored bytes, all files."""
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "partitions": [[f.to_dict() for f in p] for p in self.partitions]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DatasetRef":
        return cls(d["schema"], tuple(tuple(FileRef.from_dict(f) for f in p) for p in d["partitions"]))


@dataclass(frozen=True)
class Manifest:
    """A committed checkpoint. ``kind`` is ``epoch`` (state after an epoch) or ``final``
    (the finish step's checkpoint, which references the job's outputs). ``outputs`` of an
    epoch checkpoint are the body's per-epoch outputs staged by that epoch; ``lifecycle`` the
    state of every operator when it committed (``include.lifecycle``)."""

    job_id: str
    checkpoint_id: int
    kind: str
    epoch: int
    parent_id: int | None
    attempt_id: str
    batch_id: str | None
    num_partitions: int
    body: dict[str, Any]
    head_state: JobHeadState
    decision: AlignmentDecision | None
    variables: dict[str, DatasetRef]
    outputs: dict[str, DatasetRef] = field(default_factory=dict)
    extra_objects: tuple[FileRef, ...] = ()
    committed_at: str = ""  # informational only: ordering is by checkpoint id
    lifecycle: Lifecycle = field(default_factory=lambda: Lifecycle({}))
    # coordinator name -> its snapshot taken when this checkpoint was triggered (include.coordinator)
    coordinators: dict[str, Any] = field(default_factory=dict)

    @property
    def objects(self) -> list[FileRef]:
        """Every object this checkpoint references (what GC must never delete)."""
        refs = list(self.extra_objects)
        for ds in list(self.variables.values()) + list(self.outputs.values()):
            refs.extend(ds.files)
        return refs

    @property
    def state_objects(self) -> list[FileRef]:
        """What a restore needs: the variables, and a final checkpoint's outputs. An epoch's
        staged outputs are not state: they are released once published."""
        refs = list(self.extra_objects)
        datasets = list(self.variables.values()) + (list(self.outputs.values()) if self.kind == "final" else [])
        for ds in datasets:
            refs.extend(ds.files)
        return refs

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "kind": self.kind,
            "epoch": self.epoch,
            "parent_id": self.parent_id,
            "attempt_id": self.attempt_id,
            "batch_id": self.batch_id,
            "num_partitions": self.num_partitions,
            "body": self.body,
            "head_state": self.head_state.to_dict(),
            "decision": self.decision.to_dict() if self.decision else None,
            "variables": {k: v.to_dict() for k, v in sorted(self.variables.items())},
            "outputs": {k: v.to_dict() for k, v in sorted(self.outputs.items())},
            "extra_objects": [f.to_dict() for f in self.extra_objects],
            "committed_at": self.committed_at,
            "lifecycle": self.lifecycle.to_dict(),
            "coordinators": self.coordinators,
        }

    def to_bytes(self) -> bytes:
        body = self.to_dict()
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
        body["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
        return json.dumps(body, sort_keys=True, indent=1, allow_nan=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "Manifest":
        try:
            d = json.loads(data)
            claimed = d.pop("manifest_sha256")
        except (ValueError, KeyError, AttributeError) as e:
            raise CheckpointCorrupted(f"manifest {where} is not a valid manifest: {e}") from e
        canonical = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
        if hashlib.sha256(canonical.encode()).hexdigest() != claimed:
            raise CheckpointCorrupted(f"manifest {where} fails its own checksum: it was damaged")
        if d.get("format") != MANIFEST_FORMAT:
            raise CheckpointCorrupted(
                f"manifest {where} has format {d.get('format')!r}, expected {MANIFEST_FORMAT!r}"
            )
        return cls(
            job_id=d["job_id"],
            checkpoint_id=int(d["checkpoint_id"]),
            kind=d["kind"],
            epoch=int(d["epoch"]),
            parent_id=d["parent_id"],
            attempt_id=d["attempt_id"],
            batch_id=d.get("batch_id"),
            num_partitions=int(d["num_partitions"]),
            body=d["body"],
            head_state=JobHeadState.from_dict(d["head_state"]),
            decision=AlignmentDecision.from_dict(d["decision"]) if d.get("decision") else None,
            variables={k: DatasetRef.from_dict(v) for k, v in d["variables"].items()},
            outputs={k: DatasetRef.from_dict(v) for k, v in d.get("outputs", {}).items()},
            extra_objects=tuple(FileRef.from_dict(f) for f in d.get("extra_objects", [])),
            committed_at=d.get("committed_at", ""),
            lifecycle=Lifecycle.from_dict(d.get("lifecycle")),
            coordinators=d.get("coordinators", {}),
        )


_TOMBSTONE = b'{"retired": true}\n'


@dataclass(frozen=True)
class CommitOutcome:
    checkpoint_id: int
    attempt_id: str
    # False when the manifest was already there from this same attempt (a retry after a lost
    # response): the commit had landed; nothing is written twice.
    first_write: bool


@dataclass
class GcReport:
    retired: list[int] = field(default_factory=list)
    deleted_objects: int = 0
    kept_live_attempts: list[str] = field(default_factory=list)


class CheckpointLog:
    """The idempotent checkpoint API of one job (flink-ml's ``Checkpoints``, in object storage)."""

    def __init__(self, store: ObjectStore, job_id: str):
        self.store = store
        self.layout = JobLayout(job_id)
        self.job_id = job_id

    # --- reading ------------------------------------------------------------------------

    def checkpoint_ids(self) -> list[int]:
        """Ids of committed checkpoints whose data is still kept, ascending."""
        ids = {self.layout.parse_id(o.key) for o in self.store.list(f"{self.layout.root}/checkpoints/")}
        retired = {self.layout.parse_id(o.key) for o in self.store.list(f"{self.layout.root}/retired/")}
        return sorted(i for i in ids - retired if i is not None)

    def latest_id(self) -> int | None:
        ids = {self.layout.parse_id(o.key) for o in self.store.list(f"{self.layout.root}/checkpoints/")}
        ids.discard(None)
        return max(ids) if ids else None

    def load(self, checkpoint_id: int, *, verify: str = "sizes") -> Manifest:
        """Read a committed manifest. ``verify``: ``none``, ``sizes`` (every referenced object
        exists with its size) or ``full`` (sizes and SHA-256 of every byte)."""
        key = self.layout.checkpoint(checkpoint_id)
        where = self.store.location(key)
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            raise CheckpointError(f"checkpoint {checkpoint_id} of job {self.job_id} does not exist ({where})") from None
        if data == _TOMBSTONE:
            raise CheckpointError(
                f"checkpoint {checkpoint_id} of job {self.job_id} was retired by retention; "
                f"kept checkpoints: {self.checkpoint_ids()}"
            )
        manifest = Manifest.from_bytes(data, where)
        if manifest.checkpoint_id != checkpoint_id or manifest.job_id != self.job_id:
            raise CheckpointCorrupted(
                f"manifest {where} claims job {manifest.job_id!r} checkpoint {manifest.checkpoint_id}"
            )
        if verify != "none":
            self.verify(manifest, full=(verify == "full"))
        return manifest

    def latest(self, *, verify: str = "sizes") -> Manifest | None:
        latest = self.latest_id()
        return None if latest is None else self.load(latest, verify=verify)

    def verify(self, manifest: Manifest, *, full: bool = False) -> None:
        """Refuse a damaged checkpoint with an error naming the object and what is wrong."""
        listed: dict[str, int] = {}
        prefixes = {ref.key.rsplit("/", 1)[0] + "/" for ref in manifest.state_objects}
        for prefix in sorted(prefixes):
            listed.update({o.key: o.size for o in self.store.list(prefix)})
        for ref in manifest.state_objects:
            where = self.store.location(ref.key)
            if ref.key not in listed:
                raise CheckpointCorrupted(
                    f"checkpoint {manifest.checkpoint_id} of job {self.job_id} is damaged: "
                    f"{where} is missing"
                )
            if listed[ref.key] != ref.size:
                raise CheckpointCorrupted(
                    f"checkpoint {manifest.checkpoint_id} of job {self.job_id} is damaged: {where} "
                    f"has {listed[ref.key]} bytes, the manifest says {ref.size}"
                )
            if full:
                verify_bytes(self.store.get(ref.key), ref, where)

    def reports(self, epoch: int, attempt_id: str) -> list[EpochReport]:
        out = []
        for o in self.store.list(self.layout.reports(epoch, attempt_id)):
            if o.key.endswith(".json"):
                out.append(EpochReport.from_json(self.store.get(o.key)))
        return out

    def has_started(self) -> bool:
        """Whether any attempt of any epoch was ever recorded (the job has started)."""
        return bool(self.store.list(self.layout.attempts()))

    def attempt_ids(self, epoch: int) -> list[str]:
        prefix = self.layout.attempts(epoch)
        ids = {o.key[len(prefix):].split("/", 1)[0] for o in self.store.list(prefix)}
        return sorted(ids)

    def is_aborted(self, epoch: int, attempt_id: str) -> bool:
        return self.abort_reason(epoch, attempt_id) is not None

    def _fate(self, epoch: int, attempt_id: str) -> dict[str, Any] | None:
        """The attempt's fate, decided once (see ``claim_commit``): None while undecided, else
        ``{"claim": "commit"}`` or ``{"reason": ...}`` (aborted)."""
        try:
            data = self.store.get(self.layout.aborted(epoch, attempt_id))
        except ObjectNotFound:
            return None
        try:
            fate = json.loads(data)
        except ValueError:
            fate = None
        return fate if isinstance(fate, dict) else {"reason": ""}

    def abort_reason(self, epoch: int, attempt_id: str) -> str | None:
        """None if the attempt was not aborted (undecided, or claimed by its commit), else why
        (possibly empty)."""
        fate = self._fate(epoch, attempt_id)
        if fate is None or fate.get("claim") == "commit":
            return None
        return str(fate.get("reason") or "")

    def claim_commit(self, epoch: int, attempt_id: str) -> None:
        """Decide the attempt's fate for its commit, before the manifest is written: one
        create-if-absent write of ``aborted/<epoch>/<attempt>`` decides between this commit and
        any abort of the attempt, whichever comes first; the loser sees the winner's record. A
        commit that finds the attempt aborted raises CheckpointSuperseded; a retry of the same
        commit finds its own claim and goes on."""
        key = self.layout.aborted(epoch, attempt_id)
        if self.store.put_if_absent(key, json.dumps({"claim": "commit", "at": _now()}).encode()):
            return
        reason = self.abort_reason(epoch, attempt_id)
        if reason is not None:  # fenced: a retry took over, or a rewind rejected its epoch
            raise CheckpointSuperseded(
                f"attempt {attempt_id} of checkpoint {epoch} of job {self.job_id} was aborted "
                f"({reason or 'no reason given'}): it cannot commit, it is superseded and its files are garbage")

    def read_plan(self, epoch: int, attempt_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.store.get(self.layout.plan(epoch, attempt_id)))
        except ObjectNotFound:
            return None

    # --- writing ------------------------------------------------------------------------

    def start_attempt(self, epoch: int, attempt_id: str, plan: Mapping[str, Any]) -> None:
        """Record an attempt before it writes anything (the fencing record of the attempt)."""
        key = self.layout.plan(epoch, attempt_id)
        if not self.store.put_if_absent(key, json.dumps(plan, sort_keys=True, indent=1).encode()):
            raise CheckpointError(f"attempt {attempt_id} of epoch {epoch} already exists ({self.store.location(key)})")

    def commit(self, manifest: Manifest) -> CommitOutcome:
        """Commit a checkpoint by one create-if-absent write of its manifest.

        Exactly one attempt wins. A retry by the winner (its first response was lost) reads the
        manifest back and succeeds without writing again; any other attempt is superseded.
        """
        if manifest.job_id != self.job_id:
            raise CheckpointError(f"manifest of job {manifest.job_id!r} given to the log of {self.job_id!r}")
        cid = manifest.checkpoint_id
        latest = self.latest_id()
        if latest is not None and latest >= cid:
            return self._already_committed(manifest)
        if manifest.parent_id != latest:
            raise CheckpointError(
                f"checkpoint {cid} of job {self.job_id} was planned on checkpoint "
                f"{manifest.parent_id}, but the latest committed is {latest}: the chain would "
                "have a gap; plan the epoch again from the latest checkpoint"
            )
        expected = 0 if manifest.parent_id is None else manifest.parent_id + 1
        if cid != expected:
            raise CheckpointError(
                f"checkpoint {cid} of job {self.job_id} cannot follow checkpoint "
                f"{manifest.parent_id}: the chain would have a gap (expected id {expected})"
            )
        stamped = Manifest(**{**manifest.__dict__, "committed_at": _now()})
        if self.store.put_if_absent(self.layout.checkpoint(cid), stamped.to_bytes()):
            trace("checkpoint.committed", job=self.job_id, checkpoint=cid, attempt=manifest.attempt_id,
                  kind=manifest.kind, at=stamped.committed_at)
            return CommitOutcome(cid, manifest.attempt_id, first_write=True)
        return self._already_committed(manifest)

    def _already_committed(self, manifest: Manifest) -> CommitOutcome:
        cid = manifest.checkpoint_id
        key = self.layout.checkpoint(cid)
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            raise CheckpointSuperseded(
                f"checkpoint {cid} of job {self.job_id} can no longer be committed: a later "
                f"checkpoint ({self.latest_id()}) exists; attempt {manifest.attempt_id} is superseded"
            ) from None
        if data != _TOMBSTONE:
            existing = Manifest.from_bytes(data, self.store.location(key))
            if existing.attempt_id == manifest.attempt_id:
                log.info("checkpoint %d of job %s was already committed by this attempt %s",
                         cid, self.job_id, manifest.attempt_id)
                return CommitOutcome(cid, manifest.attempt_id, first_write=False)
            winner = existing.attempt_id
        else:
            winner = "an attempt whose checkpoint was since retired"
        raise CheckpointSuperseded(
            f"checkpoint {cid} of job {self.job_id} was committed by {winner}; attempt "
            f"{manifest.attempt_id} is superseded and its files are garbage"
        )

    def committed_attempt(self, checkpoint_id: int) -> tuple[bool, str | None]:
        """(whether checkpoint ``checkpoint_id`` was committed: the latest id reached it, the
        attempt that committed it, None if its manifest was since retired)."""
        latest = self.latest_id()
        if latest is None or latest < checkpoint_id:
            return False, None
        return True, self.committed_by(checkpoint_id)

    def committed_by(self, checkpoint_id: int) -> str | None:
        try:
            data = self.store.get(self.layout.checkpoint(checkpoint_id))
        except ObjectNotFound:
            return None
        if data == _TOMBSTONE:
            return None
        return Manifest.from_bytes(data, self.store.location(self.layout.checkpoint(checkpoint_id))).attempt_id

    def abort(self, epoch: int, attempt_id: str, reason: str = "") -> bool:
        """Abort an attempt: decide its fate (one create-if-absent write, the same one its
        commit makes: ``claim_commit``), then delete its files. Idempotent. A no-op (False) for
        an attempt whose commit claimed it first (committed, or committing now): nothing it
        wrote is deleted, so a checkpoint can never be committed and then lose its files."""
        if self.committed_by(epoch) == attempt_id:
            return False
        key = self.layout.aborted(epoch, attempt_id)
        if not self.store.put_if_absent(key, json.dumps({"reason": reason, "at": _now()}).encode()):
            if self.abort_reason(epoch, attempt_id) is None:
                log.info("epoch %d attempt %s is not aborted: its commit claimed it first", epoch, attempt_id)
                return False
        keys = [o.key for o in self.store.list(self.layout.attempt(epoch, attempt_id) + "/")]
        self.store.delete(keys)
        log.info("aborted epoch %d attempt %s (%d objects deleted)%s", epoch, attempt_id, len(keys),
                 f": {reason}" if reason else "")
        return True

    def record_batch_final(self, batch_id: str, checkpoint_id: int) -> None:
        self.store.put(
            self.layout.batch(batch_id),
            json.dumps({"batch_id": batch_id, "final_checkpoint_id": checkpoint_id}).encode(),
        )

    def batch_finals(self) -> dict[str, int]:
        out = {}
        for o in self.store.list(f"{self.layout.root}/batches/"):
            d = json.loads(self.store.get(o.key))
            out[d["batch_id"]] = int(d["final_checkpoint_id"])
        return out

    # --- publications (phase two of the outputs' two-phase commit) ---------------------

    def record_publication(self, checkpoint_id: int, sink: str, record: Mapping[str, Any]) -> None:
        self.store.put(self.layout.publication(checkpoint_id, sink),
                       json.dumps({**record, "checkpoint_id": checkpoint_id, "sink": sink, "at": _now()},
                                  sort_keys=True).encode())

    def publications(self, checkpoint_id: int) -> dict[str, dict[str, Any]]:
        """sink -> its publication record, for the sinks that published checkpoint ``checkpoint_id``."""
        prefix = f"{self.layout.root}/published/{checkpoint_id:010d}/"
        out = {}
        for o in self.store.list(prefix):
            if o.key.endswith(".json"):
                d = json.loads(self.store.get(o.key))
                out[d["sink"]] = d
        return out

    # --- the history of what the job wrote into its outputs (include.outputs.PublicationHistory)

    def record_written(self, location: str, name: str, version: str, keys: list[str]) -> None:
        self.store.put(f"{self.layout.history_prefix(location, name)}{check_attempt_id(version)}.json",
                       json.dumps({"location": location, "name": name, "version": version, "keys": list(keys),
                                   "retired": False, "at": _now()}, sort_keys=True).encode())

    def written(self, location: str, name: str) -> dict[str, list[str]]:
        """version -> its keys, for the versions of output ``name`` at ``location`` this job wrote
        and has not deleted (records of another shape are ignored)."""
        out = {}
        for o in self.store.list(self.layout.history_prefix(location, name)):
            try:
                d = json.loads(self.store.get(o.key))
            except (ValueError, ObjectNotFound):
                continue
            if (isinstance(d, dict) and d.get("location") == location and d.get("name") == name
                    and not d.get("retired") and isinstance(d.get("version"), str) and isinstance(d.get("keys"), list)
                    and o.key.endswith(f"/{d['version']}.json")):
                out[d["version"]] = [k for k in d["keys"] if isinstance(k, str)]
        return out

    def mark_retired(self, location: str, name: str, version: str) -> None:
        key = f"{self.layout.history_prefix(location, name)}{check_attempt_id(version)}.json"
        try:
            d = json.loads(self.store.get(key))
        except ObjectNotFound:
            return
        self.store.put(key, json.dumps({**d, "retired": True, "retired_at": _now()}, sort_keys=True).encode())

    # --- stop requests and savepoints -----------------------------------------------------

    def request_stop(self, mode: StopMode | str, *, requested_by: str = "") -> dict[str, Any]:
        """Ask the running job to stop at its next epoch boundary (``drain`` or ``suspend``);
        a later request replaces an earlier one that was not honoured yet."""
        mode = StopMode.parse(mode)
        request = {"mode": mode.value, "requested_at": _now(), "requested_by": requested_by}
        self.store.put(self.layout.stop_request(), json.dumps(request, sort_keys=True).encode())
        log.info("job %s: %s requested%s", self.job_id, mode.value, f" by {requested_by}" if requested_by else "")
        return request

    def stop_request(self) -> StopMode | None:
        try:
            return StopMode.parse(json.loads(self.store.get(self.layout.stop_request()))["mode"])
        except ObjectNotFound:
            return None

    def clear_stop_request(self) -> None:
        self.store.delete([self.layout.stop_request()])

    def record_savepoint(self, checkpoint_id: int, reason: str) -> None:
        self.store.put(self.layout.savepoint(checkpoint_id),
                       json.dumps({"checkpoint_id": checkpoint_id, "mode": "suspend", "reason": reason,
                                   "at": _now()}, sort_keys=True).encode())

    def savepoints(self) -> list[int]:
        """Checkpoints the job was suspended at (kept by retention until deleted by the user)."""
        ids = (self.layout.parse_id(o.key) for o in self.store.list(f"{self.layout.root}/savepoints/"))
        return sorted(i for i in ids if i is not None)

    # --- falling back from a damaged checkpoint --------------------------------------------

    def rewind(self, to_id: int, reason: str) -> list[int]:
        """Make checkpoint ``to_id`` the latest again, on the user's request after a later one
        was found damaged: every checkpoint after it is rejected (its manifest moved to
        ``rejected/<id>.json`` with the reason, its batch and publication records dropped) and
        every attempt of those epochs is aborted, so that none of them can commit any more.
        The epochs after ``to_id`` are then computed again. Returns the rejected ids."""
        self.load(to_id, verify="none")  # it must be a kept, committed checkpoint
        prefix = f"{self.layout.root}/checkpoints/"
        later = sorted((i for o in self.store.list(prefix) if (i := self.layout.parse_id(o.key)) is not None
                        and i > to_id), reverse=True)
        if not later:
            return []
        at = _now()
        for cid in later:  # evidence and fencing first, then the manifests go
            try:
                damaged = self.store.get(self.layout.checkpoint(cid)).decode(errors="replace")
            except ObjectNotFound:
                continue
            self.store.put(self.layout.rejected(cid), json.dumps(
                {"checkpoint_id": cid, "rewound_to": to_id, "reason": reason, "at": at, "manifest": damaged},
                indent=1, sort_keys=True).encode())
            for attempt_id in self.attempt_ids(cid):
                self.store.put(self.layout.aborted(cid, attempt_id),
                               json.dumps({"reason": f"rejected: rewound to checkpoint {to_id}", "at": at}).encode())
        stale_batches = [self.layout.batch(b) for b, cid in self.batch_finals().items() if cid in later]
        publications = [o.key for cid in later for o in self.store.list(f"{self.layout.root}/published/{cid:010d}/")]
        self.store.delete(stale_batches + publications + [self.layout.retired(cid) for cid in later])
        for cid in later:  # highest first: the latest id only ever goes down to ``to_id``
            self.store.delete([self.layout.checkpoint(cid)])
        log.warning("job %s: rewound to checkpoint %d; rejected checkpoints %s (%s)", self.job_id, to_id,
                    sorted(later), reason)
        trace("checkpoint.rewound", job=self.job_id, to=to_id, rejected=sorted(later))
        return sorted(later)

    def rejected(self) -> dict[int, dict[str, Any]]:
        """Checkpoints rejected by a rewind: id -> the record (reason, the manifest as it was)."""
        out = {}
        for o in self.store.list(f"{self.layout.root}/rejected/"):
            if (cid := self.layout.parse_id(o.key)) is not None:
                out[cid] = json.loads(self.store.get(o.key))
        return out

    # --- retention ----------------------------------------------------------------------

    def _summary(self, checkpoint_id: int) -> bytes:
        """What a retired checkpoint leaves behind: its epoch's decision and where it came from
        (JSON; empty if the manifest cannot be read)."""
        try:
            m = self.load(checkpoint_id, verify="none")
        except (CheckpointError, ValueError):
            return b""
        d = m.decision
        return json.dumps({
            "checkpoint_id": m.checkpoint_id, "kind": m.kind, "epoch": m.epoch, "parent_id": m.parent_id,
            "attempt_id": m.attempt_id, "batch_id": m.batch_id, "committed_at": m.committed_at,
            "metrics": dict(d.metrics) if d else {}, "feedback_count": d.feedback_count if d else None,
            "terminated": d.terminated if d else False, "reason": d.reason if d else None,
        }, sort_keys=True).encode()

    def retired_summary(self, checkpoint_id: int) -> dict[str, Any] | None:
        """The summary a retired checkpoint left (``_summary``); None if it is not retired or
        was retired before summaries were kept."""
        try:
            data = self.store.get(self.layout.retired(checkpoint_id))
        except ObjectNotFound:
            return None
        try:
            summary = json.loads(data) if data else None
        except ValueError:
            return None
        return summary if isinstance(summary, dict) else None

    def collect_garbage(self, retain_last: int) -> GcReport:
        """Keep the last ``retain_last`` checkpoints and every batch's final checkpoint; delete
        everything else under ``attempts/`` that no kept manifest references, except attempts
        of epochs after the latest checkpoint (they may be running and about to commit)."""
        if retain_last < 1:
            raise ConfigError(f"retain_last must be >= 1, got {retain_last}")
        report = GcReport()
        ids = self.checkpoint_ids()
        latest = self.latest_id()
        if latest is None:
            return report
        keep = set(ids[-retain_last:]) | set(self.batch_finals().values()) | set(self.savepoints()) | {latest}
        keep &= set(ids)
        referenced: set[str] = set()
        for cid in sorted(keep):
            referenced.update(ref.key for ref in self.load(cid, verify="none").objects)
        for cid in ids:
            if cid not in keep:
                # Tombstone first: the id stays taken, so no zombie can ever commit it again.
                # The retired marker keeps the checkpoint's summary (its decision: metrics,
                # feedback, termination) for the job's history (include.overview).
                self.store.put(self.layout.retired(cid), self._summary(cid))
                self.store.put(self.layout.checkpoint(cid), _TOMBSTONE)
                report.retired.append(cid)
        aborted = set()
        settled = []  # abort marks of epochs that are committed: nothing can adopt them any more
        for o in self.store.list(f"{self.layout.root}/aborted/"):
            epoch_s, attempt = o.key.rsplit("/", 2)[-2:]
            aborted.add((epoch_s, attempt))
            if int(epoch_s) <= latest:
                settled.append(o.key)
        garbage = []
        live = set()
        prefix = self.layout.attempts()
        for o in self.store.list(prefix):
            if o.key in referenced:
                continue
            epoch_s, attempt = o.key[len(prefix):].split("/", 2)[:2]
            if int(epoch_s) > latest and (epoch_s, attempt) not in aborted:
                live.add(f"{int(epoch_s)}/{attempt}")
                continue
            garbage.append(o.key)
        # check results of retired epochs go with them (those of kept and later epochs stay)
        checks = [o.key for o in self.store.list(f"{self.layout.root}/checks/")
                  if (cid := self.layout.parse_id(o.key.rsplit("/", 3)[-3])) is not None
                  and cid in ids and cid not in keep]
        garbage += checks
        self.store.delete(garbage + settled)
        report.deleted_objects = len(garbage)
        report.kept_live_attempts = sorted(live)
        if report.retired or garbage:
            log.info("gc of job %s: retired checkpoints %s, deleted %d objects, live attempts %s",
                     self.job_id, report.retired, len(garbage), report.kept_live_attempts or "none")
        return report


def verify_bytes(data: bytes, ref: FileRef, where: str) -> None:
    if len(data) != ref.size:
        raise CheckpointCorrupted(f"{where} has {len(data)} bytes, the manifest says {ref.size}")
    digest = sha256_hex(data)
    if digest != ref.sha256:
        raise CheckpointCorrupted(
            f"{where} fails its checksum (sha256 {digest[:12]}…, manifest says {ref.sha256[:12]}…): "
            "the checkpoint is damaged"
        )


def _now() -> str:
    now = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=clock_skew())
    return now.isoformat(timespec="milliseconds")


__all__ = [
    "CheckpointLog",
    "CommitOutcome",
    "DatasetRef",
    "GcReport",
    "JobLayout",
    "Manifest",
    "check_job_id",
    "verify_bytes",
    "join_key",
]
