"""Which run of a job may write: the run that holds the job's lease (``JobLease``), renewed while it
works and fenced by a counter, and who holds it (``Holder``: a process, a DAG run).

**Lease.** One run of a job writes at a time. The lease is a sequence of records
``jobs/<job_id>/lease/<token>.json``, each created by a create-if-absent write, so exactly one
run gets each token; the record with the highest token is the current one and its token is the
**fencing token**: before it commits, a run checks that the current record is still its own. A
run that finds the lease held by another live run waits, then fails naming it. A holder is dead
(its lease stale) when it released the lease, when its process is gone (a process on this host),
when the caller's liveness check says so (the Airflow operators ask for the holding DAG run's
state), or when it has not renewed the lease for its time-to-live.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from include.checkpoints.layout import JobLayout
from include.errors import CheckpointCorrupted, ObjectNotFound
from include.runs.ownership import DAG_ID_PATTERN, JobBusy, LeaseLost, iso_time, wall_clock
from include.store import ObjectStore

log = logging.getLogger("iterations")


LEASE_FORMAT = "iterations.lease/1"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease. ``kind``: ``dag_run`` (every task of one DAG run: ``dag_id``,
    ``run_id``) or ``process`` (one runner in one process: ``host``, ``pid``, ``nonce``)."""

    kind: str
    dag_id: str | None = None
    run_id: str | None = None
    host: str | None = None
    pid: int | None = None
    nonce: str | None = None

    @classmethod
    def dag_run(cls, dag_id: str, run_id: str) -> "Holder":
        return cls("dag_run", dag_id=dag_id, run_id=str(run_id)[:RUN_ID_MAX])

    @classmethod
    def this_process(cls) -> "Holder":
        """A holder unique to one runner of this process (two runners in one process differ)."""
        return cls("process", host=socket.gethostname(), pid=os.getpid(), nonce=uuid.uuid4().hex[:12])

    def describe(self) -> str:
        if self.kind == "dag_run":
            return f"DAG run {self.run_id!r} of {self.dag_id}"
        return f"process {self.pid} on {self.host} (runner {self.nonce})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_dict(cls, d: Any) -> "Holder":
        if not isinstance(d, Mapping) or d.get("kind") not in ("dag_run", "process"):
            raise ValueError(f"not a lease holder: {d!r}"[:300])
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown holder fields {sorted(unknown)}")
        holder = cls(**d)
        if holder.kind == "dag_run" and not (isinstance(holder.dag_id, str) and DAG_ID_PATTERN.fullmatch(holder.dag_id)
                                             and isinstance(holder.run_id, str)):
            raise ValueError(f"bad DAG run holder {d!r}"[:300])
        if holder.kind == "process" and not (isinstance(holder.pid, int) and isinstance(holder.host, str)):
            raise ValueError(f"bad process holder {d!r}"[:300])
        return holder


@dataclass(frozen=True)
class LeaseRecord:
    token: int
    holder: Holder | None  # None: released
    acquired_at: float
    renewed_at: float
    ttl: float

    def to_bytes(self, job_id: str) -> bytes:
        return json.dumps({"format": LEASE_FORMAT, "job_id": job_id, "token": self.token,
                           "holder": self.holder.to_dict() if self.holder else None,
                           "acquired_at": self.acquired_at, "renewed_at": self.renewed_at, "ttl": self.ttl,
                           "renewed": iso_time(self.renewed_at)}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, job_id: str, token: int) -> "LeaseRecord":
        d = json.loads(data)
        if d.get("format") != LEASE_FORMAT or d.get("job_id") != job_id or d.get("token") != token:
            raise ValueError(f"format {d.get('format')!r}, job {d.get('job_id')!r}, token {d.get('token')!r}")
        numbers = [d["acquired_at"], d["renewed_at"], d["ttl"]]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
            raise ValueError(f"bad times {numbers}")
        return cls(token, Holder.from_dict(d["holder"]) if d["holder"] is not None else None,
                   float(d["acquired_at"]), float(d["renewed_at"]), float(d["ttl"]))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: Default time-to-live of a lease that nobody renews and whose holder's liveness cannot be
#: told otherwise (a process on another host).
LEASE_TTL_S = 600.0


@dataclass
class Lease:
    """This run's hold on a job (``JobLease.acquire``); ``check()`` before every commit."""

    job: "JobLease"
    holder: Holder
    token: int
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def check(self) -> None:
        """LeaseLost unless this run's token is still the current one."""
        current = self.job.current()
        if current is None or current.token != self.token or current.holder != self.holder:
            who = "nobody" if current is None or current.holder is None else current.holder.describe()
            raise LeaseLost(
                f"job {self.job.job_id}: {self.holder.describe()} no longer holds the job (its lease token "
                f"{self.token}; the current one is {current.token if current else None}, held by {who}): "
                "another run took it over, so this run stops without writing")

    def renew(self) -> None:
        self.job.renew(self)

    def release(self) -> None:
        self.stop_renewing()
        self.job.release(self)

    def renew_every(self, seconds: float) -> None:
        """Renew in a background thread every ``seconds`` until released (a long run in a
        process whose liveness other hosts cannot see)."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(seconds):
                try:
                    self.renew()
                except Exception as e:  # the next check() says what it means
                    log.warning("job %s: renewing the lease failed: %s", self.job.job_id, e)

        self._thread = threading.Thread(target=loop, name=f"lease-{self.job.job_id}", daemon=True)
        self._thread.start()

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class JobLease:
    """The lease records of one job (see the module docstring)."""

    def __init__(self, store: ObjectStore, job_id: str, *, ttl: float = LEASE_TTL_S):
        self.store = store
        self.job_id = job_id
        self.layout = JobLayout(job_id)
        self.ttl = float(ttl)

    def _key(self, token: int) -> str:
        return self.layout.lease(token)

    def current(self) -> LeaseRecord | None:
        """The record with the highest token (None: the job was never leased)."""
        prefix = self.layout.lease_prefix()
        tokens = []
        for o in self.store.list(prefix):
            name = o.key[len(prefix):]
            if re.fullmatch(r"\d{10}\.json", name):
                tokens.append(int(name[:10]))
        if not tokens:
            return None
        token = max(tokens)
        key = self._key(token)
        try:
            return LeaseRecord.from_bytes(self.store.get(key), self.job_id, token)
        except ObjectNotFound:
            return self.current()
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointCorrupted(f"the lease record {self.store.location(key)} of job {self.job_id} "
                                      f"is damaged: {e}") from None

    def stale(self, record: LeaseRecord, alive: Callable[[Holder], bool | None] | None = None) -> str | None:
        """Why ``record``'s holder no longer holds the job, or None if it may still."""
        if record.holder is None:
            return "released"
        h = record.holder
        verdict = alive(h) if alive is not None else None
        if verdict is False:
            return f"{h.describe()} has ended"
        if verdict is None and h.kind == "process" and h.host == socket.gethostname() and not _process_alive(h.pid):
            return f"{h.describe()} is gone"
        if verdict is None and wall_clock() > record.renewed_at + record.ttl:
            return f"{h.describe()} has not renewed it since {iso_time(record.renewed_at)} (time-to-live {record.ttl:.0f}s)"
        return None

    def acquire(self, holder: Holder, *, wait: float = 0.0, poll: float = 1.0,
                alive: Callable[[Holder], bool | None] | None = None) -> Lease:
        """Hold the job for ``holder``: renew the lease if it holds it already, take it if it is
        free or its holder is dead (``alive(holder)``: True/False when the caller can tell, None
        when it cannot), else wait up to ``wait`` seconds, then JobBusy naming the holder."""
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            current = self.current()
            if current is not None and current.holder == holder:
                lease = Lease(self, holder, current.token)
                self.renew(lease)
                return lease
            why = None if current is None else self.stale(current, alive)
            if current is None or why is not None:
                token = 0 if current is None else current.token + 1
                now = wall_clock()
                record = LeaseRecord(token, holder, now, now, self.ttl)
                if self.store.put_if_absent(self._key(token), record.to_bytes(self.job_id)):
                    if current is not None and current.holder is not None:
                        log.warning("job %s: lease taken by %s (token %d): %s", self.job_id, holder.describe(),
                                    token, why)
                    self._forget_before(token - 1)
                    return Lease(self, holder, token)
                continue  # another run took this token first: look again
            if time.monotonic() >= deadline:
                raise JobBusy(
                    f"job {self.job_id} is being run by {current.holder.describe()} (lease token {current.token}, "
                    f"renewed {iso_time(current.renewed_at)}): one run of a job at a time. Wait for it to end "
                    "(or stop it: the iterations_stop DAG), then run this again")
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))

    def _forget_before(self, token: int) -> None:
        """Delete the records of tokens below ``token`` (a run, or a DAG's task, takes a new
        token each time: a job that runs for ever keeps two records, not one per run). The
        highest token is never among them, so the current holder stays current; an acquirer
        that read the lease before these and takes one of the deleted tokens now still sees a
        higher token in force and is fenced at its first check."""
        prefix = self.layout.lease_prefix()
        old = [o.key for o in self.store.list(prefix)
               if re.fullmatch(r"\d{10}\.json", o.key[len(prefix):]) and int(o.key[len(prefix):][:10]) < token]
        if old:
            self.store.delete(old)

    def renew(self, lease: Lease) -> None:
        current = self.current()
        if current is None or current.token != lease.token or current.holder != lease.holder:
            lease.check()  # raises LeaseLost naming who holds it now
        now = wall_clock()
        self.store.put(self._key(lease.token),
                       LeaseRecord(lease.token, lease.holder, current.acquired_at, now, self.ttl).to_bytes(self.job_id))

    def release(self, lease: Lease) -> None:
        """Give the job up (nothing if the lease was taken over meanwhile)."""
        current = self.current()
        if current is None or current.token != lease.token or current.holder != lease.holder:
            return
        now = wall_clock()
        self.store.put(self._key(lease.token),
                       LeaseRecord(lease.token, None, current.acquired_at, now, self.ttl).to_bytes(self.job_id))


RUN_ID_MAX = 250


