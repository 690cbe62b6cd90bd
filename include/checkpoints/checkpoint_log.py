"""The checkpoint log of a job: attempt-scoped staging, single-winner commits, verified restores
and idempotent commit and abort (docs/design.md, "Rules of the store"; flink-ml's ``Checkpoints``). The keys are
``include.checkpoints.layout``'s; the records beside the checkpoints (batches, publications, control) and
retention hang off the log as ``log.batches``, ``log.publications``, ``log.control``,
``log.reviews`` and ``log.retention``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping

from include.checkpoints.head_state import EpochReport
from include.checkpoints.job_records import Batches, Control, Publications, Reviews, now_iso
from include.checkpoints.layout import JobLayout, report_foreign
from include.checkpoints.manifest import Manifest, verify_bytes
from include.checkpoints.retention import TOMBSTONE, Retention
from include.errors import (
    CheckpointCorrupted,
    CheckpointError,
    CheckpointSuperseded,
    ObjectNotFound,
)
from include.process.failpoints import trace
from include.store import ObjectStore

log = logging.getLogger(__name__)


#: a partition's epoch report under an attempt's ``_reports/`` (include.checkpoints.layout.JobLayout.report)
_REPORT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}/part-[0-9]{5}\.json")


@dataclass(frozen=True)
class CommitOutcome:
    checkpoint_id: int
    attempt_id: str
    # False when the manifest was already there from this same attempt (a retry after a lost
    # response): the commit had landed; nothing is written twice.
    first_write: bool


#: the start of the reason an attempt is aborted with when its run or task try ended before it
#: did (its process killed, lost or timed out) and a new run or try plans the epoch again
ABANDONED = "left unfinished when its run or task try ended"


def describe_run(run: Mapping[str, Any] | None) -> str:
    """Who ran an attempt (its plan's ``run``) in words: ``task epoch_1.run try 2 of run
    manual__2026-11-29T00:00:00+00:00 of DAG iterate_pagerank``; ``the library runner (pid 42
    on host)``; ``an unrecorded runner``."""
    if not isinstance(run, Mapping):
        return "an unrecorded runner"
    if run.get("runner") == "library":
        return f"the library runner (pid {run.get('pid')} on {run.get('host')})"
    task = f"task {run.get('task_id')}" + (f"[{run['map_index']}]" if "map_index" in run else "")
    return f"{task} try {run.get('try_number')} of run {run.get('run_id')} of DAG {run.get('dag_id')}"


class CheckpointLog:
    """The idempotent checkpoint API of one job (flink-ml's ``Checkpoints``, in object storage)."""

    def __init__(self, store: ObjectStore, job_id: str):
        self.store = store
        self.layout = JobLayout(job_id)
        self.job_id = job_id
        self.batches = Batches(store, self.layout)
        self.publications = Publications(store, self.layout)
        self.control = Control(store, self.layout)
        self.reviews = Reviews(store, self.layout)
        self.retention = Retention(self)

    # --- reading ------------------------------------------------------------------------

    def _ids(self, folder: str, suffix: str) -> set[int]:
        """The ids of ``<root>/<folder>/<id><suffix>`` keys; any other key there is reported and
        ignored (include.checkpoints.layout.report_foreign)."""
        prefix = f"{self.layout.root}/{folder}/"
        out = set()
        for o in self.store.list(prefix):
            name = o.key[len(prefix):]
            cid = self.layout.parse_id(name)
            if cid is None or name != f"{cid:010d}{suffix}":
                report_foreign(self.store, o.key, f"a {folder}/ entry is <10-digit id>{suffix}")
                continue
            out.add(cid)
        return out

    def checkpoint_ids(self) -> list[int]:
        """Ids of committed checkpoints whose data is still kept, ascending."""
        return sorted(self._ids("checkpoints", ".json") - self._ids("retired", ""))

    def latest_id(self) -> int | None:
        ids = self._ids("checkpoints", ".json")
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
        if data == TOMBSTONE:
            raise CheckpointError(
                f"checkpoint {checkpoint_id} of job {self.job_id} was retired by retention; "
                f"kept checkpoints: {self.checkpoint_ids()}"
            )
        manifest = Manifest.from_bytes(data, where)
        if manifest.checkpoint_id != checkpoint_id or manifest.job_id != self.job_id:
            raise CheckpointCorrupted(
                f"manifest {where} claims job {manifest.job_id!r} checkpoint {manifest.checkpoint_id}"
            )
        own = f"{self.layout.root}/"
        foreign = [ref.key for ref in manifest.objects if not self.layout.holds(ref.key, own)]
        if foreign:  # a manifest only ever names its own job's objects: never restore another's state
            raise CheckpointCorrupted(
                f"manifest {where} names objects outside job {self.job_id}'s directory ({own}): "
                f"{', '.join(map(str, foreign[:3]))}{' ...' if len(foreign) > 3 else ''}; it is refused"
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
        prefix = self.layout.reports(epoch, attempt_id)
        for o in self.store.list(prefix):
            if not _REPORT_NAME.fullmatch(o.key[len(prefix):]):
                report_foreign(self.store, o.key, "a report is _reports/<head>/part-<5 digits>.json")
                continue
            out.append(EpochReport.from_json(self.store.get(o.key), self.store.location(o.key)))
        return out

    def has_started(self) -> bool:
        """Whether any attempt of any epoch was ever recorded (the job has started); a key
        under ``attempts/`` in no attempt's directory is reported and ignored."""
        for o in self.store.list(self.layout.attempts()):
            if self.layout.epoch_and_attempt(o.key, "attempts") is not None:
                return True
            report_foreign(self.store, o.key, "an attempt's objects are attempts/<epoch>/<attempt id>/...")
        return False

    def attempt_ids(self, epoch: int) -> list[str]:
        ids = set()
        for o in self.store.list(self.layout.attempts(epoch)):
            parsed = self.layout.epoch_and_attempt(o.key, "attempts")
            if parsed is None or parsed[0] != epoch:
                report_foreign(self.store, o.key, "an attempt's objects are attempts/<epoch>/<attempt id>/...")
                continue
            ids.add(parsed[1])
        return sorted(ids)

    def is_aborted(self, epoch: int, attempt_id: str) -> bool:
        return self.abort_reason(epoch, attempt_id) is not None

    def fate(self, epoch: int, attempt_id: str) -> dict[str, Any] | None:
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
        fate = self.fate(epoch, attempt_id)
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
        if self.store.put_if_absent(key, json.dumps({"claim": "commit", "at": now_iso()}).encode()):
            return
        reason = self.abort_reason(epoch, attempt_id)
        if reason is not None:  # fenced: a retry took over, or a rewind rejected its epoch
            raise CheckpointSuperseded(
                f"attempt {attempt_id} of checkpoint {epoch} of job {self.job_id} was aborted "
                f"({reason or 'no reason given'}): it cannot commit, it is superseded and its files are garbage")

    def fates(self, epoch: int) -> dict[str, dict[str, Any]]:
        """Attempt id -> its fate record (``_fate``) of every attempt of ``epoch`` whose fate is
        decided (aborted, or claimed by its commit)."""
        out = {}
        for o in self.store.list(f"{self.layout.root}/aborted/{epoch:010d}/"):
            parsed = self.layout.epoch_and_attempt(o.key, "aborted")
            if parsed is None or o.key != self.layout.aborted(*parsed) or parsed[0] != epoch:
                report_foreign(self.store, o.key, "an attempt's fate is aborted/<epoch>/<attempt id>")
                continue
            fate = self.fate(epoch, parsed[1])
            if fate is not None:
                out[parsed[1]] = fate
        return out

    def record_phases(self, epoch: int, attempt_id: str, phases: Mapping[str, float]) -> None:
        """Keep how long the attempt's Spark job spent in each phase (seconds) and when it
        ended, for the commit to put in the checkpoint's history."""
        record = {k: round(float(v), 3) for k, v in phases.items()}
        record["ended_at"] = round(time.time(), 3)
        self.store.put(self.layout.phases(epoch, attempt_id), json.dumps(record, sort_keys=True).encode())

    def read_phases(self, epoch: int, attempt_id: str) -> dict[str, float]:
        """What ``record_phases`` kept ({} when nothing, or not numbers)."""
        try:
            record = json.loads(self.store.get(self.layout.phases(epoch, attempt_id)))
        except (ObjectNotFound, ValueError):
            return {}
        if not isinstance(record, dict):
            return {}
        return {str(k): float(v) for k, v in record.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e12}

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
        stamped = Manifest(**{**manifest.__dict__, "committed_at": now_iso()})
        if self.store.put_if_absent(self.layout.checkpoint(cid), stamped.to_bytes()):
            trace("checkpoint.committed", job=self.job_id, checkpoint=cid, attempt=manifest.attempt_id,
                  kind=manifest.kind, at=stamped.committed_at)
            return CommitOutcome(cid, manifest.attempt_id, first_write=True)
        return self._already_committed(manifest)

    def seed(self, manifest: Manifest) -> None:
        """Commit the first checkpoint of a new generation (include.runs.generations.seed): a copy of
        another log's, whose id it keeps; only into a log with no checkpoint yet."""
        if manifest.job_id != self.job_id:
            raise CheckpointError(f"manifest of job {manifest.job_id!r} given to the log of {self.job_id!r}")
        latest = self.latest_id()
        if latest is not None and latest != manifest.checkpoint_id:
            raise CheckpointError(f"job {self.job_id} has checkpoints already (latest {latest}): it cannot be seeded")
        stamped = Manifest(**{**manifest.__dict__, "committed_at": now_iso()})
        if self.store.put_if_absent(self.layout.checkpoint(manifest.checkpoint_id), stamped.to_bytes()):
            trace("checkpoint.seeded", job=self.job_id, checkpoint=manifest.checkpoint_id)

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
        if data != TOMBSTONE:
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
        if data == TOMBSTONE:
            return None
        return Manifest.from_bytes(data, self.store.location(self.layout.checkpoint(checkpoint_id))).attempt_id

    def abort(self, epoch: int, attempt_id: str, reason: str = "", *, run: Mapping[str, Any] | None = None,
              batch_id: str | None = None) -> bool:
        """Abort an attempt: decide its fate (one create-if-absent write, the same one its
        commit makes: ``claim_commit``), then delete its files. Idempotent. A no-op (False) for
        an attempt whose commit claimed it first (committed, or committing now): nothing it
        wrote is deleted, so a checkpoint can never be committed and then lose its files.
        ``run`` and ``batch_id``: who ran the attempt and in which batch (its plan's), kept in the
        record for its history."""
        if self.committed_by(epoch) == attempt_id:
            return False
        key = self.layout.aborted(epoch, attempt_id)
        if not self.store.put_if_absent(key, json.dumps({"reason": reason, "at": now_iso(), **({"run": dict(run)} if run else {}),
                                                    **({"batch_id": batch_id} if batch_id else {})}).encode()):
            if self.abort_reason(epoch, attempt_id) is None:
                log.info("epoch %d attempt %s is not aborted: its commit claimed it first", epoch, attempt_id)
                return False
        keys = [o.key for o in self.store.list(self.layout.attempt(epoch, attempt_id) + "/")]
        self.store.delete(keys)
        log.info("aborted epoch %d attempt %s (%d objects deleted)%s", epoch, attempt_id, len(keys),
                 f": {reason}" if reason else "")
        return True


__all__ = ["CheckpointLog", "CommitOutcome"]
