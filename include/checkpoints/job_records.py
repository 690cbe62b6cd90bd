"""What a job records beside its checkpoints: each batch's final checkpoint (``Batches``), each
sink's publication of a checkpoint and the versions it wrote into its outputs
(``Publications``), and stop requests and savepoints (``Control``).

Each is reached through the job's checkpoint log (``log.batches``, ``log.publications``,
``log.control``); records read back from the store are checked before they are used.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from typing import Any, Mapping

from include.checkpoints.layout import ATTEMPT_ID_PATTERN, JobLayout, check_attempt_id, report_foreign
from include.checkpoints.lifecycle import StopMode
from include.checkpoints.record_schemas import (
    BATCH,
    BATCH_START,
    PUBLICATION,
    REVIEW_ANSWER,
    STAGED,
    STOP_REQUEST,
    DamagedRecord,
)
from include.errors import ObjectNotFound
from include.process.failpoints import clock_skew
from include.store import ObjectStore

log = logging.getLogger(__name__)


def now_iso() -> str:
    """This process's wall clock (shifted by ITERATIONS_CLOCK_SKEW in tests) as ISO 8601: the
    timestamps records carry are informational, never used for ordering."""
    now = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=clock_skew())
    return now.isoformat(timespec="milliseconds")


class Batches:
    """The final checkpoint of each batch (DAG run) of the job; retention keeps them."""

    def __init__(self, store: ObjectStore, layout: JobLayout):
        self.store, self.layout = store, layout

    def record_final(self, batch_id: str, checkpoint_id: int) -> None:
        self.store.put(self.layout.batch(batch_id),
                       json.dumps({"batch_id": batch_id, "final_checkpoint_id": checkpoint_id}).encode())

    def finals(self) -> dict[str, int]:
        """batch id -> its final checkpoint id (a key that is not a batch record's is reported
        and ignored; a damaged record is DamagedRecord naming it)."""
        out = {}
        prefix = f"{self.layout.root}/batches/"
        for o in self.store.list(prefix):
            name = o.key[len(prefix):]
            if not name.endswith(".json") or not ATTEMPT_ID_PATTERN.fullmatch(name[:-5]):
                report_foreign(self.store, o.key, "a batch record is batches/<batch id>.json")
                continue
            d = BATCH.load(self.store.get(o.key), self.store.location(o.key))
            if d["batch_id"] != name[:-5]:
                raise DamagedRecord(f"{self.store.location(o.key)} is not a batch record of batch {name[:-5]}: it "
                                    f"names batch {d['batch_id']!r}")
            out[d["batch_id"]] = d["final_checkpoint_id"]
        return out

    def start(self, batch_id: str, next_epoch: int | None = None) -> int | None:
        """The first epoch of a batch, fixed by the first head that runs in it (``next_epoch``:
        record it unless one is recorded), so that a cleared and re-run task finds the same
        epochs; None if nothing is recorded."""
        key = self.layout.batch_start(batch_id)
        if next_epoch is not None:
            self.store.put_if_absent(key, json.dumps({"start_epoch": next_epoch}).encode())
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            return None
        return BATCH_START.load(data, self.store.location(key))["start_epoch"]


class Publications:
    """Phase two of the outputs' two-phase commit: which sinks published which checkpoint, and
    the history of the versions the job wrote into its outputs (include.publication.outputs.PublicationHistory:
    the only files its later publications may delete)."""

    def __init__(self, store: ObjectStore, layout: JobLayout):
        self.store, self.layout = store, layout

    def record(self, checkpoint_id: int, sink: str, record: Mapping[str, Any]) -> None:
        self.store.put(self.layout.publication(checkpoint_id, sink),
                       json.dumps({**record, "checkpoint_id": checkpoint_id, "sink": sink, "at": now_iso()},
                                  sort_keys=True).encode())

    def of(self, checkpoint_id: int) -> dict[str, dict[str, Any]]:
        """sink -> its publication record, for the sinks that published checkpoint ``checkpoint_id``."""
        prefix = f"{self.layout.root}/published/{checkpoint_id:010d}/"
        out = {}
        for o in self.store.list(prefix):
            name = o.key[len(prefix):]
            if not name.endswith(".json") or not ATTEMPT_ID_PATTERN.fullmatch(name[:-5]):
                report_foreign(self.store, o.key, "a publication record is published/<id>/<sink>.json")
                continue
            d = PUBLICATION.load(self.store.get(o.key), self.store.location(o.key))
            if (d["sink"], d["checkpoint_id"]) != (name[:-5], checkpoint_id):
                raise DamagedRecord(f"{self.store.location(o.key)} is not the record of sink {name[:-5]} and checkpoint "
                                    f"{checkpoint_id}: it names sink {d['sink']!r}, checkpoint {d['checkpoint_id']}")
            out[d["sink"]] = d
        return out

    def record_written(self, location: str, name: str, version: str, keys: list[str]) -> None:
        self.store.put(f"{self.layout.history_prefix(location, name)}{check_attempt_id(version)}.json",
                       json.dumps({"location": location, "name": name, "version": version, "keys": list(keys),
                                   "retired": False, "at": now_iso()}, sort_keys=True).encode())

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
        self.store.put(key, json.dumps({**d, "retired": True, "retired_at": now_iso()}, sort_keys=True).encode())


class Control:
    """Stop requests for the running job (drain or suspend) and the savepoints it was suspended at."""

    def __init__(self, store: ObjectStore, layout: JobLayout):
        self.store, self.layout = store, layout

    def request_stop(self, mode: StopMode | str, *, requested_by: str = "") -> dict[str, Any]:
        """Ask the running job to stop at its next epoch boundary (``drain`` or ``suspend``);
        a later request replaces an earlier one that was not honoured yet."""
        mode = StopMode.parse(mode)
        request = {"mode": mode.value, "requested_at": now_iso(), "requested_by": requested_by}
        self.store.put(self.layout.stop_request(), json.dumps(request, sort_keys=True).encode())
        log.info("job %s: %s requested%s", self.layout.job_id, mode.value,
                 f" by {requested_by}" if requested_by else "")
        return request

    def stop_request(self) -> StopMode | None:
        key = self.layout.stop_request()
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            return None
        return StopMode.parse(STOP_REQUEST.load(data, self.store.location(key))["mode"])

    def clear_stop_request(self) -> None:
        self.store.delete([self.layout.stop_request()])

    def record_savepoint(self, checkpoint_id: int, reason: str) -> None:
        self.store.put(self.layout.savepoint(checkpoint_id),
                       json.dumps({"checkpoint_id": checkpoint_id, "mode": "suspend", "reason": reason,
                                   "at": now_iso()}, sort_keys=True).encode())

    def savepoints(self) -> list[int]:
        """Checkpoints the job was suspended at (kept by retention until deleted by the user)."""
        out = []
        for o in self.store.list(f"{self.layout.root}/savepoints/"):
            cid = self.layout.parse_id(o.key)
            if cid is None or o.key != self.layout.savepoint(cid):
                report_foreign(self.store, o.key, "a savepoint record is savepoints/<10-digit id>.json")
                continue
            out.append(cid)
        return sorted(out)


class Reviews:
    """A reviewed job's publications (include.publication.publish.Publisher): per final
    checkpoint, what its finish staged, the review shown to a person, and their answers (one
    approval, written once; any number of rejections)."""

    def __init__(self, store: ObjectStore, layout: JobLayout):
        self.store, self.layout = store, layout

    def _get(self, key: str) -> bytes | None:
        try:
            return self.store.get(key)
        except ObjectNotFound:
            return None

    def record_staged(self, checkpoint_id: int, record: Mapping[str, Any]) -> None:
        self.store.put(self.layout.review(checkpoint_id, "staged"),
                       json.dumps({**record, "checkpoint_id": checkpoint_id, "at": now_iso()}, sort_keys=True,
                                  indent=1).encode())

    def staged(self, checkpoint_id: int) -> dict[str, Any] | None:
        """What the finish staged for checkpoint ``checkpoint_id``; None if nothing is staged."""
        key = self.layout.review(checkpoint_id, "staged")
        data = self._get(key)
        if data is None:
            return None
        record = STAGED.load(data, self.store.location(key))
        if record["checkpoint_id"] != checkpoint_id:
            raise DamagedRecord(f"{self.store.location(key)} is the staged record of checkpoint "
                                f"{record['checkpoint_id']}, not {checkpoint_id}")
        return record

    def forget_staged(self, checkpoint_id: int) -> None:
        self.store.delete([self.layout.review(checkpoint_id, "staged")])

    def record_review(self, checkpoint_id: int, review: Mapping[str, Any]) -> None:
        self.store.put(self.layout.review(checkpoint_id, "review"),
                       json.dumps({**review, "at": now_iso()}, sort_keys=True, indent=1, default=str).encode())

    def review(self, checkpoint_id: int) -> dict[str, Any] | None:
        """The review shown to a person (a JSON object, shown as text only; None if none)."""
        data = self._get(self.layout.review(checkpoint_id, "review"))
        try:
            record = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def approve(self, checkpoint_id: int, by: str | None) -> dict[str, Any]:
        """Record the approval, once (create-if-absent): the first one recorded wins."""
        key = self.layout.review(checkpoint_id, "approved")
        record = {"checkpoint_id": checkpoint_id, "decision": "approved", "by": by, "at": now_iso()}
        self.store.put_if_absent(key, json.dumps(record, sort_keys=True).encode())
        return self.approval(checkpoint_id) or record

    def approval(self, checkpoint_id: int) -> dict[str, Any] | None:
        key = self.layout.review(checkpoint_id, "approved")
        data = self._get(key)
        if data is None:
            return None
        record = REVIEW_ANSWER.load(data, self.store.location(key))
        if (record["checkpoint_id"], record["decision"]) != (checkpoint_id, "approved"):
            raise DamagedRecord(f"{self.store.location(key)} is not the approval of checkpoint {checkpoint_id}")
        return record

    def reject(self, checkpoint_id: int, by: str | None, why: str) -> None:
        n = len(self.rejections(checkpoint_id))
        self.store.put(self.layout.review(checkpoint_id, f"rejected-{n + 1:04d}"), json.dumps(
            {"checkpoint_id": checkpoint_id, "decision": "rejected", "by": by, "why": why[:2000], "at": now_iso()},
            sort_keys=True).encode())

    def rejections(self, checkpoint_id: int) -> list[dict[str, Any]]:
        prefix = self.layout.review(checkpoint_id, "x").rsplit("/", 1)[0] + "/rejected-"
        out = []
        for o in self.store.list(prefix):
            out.append(REVIEW_ANSWER.load(self.store.get(o.key), self.store.location(o.key)))
        return out


__all__ = ["Batches", "Control", "Publications", "Reviews", "now_iso"]
