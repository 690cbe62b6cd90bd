"""One schema per kind of record read back from a store, checked before anything uses it.

A store is untrusted input (docs/design.md, "Who may do what"): a record may be damaged, written by an older
version, or not ours at all. ``RecordKind.load`` turns the bytes of a record into a dict only
when it is JSON of its kind's shape, and otherwise raises ``DamagedRecord`` naming the record's
key and what is wrong, so that nothing is computed on it and the Iterations view can answer
with the message instead of a traceback.

The kinds are declared here, beside each other; the modules that write a kind read it back
through its schema (include.checkpoints.job_records for batch, publication and control records,
include.publication.outputs for output manifests and increments); a checkpoint manifest, an epoch report,
an owner or lease record checks itself as it is parsed (include.checkpoints.manifest, include.checkpoints.head_state,
include.runs.ownership, include.publication.output_owners).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from include.checkpoints.layout import ATTEMPT_ID_PATTERN, JOB_ID_PATTERN
from include.errors import CheckpointCorrupted, OutputError

Check = Callable[[Any], bool]


class DamagedRecord(CheckpointCorrupted):
    """A record read back from a store that is not of its kind."""


class DamagedOutputRecord(DamagedRecord, OutputError):
    """A record of a published output (its manifest, an increment) that is not of its kind."""


def _int(minimum: int = 0) -> Check:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _opt(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _str(pattern: re.Pattern[str] | None = None, *, empty: bool = False) -> Check:
    return lambda v: isinstance(v, str) and (empty or bool(v)) and (pattern is None or bool(pattern.fullmatch(v)))


def _one_of(*values: Any) -> Check:
    return lambda v: v in values


def _list_of(check: Check) -> Check:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


_SHA256 = re.compile(r"[0-9a-f]{64}")
_KEY = re.compile(r"[A-Za-z0-9_.=\-]+(?:/[A-Za-z0-9_.=\-]+)*")
_NAME = ATTEMPT_ID_PATTERN


def _file(v: Any) -> bool:
    return (isinstance(v, Mapping) and _str(_KEY)(v.get("key")) and ".." not in v["key"].split("/")
            and _int()(v.get("size")) and _str(_SHA256)(v.get("sha256")))


@dataclass(frozen=True)
class RecordKind:
    """A kind of record: its name (for messages), its fields and their checks (``required``),
    and the fields it may have besides (``optional``); other fields are allowed (newer
    writers may add some) but never used."""

    name: str
    required: Mapping[str, Check]
    optional: Mapping[str, Check] = None  # type: ignore[assignment]
    error: type[DamagedRecord] = DamagedRecord

    def check(self, record: Any, where: str) -> dict[str, Any]:
        if not isinstance(record, Mapping):
            raise self.error(f"{where} is not a {self.name}: a JSON object is expected, got "
                                f"{type(record).__name__}")
        for name, ok in self.required.items():
            if name not in record:
                raise self.error(f"{where} is not a {self.name}: it has no {name!r}")
            if not ok(record[name]):
                raise self.error(f"{where} is not a {self.name}: {name} {_shown(record[name])} is not valid")
        for name, ok in (self.optional or {}).items():
            if name in record and not ok(record[name]):
                raise self.error(f"{where} is not a {self.name}: {name} {_shown(record[name])} is not valid")
        return dict(record)

    def load(self, data: bytes, where: str) -> dict[str, Any]:
        """The record in ``data`` (the bytes of the object at ``where``), checked."""
        try:
            record = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise self.error(f"{where} is not a {self.name}: not JSON ({e})") from None
        return self.check(record, where)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


BATCH = RecordKind("batch record", {"batch_id": _str(_NAME), "final_checkpoint_id": _int()})
BATCH_START = RecordKind("batch start record", {"start_epoch": _int()})
PUBLICATION = RecordKind("publication record", {
    "checkpoint_id": _int(), "sink": _str(_NAME), "location": _str()},
    {"format": _str(), "rows": _int(), "attempt_id": _str(), "at": _str(empty=True)})
STOP_REQUEST = RecordKind("stop request", {"mode": _one_of("drain", "suspend")},
                          {"requested_at": _str(empty=True), "requested_by": _str(empty=True)})
SAVEPOINT = RecordKind("savepoint record", {"checkpoint_id": _int(), "mode": _one_of("suspend")})
#: an output version's name: ``v-<job>-<checkpoint>`` (include.publication.outputs.version_of)
VERSION_PATTERN = re.compile(r"v-[A-Za-z0-9_.\-]{1,300}")
OUTPUT_MANIFEST = RecordKind("publication manifest (iterations.published/1)", {
    "format": _one_of("iterations.published/1"), "name": _str(_NAME), "job_id": _str(JOB_ID_PATTERN),
    "checkpoint_id": _int(), "version": _str(VERSION_PATTERN), "rows": _int(),
    "files": _list_of(_file)}, {"attempt_id": _str(_NAME), "schema": _str(empty=True)}, DamagedOutputRecord)
INCREMENT = RecordKind("output increment (iterations.published/1)", {
    "format": _one_of("iterations.published/1"), "name": _str(_NAME), "job_id": _str(JOB_ID_PATTERN),
    "checkpoint_id": _int(), "rows": _int(), "files": _list_of(_file)},
    {"attempt_id": _str(_NAME), "version": _str(), "schema": _str(empty=True)}, DamagedOutputRecord)

_DATE = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_STARTED = lambda v: v is None or (isinstance(v, Mapping) and _str(JOB_ID_PATTERN)(v.get("job_id"))  # noqa: E731
                                   and _int()(v.get("checkpoint_id")))
SCHEDULED_DATE = RecordKind("scheduled date record", {
    "date": _str(_DATE), "current": _opt(_str(JOB_ID_PATTERN)), "pending": _opt(_str(JOB_ID_PATTERN))})
SCHEDULED_GENERATION = RecordKind("scheduled generation record", {
    "date": _str(_DATE), "started_from": _STARTED, "recompute": lambda v: isinstance(v, bool)},
    {"rewound_from": lambda v: v is None or isinstance(v, Mapping), "arrived": _list_of(lambda v: isinstance(v, Mapping))})
#: the version of a published input a job's log reads (include.publication.pinned_inputs.pin_input; its files
#: are checked there, relative to the input: ``<version>/part-NNNNN.parquet``)
INPUT_PIN = RecordKind("input pin (iterations.input/1)", {
    "format": _one_of("iterations.input/1"), "uri": _str(), "version": _str(VERSION_PATTERN),
    "job_id": _str(JOB_ID_PATTERN), "checkpoint_id": _int(), "rows": _int(), "files": _list_of(_file)},
    {"pinned_at": _str(empty=True), "arrived": _list_of(lambda v: isinstance(v, Mapping))})
#: the files of an input that is not a published output, as a log's first plan found them
#: (include.publication.pinned_inputs.pin_input; each file is checked there: include.contract.input_versions.check_pinned_files)
INPUT_FILES_PIN = RecordKind("input pin (iterations.input-files/1)", {
    "format": _one_of("iterations.input-files/1"), "uri": _str(), "files": lambda v: isinstance(v, list)},
    {"pinned_at": _str(empty=True)})
#: what a reviewed job's finish staged of its outputs (include.publication.publish.Publisher.stage):
#: one item per output version, final or per-epoch, with the keys it writes (each checked again,
#: by shape, before anything is deleted by it) and, once copied, the record its publication writes
STAGED = RecordKind("staged publication record", {
    "checkpoint_id": _int(), "location": _str(), "format": _one_of("parquet", "delta"),
    "items": _list_of(lambda v: isinstance(v, Mapping) and _one_of("final", "increment")(v.get("kind"))
                      and _str(_NAME)(v.get("name")) and _int()(v.get("checkpoint_id"))
                      and _str(VERSION_PATTERN)(v.get("version")) and isinstance(v.get("keys"), list)
                      and all(isinstance(k, str) for k in v["keys"]))},
    {"complete": lambda v: isinstance(v, bool), "made_location": _opt(_str()), "at": _str(empty=True),
     "records": lambda v: isinstance(v, Mapping)})
#: a person's answer to the review of a publication (approved: create-if-absent, once; rejected:
#: one record per rejection)
REVIEW_ANSWER = RecordKind("review answer", {
    "checkpoint_id": _int(), "decision": _one_of("approved", "rejected")},
    {"by": _opt(_str(empty=True)), "why": _str(empty=True), "at": _str(empty=True)})
#: the partition count a log's input's size gave it (include.contract.sizing.log_partitions)
SIZING = RecordKind("sizing record (iterations.sizing/1)", {
    "format": _one_of("iterations.sizing/1"), "num_partitions": lambda v: _int(1)(v) and v <= 100_000},
    {"input_bytes": _opt(_int()), "partition_input_bytes": _int(1)})

__all__ = ["BATCH", "BATCH_START", "DamagedOutputRecord", "DamagedRecord", "INCREMENT", "INPUT_FILES_PIN", "INPUT_PIN",
           "OUTPUT_MANIFEST", "PUBLICATION", "REVIEW_ANSWER", "RecordKind", "SAVEPOINT", "SCHEDULED_DATE",
           "SCHEDULED_GENERATION", "SIZING", "STAGED", "STOP_REQUEST", "VERSION_PATTERN"]
