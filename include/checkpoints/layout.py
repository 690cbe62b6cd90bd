"""Where a job's objects live in its store: the keys of one job (``JobLayout``), and the ids
that may appear in them.

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
                               files its later publications may delete: include.publication.outputs)
    savepoints/<id>.json       the job was suspended at checkpoint <id> (kept by retention)
    control/stop.json          a pending stop request (drain or suspend) for the running job
    owner.json                 who the job belongs to: DAG, body, input, output (include.runs.ownership)
    lease/<token>.json         which run may write; the highest token is current (include.runs.ownership)

Nothing under ``attempts/`` is read by an epoch computation unless a committed manifest
references it. Ordering is by checkpoint id only, never by timestamps.
"""

from __future__ import annotations

import hashlib
import logging
import re

from include.errors import ConfigError

log = logging.getLogger("iterations")

# one rule for a job id, in a form both Python and JSON Schema (the DAGs' job_id param) read:
# 1-128 of letters, digits, '_', '-', '.', starting with a letter or digit, no '..'
JOB_ID_REGEX = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
JOB_ID_PATTERN = re.compile(JOB_ID_REGEX)
# a fork's origin (include.contract.config.ForkFrom): a job id, then optionally ':' and an epoch
FORK_FROM_REGEX = JOB_ID_REGEX[:-1] + r"(:(0|[1-9][0-9]{0,9}))?$"
ATTEMPT_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.fullmatch(job_id):
        raise ConfigError(
            f"invalid job_id {job_id!r}: 1-128 characters of letters, digits, '_', '-', '.', "
            "starting with a letter or digit, without '..'"
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

    @staticmethod
    def holds(key: object, prefix: str) -> bool:
        """Whether ``key`` names an object under ``prefix`` (one of this layout's directories,
        ending in ``/``) and nothing outside it: a string below the prefix with no ``..``
        segment. The one test of a key read from the store (a manifest's, a report's) before
        it is restored, shared or committed."""
        return isinstance(key, str) and key.startswith(prefix) and ".." not in key.split("/")

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

    def phases(self, epoch: int, attempt_id: str) -> str:
        """How long the attempt's Spark job took to load, restore and step (written by it)."""
        return f"{self.attempt(epoch, attempt_id)}/_PHASES.json"

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

    def output_reports(self, epoch: int, attempt_id: str) -> str:
        """The reports of an attempt's staged outputs (one per output and partition)."""
        return f"{self.attempt(epoch, attempt_id)}/_outputs/"

    def batch_start(self, batch_id: str) -> str:
        """The first epoch of a batch (DAG run), fixed by its first head."""
        return f"{self.root}/batch-starts/{check_attempt_id(batch_id)}.json"

    def batch(self, batch_id: str) -> str:
        return f"{self.root}/batches/{check_attempt_id(batch_id)}.json"

    def publication(self, checkpoint_id: int, sink: str) -> str:
        return f"{self.root}/published/{checkpoint_id:010d}/{check_attempt_id(sink)}.json"

    def review(self, checkpoint_id: int, record: str) -> str:
        """A record of the review of final checkpoint ``checkpoint_id``'s publication
        (include.checkpoints.job_records.Reviews): ``staged``, ``review``, ``approved``,
        ``rejected-<n>``."""
        return f"{self.root}/reviews/{checkpoint_id:010d}/{check_attempt_id(record)}.json"

    def savepoint(self, checkpoint_id: int) -> str:
        return f"{self.root}/savepoints/{checkpoint_id:010d}.json"

    def stop_request(self) -> str:
        return f"{self.root}/control/stop.json"

    def history_prefix(self, location: str, name: str) -> str:
        """Where the job records what it wrote into output ``name`` at ``location``."""
        return f"{self.root}/history/{hashlib.sha256(location.encode()).hexdigest()[:24]}/{check_attempt_id(name)}/"

    def input_pin(self) -> str:
        """The version of a published input the job reads (include.publication.pinned_inputs)."""
        return f"{self.root}/input.json"

    def sizing(self) -> str:
        """The partition count the job's input's size gave the log (include.contract.sizing)."""
        return f"{self.root}/sizing.json"

    def fork(self) -> str:
        """The record of the checkpoint a forked job started from (include.runs.forks)."""
        return f"{self.root}/fork.json"

    def owner(self) -> str:
        """Who the job belongs to (include.runs.ownership)."""
        return f"{self.root}/owner.json"

    def lease_prefix(self) -> str:
        return f"{self.root}/lease/"

    def lease(self, token: int) -> str:
        """One record of the job's lease; the highest token is the current one (include.runs.ownership)."""
        return f"{self.lease_prefix()}{token:010d}.json"

    @staticmethod
    def parse_id(key: str) -> int | None:
        """The checkpoint or epoch id a key's last segment names (``0000000012`` or
        ``0000000012.json``, exactly as this layout writes them); None for anything else."""
        m = _ID_NAME.fullmatch(key.rsplit("/", 1)[-1])
        return int(m[1]) if m else None

    def epoch_and_attempt(self, key: str, prefix: str) -> tuple[int, str] | None:
        """(epoch, attempt id) of a key under ``<root>/<prefix>/<epoch>/<attempt>[/...]`` as this
        layout writes them (attempts/, aborted/, checks/); None for anything else."""
        base = f"{self.root}/{prefix}/"
        if not key.startswith(base):
            return None
        parts = key[len(base):].split("/")
        if len(parts) < 2 or not _EPOCH.fullmatch(parts[0]) or not ATTEMPT_ID_PATTERN.fullmatch(parts[1]) \
                or ".." in parts[1]:
            return None
        return int(parts[0]), parts[1]


_ID_NAME = re.compile(r"([0-9]{10})(?:\.json)?")
_EPOCH = re.compile(r"[0-9]{10}")
_reported: set[tuple[str, str]] = set()


def report_foreign(store, key: str, why: str) -> None:
    """Say once per process that ``key`` is not an object this store wrote and is ignored: a
    listing never parses such a key as one of its own, and never fails because of it."""
    where = store.location(key) if hasattr(store, "location") else key
    if (where, why) not in _reported:
        _reported.add((where, why))
        log.warning("ignoring %s: not an object the checkpoint store wrote (%s)", where, why)


__all__ = ["ATTEMPT_ID_PATTERN", "JOB_ID_PATTERN", "JOB_ID_REGEX", "JobLayout", "check_attempt_id", "check_job_id",
           "report_foreign"]
