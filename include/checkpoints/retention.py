"""Retention and garbage collection of a job's checkpoints, and the rewind to an intact
checkpoint that a damaged one forces (``Retention``, reached as ``log.retention``).

Retention keeps the last R checkpoints, every batch's final one and every savepoint; a retired
checkpoint's manifest stays as a tombstone (its id can never be committed again) and its
``retired/<id>`` marker keeps its summary. Garbage collection never deletes an object a kept
manifest references, nor what a live attempt of a later epoch wrote.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from include.checkpoints.job_records import now_iso
from include.checkpoints.layout import report_foreign
from include.errors import CheckpointError, ConfigError, ObjectNotFound
from include.process.failpoints import trace

if TYPE_CHECKING:
    from include.checkpoints.checkpoint_log import CheckpointLog

logger = logging.getLogger("include.checkpoints.checkpoint_log")

# what a retired checkpoint's manifest is replaced with
TOMBSTONE = b'{"retired": true}\n'


@dataclass
class GcReport:
    retired: list[int] = field(default_factory=list)
    deleted_objects: int = 0
    kept_live_attempts: list[str] = field(default_factory=list)


class Retention:
    """What a job keeps of its checkpoints, and what it may delete."""

    def __init__(self, log: "CheckpointLog"):
        self.log = log
        self.store = log.store
        self.layout = log.layout
        self.job_id = log.job_id

    def rewind(self, to_id: int, reason: str) -> list[int]:
        """Make checkpoint ``to_id`` the latest again, on the user's request after a later one
        was found damaged: every checkpoint after it is rejected (its manifest moved to
        ``rejected/<id>.json`` with the reason, its batch and publication records dropped) and
        every attempt of those epochs is aborted, so that none of them can commit any more.
        The epochs after ``to_id`` are then computed again. Returns the rejected ids."""
        self.log.load(to_id, verify="none")  # it must be a kept, committed checkpoint
        later = sorted((i for i in self.log._ids("checkpoints", ".json") if i > to_id), reverse=True)
        if not later:
            return []
        at = now_iso()
        for cid in later:  # evidence and fencing first, then the manifests go
            try:
                damaged = self.store.get(self.layout.checkpoint(cid)).decode(errors="replace")
            except ObjectNotFound:
                continue
            self.store.put(self.layout.rejected(cid), json.dumps(
                {"checkpoint_id": cid, "rewound_to": to_id, "reason": reason, "at": at, "manifest": damaged},
                indent=1, sort_keys=True).encode())
            for attempt_id in self.log.attempt_ids(cid):
                self.store.put(self.layout.aborted(cid, attempt_id),
                               json.dumps({"reason": f"rejected: rewound to checkpoint {to_id}", "at": at}).encode())
        stale_batches = [self.layout.batch(b) for b, cid in self.log.batches.finals().items() if cid in later]
        publications = [o.key for cid in later for o in self.store.list(f"{self.layout.root}/published/{cid:010d}/")]
        self.store.delete(stale_batches + publications + [self.layout.retired(cid) for cid in later])
        for cid in later:  # highest first: the latest id only ever goes down to ``to_id``
            self.store.delete([self.layout.checkpoint(cid)])
        logger.warning("job %s: rewound to checkpoint %d; rejected checkpoints %s (%s)", self.job_id, to_id,
                    sorted(later), reason)
        trace("checkpoint.rewound", job=self.job_id, to=to_id, rejected=sorted(later))
        return sorted(later)

    def rejected(self) -> dict[int, dict[str, Any]]:
        """Checkpoints rejected by a rewind: id -> the record (reason, the manifest as it was)."""
        out = {}
        for o in self.store.list(f"{self.layout.root}/rejected/"):
            cid = self.layout.parse_id(o.key)
            if cid is None or o.key != self.layout.rejected(cid):
                report_foreign(self.store, o.key, "a rejection is rejected/<10-digit id>.json")
                continue
            try:
                record = json.loads(self.store.get(o.key))
            except ValueError:
                record = None
            if not isinstance(record, dict):
                report_foreign(self.store, o.key, "a rejection record is a JSON object")
                continue
            out[cid] = record
        return out

    def _summary(self, checkpoint_id: int) -> bytes:
        """What a retired checkpoint leaves behind: its epoch's decision and where it came from
        (JSON; empty if the manifest cannot be read)."""
        try:
            m = self.log.load(checkpoint_id, verify="none")
        except (CheckpointError, ValueError):
            return b""
        d = m.decision
        return json.dumps({
            "checkpoint_id": m.checkpoint_id, "kind": m.kind, "epoch": m.epoch, "parent_id": m.parent_id,
            "attempt_id": m.attempt_id, "batch_id": m.batch_id, "committed_at": m.committed_at,
            "metrics": dict(d.metrics) if d else {}, "feedback_count": d.feedback_count if d else None,
            "terminated": d.terminated if d else False, "reason": d.reason if d else None,
            "history": m.history,
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

    def collect_garbage(self, retain_last: int, *, retain_batches: int | None = None,
                        retain_history: int | None = None) -> GcReport:
        """Keep the last ``retain_last`` checkpoints, the final checkpoint of the newest
        ``retain_batches`` batches (None: of every batch) and every savepoint; delete everything
        else under ``attempts/`` that no kept manifest references, except attempts of epochs
        after the latest checkpoint (they may be running and about to commit). Of the retired
        checkpoints the newest ``retain_history`` keep their tombstone and summary (None: all);
        older ones are forgotten (``forget``), so that a job that runs for ever keeps a bounded
        number of objects."""
        if retain_last < 1:
            raise ConfigError(f"retain_last must be >= 1, got {retain_last}")
        report = GcReport()
        ids = self.log.checkpoint_ids()
        latest = self.log.latest_id()
        if latest is None:
            return report
        finals = self.log.batches.finals()
        kept_finals = sorted(set(finals.values()))
        if retain_batches is not None:
            kept_finals = kept_finals[max(0, len(kept_finals) - retain_batches):]
        keep = set(ids[-retain_last:]) | set(kept_finals) | set(self.log.control.savepoints()) | {latest}
        keep &= set(ids)
        referenced: set[str] = set()
        for cid in sorted(keep):
            referenced.update(ref.key for ref in self.log.load(cid, verify="none").objects)
        for cid in ids:
            if cid not in keep:
                # Tombstone first: the id stays taken, so no zombie can ever commit it again.
                # The retired marker keeps the checkpoint's summary (its decision: metrics,
                # feedback, termination) for the job's history (include.runs.overview).
                self.store.put(self.layout.retired(cid), self._summary(cid))
                self.store.put(self.layout.checkpoint(cid), TOMBSTONE)
                report.retired.append(cid)
        aborted = set()
        settled = []  # abort marks of epochs that are committed: nothing can adopt them any more
        for o in self.store.list(f"{self.layout.root}/aborted/"):
            parsed = self.layout.epoch_and_attempt(o.key, "aborted")
            if parsed is None or o.key != self.layout.aborted(*parsed):
                report_foreign(self.store, o.key, "an attempt's fate is aborted/<epoch>/<attempt id>")
                continue
            aborted.add(parsed)
            if parsed[0] <= latest:
                settled.append(o.key)
        garbage = []
        live = set()
        for o in self.store.list(self.layout.attempts()):
            if o.key in referenced:
                continue
            parsed = self.layout.epoch_and_attempt(o.key, "attempts")
            if parsed is None or o.key == self.layout.attempt(*parsed):
                report_foreign(self.store, o.key, "an attempt's objects are attempts/<epoch>/<attempt id>/...")
                continue  # not ours: never deleted
            if parsed[0] > latest and parsed not in aborted:
                live.add(f"{parsed[0]}/{parsed[1]}")
                continue
            garbage.append(o.key)
        # check results of retired epochs go with them (those of kept and later epochs stay)
        checks = []
        for o in self.store.list(f"{self.layout.root}/checks/"):
            parsed = self.layout.epoch_and_attempt(o.key, "checks")
            if parsed is None or o.key == self.layout.checks(*parsed):
                report_foreign(self.store, o.key, "check results are checks/<epoch>/<attempt id>/...")
                continue
            if parsed[0] in ids and parsed[0] not in keep:
                checks.append(o.key)
        garbage += checks
        self.store.delete(garbage + settled)
        if retain_history is not None:
            garbage += self.forget(retain_history, finals)
        report.deleted_objects = len(garbage)
        report.kept_live_attempts = sorted(live)
        if report.retired or garbage:
            logger.info("gc of job %s: retired checkpoints %s, deleted %d objects, live attempts %s",
                     self.job_id, report.retired, len(garbage), report.kept_live_attempts or "none")
        return report


    def forget(self, retain_history: int, finals: dict[str, int] | None = None) -> list[str]:
        """Forget the retired checkpoints older than the newest ``retain_history`` of them: their
        tombstone, then their summary, and the records of batches that ended on them. The ids
        stay impossible to commit: a commit must follow the latest checkpoint, which is never
        retired. Returns the keys deleted."""
        retired = sorted(self.log._ids("retired", ""))
        old = retired[:max(0, len(retired) - retain_history)]
        if not old:
            return []
        forgotten = set(old)
        finals = self.log.batches.finals() if finals is None else finals
        batches = [b for b, cid in finals.items() if cid in forgotten]
        tombstones = [self.layout.checkpoint(cid) for cid in old]
        # tombstones first: an id whose summary went while its tombstone stayed would read as kept
        self.store.delete(tombstones)
        rest = [self.layout.retired(cid) for cid in old] + \
            [key for b in batches for key in (self.layout.batch(b), self.layout.batch_start(b))]
        self.store.delete(rest)
        logger.info("job %s: forgot retired checkpoints %d..%d and %d batch record(s) (history keeps %d)",
                    self.job_id, old[0], old[-1], len(batches), retain_history)
        return tombstones + rest


__all__ = ["GcReport", "Retention", "TOMBSTONE"]
