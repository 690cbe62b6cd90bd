"""Scheduled jobs: one batch per logical date, each warm-started from the previous one.

A daily PageRank, say: the batch of date D runs the iteration to termination on D's input,
starting from the final ranks of the batch before it. Batch D of job J is a checkpoint log of
its own, a **generation**: ``J.D`` the first time, ``J.D.r1``, ``J.D.r2``... when it is
recomputed. Each generation records, once, the checkpoint its epoch 0 starts from (the final
checkpoint of the latest earlier date's current generation, or none for the first date).

Records, under the checkpoint root::

    schedules/J/dates/<D>.json         {"current": generation published for D, "pending": one in progress}
    schedules/J/generations/<G>.json   {"date", "started_from": {"job_id", "checkpoint_id"} | null, "recompute",
                                        "rewound_from": a rewind's {"job_id", "epoch"} (include.runs.generations)}
    schedules/J/runs/<run>.json        the generation a DAG run works on, fixed by its first task

So a DAG run always finds the same generation (a cleared task, a retry, a continuation run);
re-running a date without ``recompute`` continues its pending generation or, when it is done,
changes nothing; ``recompute`` starts a new generation from the same starting checkpoint, whose
publication then replaces the outputs in one step (``include.publication.outputs``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import HeadStatus
from include.checkpoints.layout import check_job_id, report_foreign
from include.checkpoints.manifest import Manifest
from include.checkpoints.record_schemas import SCHEDULED_DATE, SCHEDULED_GENERATION, RecordKind
from include.errors import CheckpointError, ConfigError, ObjectNotFound
from include.publication.arrivals import MAX_ARRIVALS
from include.runs.generations import Lineage
from include.runs.ownership import JobOwner
from include.store import ObjectStore
from include.store.borders import check_store_borders

log = logging.getLogger("iterations")

DATE_FORMAT = "%Y%m%dT%H%M%SZ"


def batch_date(when: dt.datetime | str) -> str:
    """The key of a logical date (UTC): ``20260101T000000Z``."""
    if isinstance(when, str):
        try:
            when = dt.datetime.fromisoformat(when)
        except ValueError:
            try:
                return dt.datetime.strptime(when, DATE_FORMAT).strftime(DATE_FORMAT)
            except ValueError:
                raise ConfigError(f"batch date {when!r} is neither ISO 8601 nor {DATE_FORMAT}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).strftime(DATE_FORMAT)


@dataclass(frozen=True)
class Generation:
    job_id: str  # the checkpoint log of this generation
    date: str
    started_from: dict[str, Any] | None
    recompute: bool
    rewound_from: dict[str, Any] | None = None  # a rewind's: {"job_id", "epoch"} (include.runs.generations)


class Schedule:
    def __init__(self, store: ObjectStore, job_id: str):
        self.store = store
        self.job_id = check_job_id(job_id)
        self.root = f"schedules/{job_id}"

    # --- records ----------------------------------------------------------------------------

    def _read(self, key: str, kind: RecordKind) -> dict[str, Any] | None:
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            return None
        return kind.load(data, self.store.location(key))

    def date_record(self, date: str) -> dict[str, Any]:
        return self._read(f"{self.root}/dates/{date}.json", SCHEDULED_DATE) or \
            {"date": date, "current": None, "pending": None}

    def _write_date(self, record: dict[str, Any]) -> None:
        self.store.put(f"{self.root}/dates/{record['date']}.json", json.dumps(record, indent=1).encode())

    def generation(self, log_id: str) -> Generation:
        d = self._read(f"{self.root}/generations/{log_id}.json", SCHEDULED_GENERATION)
        if d is None:
            raise CheckpointError(f"generation {log_id} of scheduled job {self.job_id} is not recorded")
        return Generation(log_id, d["date"], d["started_from"], bool(d["recompute"]), d.get("rewound_from"))

    def lineage(self, date: str) -> Lineage:
        """The generations of the batch of ``date`` (include.runs.generations), recorded here."""
        return Lineage(self.store, self.root, f"{self.job_id}.{date}")

    def generations_of(self, date: str) -> list[str]:
        """The generations of ``date``, oldest first (``J.D``, ``J.D.r1``, ...)."""
        return self.lineage(date).generations()

    def superseded_by(self, gen: Generation) -> str | None:
        """The newer generation of ``gen``'s date (a recompute started after it), if any: only the
        newest generation of a date may publish or become current."""
        return self.lineage(gen.date).superseded_by(gen.job_id)

    def check_may_publish(self, gen: Generation) -> None:
        """CheckpointError if a newer generation of the date exists: an older generation's run
        (cleared and finished after a recompute) never publishes over the newer one."""
        newer = self.superseded_by(gen)
        if newer is not None:
            raise CheckpointError(
                f"generation {gen.job_id} of batch {gen.date} of {self.job_id} was superseded by {newer} (a recompute): "
                "its outputs are not published and it does not become the date's current generation")

    def dates(self) -> list[str]:
        prefix = f"{self.root}/dates/"
        out = []
        for o in self.store.list(prefix):
            name = o.key[len(prefix):]
            if not re.fullmatch(r"[0-9]{8}T[0-9]{6}Z\.json", name):
                report_foreign(self.store, o.key, "a scheduled date's record is dates/<YYYYMMDDTHHMMSSZ>.json")
                continue
            out.append(name[:-len(".json")])
        return sorted(out)

    # --- the batch of a DAG run ---------------------------------------------------------------

    def attach(self, date: str, run: str, *, recompute: bool = False, rewind_to: int | None = None,
               owner: JobOwner | None = None, hold: Callable[[], Any] | None = None,
               arrived: Sequence[Mapping[str, Any]] = ()) -> Generation:
        """The generation DAG run ``run`` (the batch of ``date``) works on; the first call of a
        run decides it, every later call (any task, any retry) gets the same one. ``rewind_to``:
        a new generation that recomputes the date's batch from that epoch (include.runs.generations;
        ``owner``: the run's, which must own the batch it rewinds). ``hold``: called before the
        first call writes anything: it takes the date's lease (``lineage(date).base``), so that
        a recompute or a rewind waits for, or is refused by, a run that holds the batch.
        ``arrived``: what the asset events that started the run say arrived
        (include.publication.arrivals.arrival), recorded in a new generation's record."""
        arrived = [dict(a) for a in arrived][-MAX_ARRIVALS:]
        lineage = self.lineage(date)
        known = lineage.run_generation(run)
        if known is not None:
            return self.generation(known)
        if hold is not None:
            check_store_borders(self.store)  # the first write of a run (its lease) stays inside its own store
            hold()
        record = self.date_record(date)
        base = record["pending"] or record["current"]
        if rewind_to is not None:
            if base is None or owner is None:
                raise ConfigError(f"rewind_to={rewind_to}: batch {date} of {self.job_id} has not run: nothing to rewind")
            started = self.generation(base).started_from
            gen = self.generation(lineage.rewind(base, rewind_to, owner,
                                                 {"date": date, "started_from": started, "recompute": True,
                                                  **({"arrived": arrived} if arrived else {})}))
        elif recompute and base is not None:
            gen = self._new_generation(date, self.generation(base).started_from, recompute=True, arrived=arrived)
            log.info("batch %s of %s: recomputing as %s from %s", date, self.job_id, gen.job_id, gen.started_from)
        elif base is not None:
            gen = self.generation(base)  # continue the pending one, or find the current one done
        else:
            gen = self._new_generation(date, self.start_of(date), recompute=False, arrived=arrived)
        fixed = lineage.fix_run(run, gen.job_id)
        if fixed != gen.job_id:
            return self.generation(fixed)  # another task of the run was first
        if gen.job_id != record["current"] and record["pending"] != gen.job_id:
            self._write_date({**record, "pending": gen.job_id})
        return gen

    def _new_generation(self, date: str, started_from: dict[str, Any] | None, *, recompute: bool,
                        arrived: Sequence[Mapping[str, Any]] = ()) -> Generation:
        log_id = self.lineage(date).new({"date": date, "started_from": started_from, "recompute": recompute,
                                         **({"arrived": list(arrived)} if arrived else {})})
        return Generation(log_id, date, started_from, recompute)

    def start_of(self, date: str) -> dict[str, Any] | None:
        """The checkpoint a new batch of ``date`` starts from: the final checkpoint of the latest
        earlier date. That batch must be finished: a batch never starts from a guess."""
        earlier = [d for d in self.dates() if d < date]
        if not earlier:
            return None
        previous = self.date_record(earlier[-1])
        if previous["current"] is None:
            raise CheckpointError(
                f"batch {date} of {self.job_id} warm-starts from batch {earlier[-1]}, which has not "
                f"finished (generation {previous['pending']} in progress): run that batch first"
            )
        final = CheckpointLog(self.store, previous["current"]).latest(verify="none")
        if final is None or final.kind != "final":
            raise CheckpointError(f"batch {earlier[-1]} of {self.job_id} is recorded done but its log "
                                  f"{previous['current']} has no final checkpoint")
        return {"job_id": final.job_id, "checkpoint_id": final.checkpoint_id}

    def warm_start_manifest(self, gen: Generation) -> Manifest | None:
        if gen.started_from is None:
            return None
        src = gen.started_from
        return CheckpointLog(self.store, src["job_id"]).load(int(src["checkpoint_id"]), verify="sizes")

    def complete(self, gen: Generation) -> None:
        """After the generation's outputs are published: it becomes the date's current one."""
        final = CheckpointLog(self.store, gen.job_id).latest(verify="none")
        if final is None or final.head_state.status is not HeadStatus.TERMINATED:
            raise CheckpointError(f"generation {gen.job_id} has not terminated: it cannot become current")
        self.check_may_publish(gen)
        record = self.date_record(gen.date)
        if record["current"] == gen.job_id and record["pending"] is None:
            return
        replaced = record["current"]
        self._write_date({**record, "current": gen.job_id,
                          "pending": None if record["pending"] == gen.job_id else record["pending"]})
        log.info("batch %s of %s: generation %s is current%s", gen.date, self.job_id, gen.job_id,
                 f" (replaces {replaced})" if replaced and replaced != gen.job_id else "")
