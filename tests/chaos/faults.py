"""The faults of a chaos run and their seeded schedule: each fault is injected into a running
native stack (stack.services.Stack) and cleared the way a deployment clears it (a supervisor
starting the killed service again after a delay, the S3 endpoint answering again, the disk's
space freed), then recorded with its times."""

from __future__ import annotations

import dataclasses
import errno
import os
import random
import signal
import subprocess
import time
from typing import Callable

from stack.services import Stack

#: services a fault SIGKILLs (every process of the service's session: its machine or container
#: dies), started again by the run after a delay, as a supervisor would
KILLED = {
    "scheduler": "airflow-scheduler", "dag-processor": "airflow-dag-processor", "triggerer": "airflow-triggerer",
    "api-server": "airflow-api-server", "celery-worker-1": "airflow-worker-1", "celery-worker-2": "airflow-worker-2",
    "spark-master": "spark-master", "spark-worker": "spark-worker-1", "spark-connect": "spark-connect",
    "postgres": "postgres", "redis": "redis",
}
#: every kind of fault, in the order a schedule's first round may shuffle
KINDS = (*KILLED, "task", "s3-stopped", "disk-full", "clock-step")
#: the worker whose runtime clock steps (``clock-step``), and by how much at most, in seconds
CLOCK_WORKER, CLOCK_STEP = "worker-2", 3600.0
TASK_TITLE = "airflow worker -- "  # what Airflow's task runner titles a task's process


@dataclasses.dataclass
class Fault:
    kind: str
    at: float  # seconds after the schedule's start
    hold: float  # seconds the fault lasts before it is cleared (a restart's delay, an outage)
    detail: str = ""
    started: float | None = None  # wall clock (time.time()) of the injection
    cleared: float | None = None  # wall clock once cleared (the service ready again)
    skipped: str = ""  # why it could not be injected (no task running...)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Durations:
    """How long each kind of fault lasts, as (lowest, highest) seconds drawn uniformly."""

    restart_delay: tuple[float, float] = (2.0, 10.0)
    s3_stopped: tuple[float, float] = (30.0, 120.0)
    disk_full: tuple[float, float] = (20.0, 60.0)
    clock_step: tuple[float, float] = (30.0, 90.0)
    gap: tuple[float, float] = (10.0, 40.0)  # between a fault's clearing and the next one


def plan(seed: int, count: int, kinds: tuple[str, ...] = KINDS, durations: Durations = Durations()) -> list[Fault]:
    """``count`` faults: the kinds in seeded random order, every kind once before any again,
    each at a random gap after the one before it clears (``at`` counts the gaps only)."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(f"unknown fault kinds {unknown or '(none given)'}: choose from {', '.join(KINDS)}")
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < count:
        cycle = list(kinds)
        rng.shuffle(cycle)
        order += cycle
    faults, at = [], 0.0
    for kind in order[:count]:
        at += rng.uniform(*durations.gap)
        span = {"s3-stopped": durations.s3_stopped, "disk-full": durations.disk_full,
                "clock-step": durations.clock_step}.get(kind, durations.restart_delay)
        fault = Fault(kind, round(at, 1), round(rng.uniform(*span), 1))
        if kind == "clock-step":
            fault.detail = f"{rng.choice((-1, 1)) * rng.uniform(60, CLOCK_STEP):+.0f}"
        faults.append(fault)
    return faults


class Injector:
    """Injects faults into ``stack``; ``small_fs``: the size-limited filesystem a job's store is
    on (``disk-full`` fills it); ``log``: where each step is told."""

    def __init__(self, stack: Stack, small_fs: str | None, log: Callable[[str], None]):
        self.stack, self.small_fs, self.log = stack, small_fs, log

    def available(self, kind: str) -> str:
        """Why ``kind`` cannot be injected into this stack ('' when it can)."""
        if kind == "disk-full" and not self.small_fs:
            return "no size-limited filesystem (mounting a tmpfs needs root)"
        return ""

    def inject(self, fault: Fault, stopping: Callable[[], bool] = lambda: False) -> None:
        why = self.available(fault.kind)
        if why:
            fault.skipped = why
            return
        fault.started = time.time()
        self.log(f"fault {fault.kind} (hold {fault.hold:.0f} s{', ' + fault.detail if fault.detail else ''})")
        if fault.kind in KILLED:
            self._kill(fault, KILLED[fault.kind])
        elif fault.kind == "task":
            self._kill_task(fault)
        elif fault.kind == "s3-stopped":
            self._stop_s3(fault)
        elif fault.kind == "disk-full":
            self._fill_disk(fault)
        elif fault.kind == "clock-step":
            self._step_clock(fault)
        if not fault.skipped:
            fault.cleared = time.time()
            self.log(f"cleared {fault.kind} after {fault.cleared - fault.started:.0f} s")

    def _kill(self, fault: Fault, service: str) -> None:
        victims = self.stack.kill(service)
        fault.detail = f"{len(victims)} process(es) of {service}"
        time.sleep(fault.hold)
        self.stack.restart(service)

    def _kill_task(self, fault: Fault) -> None:
        """SIGKILL one running task's process (its Celery worker's task supervisor sees it die)."""
        deadline = time.monotonic() + 120
        while not (tasks := _titled(TASK_TITLE)):
            if time.monotonic() > deadline:
                fault.skipped = "no task ran for 120 s"
                return
            time.sleep(0.5)
        pid, title = random.Random(fault.at).choice(sorted(tasks.items()))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        fault.detail = f"pid {pid}: {title[:120]}"
        time.sleep(fault.hold)  # nothing to start again: Airflow retries the task

    def _stop_s3(self, fault: Fault) -> None:
        """The S3 endpoint stops answering (SIGSTOP: connections hang, nothing is refused or
        lost), then goes on (SIGCONT)."""
        members = self.stack.sessions()["moto"].members()
        for pid in members:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(fault.hold)
        finally:
            for pid in members:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    def _fill_disk(self, fault: Fault) -> None:
        """Fill the small filesystem to its last byte, hold, then free the space."""
        filler = os.path.join(self.small_fs, ".chaos-filler")
        chunk = b"\0" * (1 << 20)
        written = 0
        with open(filler, "wb", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    for size in (1 << 16, 1 << 12, 1):  # the last blocks too
                        try:
                            while True:
                                written += f.write(b"\0" * size)
                        except OSError:
                            pass
                    break
        fault.detail = f"{written / 2**20:.1f} MiB written to fill {self.small_fs}"
        try:
            time.sleep(fault.hold)
        finally:
            os.unlink(filler)

    def _step_clock(self, fault: Fault) -> None:
        """Celery worker ``CLOCK_WORKER`` starts again with its runtime's clock stepped by
        ``fault.detail`` seconds (ITERATIONS_CLOCK_SKEW: every timestamp its tasks write), runs
        so for ``hold`` seconds, then starts again on the true clock. (The step is the runtime's:
        libfaketime, which steps a process's whole clock, makes Python 3.11's time.sleep fail
        with EINVAL.)"""
        from include.process import failpoints

        service = f"airflow-{CLOCK_WORKER}"
        self.stack.restart(service, env={failpoints.SKEW_ENV: fault.detail})
        time.sleep(fault.hold)
        self.stack.restart(service)


def _titled(fragment: str) -> dict[int, str]:
    """Pids whose command line (setproctitle'd) starts with ``fragment``, with it."""
    done = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True)
    found = {}
    for line in done.stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        if args.startswith(fragment):
            found[int(pid)] = args
    return found
