"""Processes of the stack: each service starts in a session of its own (``setsid``), so that
stopping it reaches every process it made (Spark's executor JVMs and Python daemons, Celery's
pool, Airflow's task supervisors and task processes, PostgreSQL's backends) without knowing
them, even from another process than the one that started it (``./run.sh stack stop``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

# (the stack's services import them from here)
from spark_jobs.connect_server import free_port, listening  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn(argv: list[str], env: dict[str, str], log_path: str, cwd: str = ROOT,
          user: str | None = None) -> subprocess.Popen:
    """``argv`` in a new session (its pid is the session's id), output appended to ``log_path``;
    run as ``user`` when given (PostgreSQL refuses to run as root)."""
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, user=user, group=user,
                                extra_groups=[] if user else None)
    finally:
        log.close()


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not ours: its parent reaps it


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (zombies left out; this process's are reaped)."""
    _reap(sid)
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and fields[3] == str(sid) and fields[0] != "Z":
                members.append(int(entry))
    return members


def boot_id() -> str:
    """This boot of the machine (a reboot gives every pid out again)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def started_at(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot; None when there is no such process."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


@dataclass(frozen=True)
class Session:
    """A service's session as recorded in ``stack.json``: its id (the leader's pid), when the
    leader started, and in which boot. The kernel gives a pid out again once every process of
    the session is gone (or after a reboot), and the new process may lead a session of its own:
    a record whose leader is alive with another start time, or that comes from another boot,
    names somebody else's processes, and nothing is signalled through it."""

    sid: int
    start: int | None  # None: recorded without it (an older stack.json): never trusted
    boot: str | None

    @classmethod
    def of(cls, pid: int) -> "Session":
        """The session process ``pid`` (just started with ``spawn``) leads."""
        return cls(pid, started_at(pid), boot_id())

    @classmethod
    def from_json(cls, value: Any) -> "Session":
        if isinstance(value, dict):
            return cls(int(value["sid"]), value.get("start"), value.get("boot"))
        return cls(int(value), None, None)

    def to_json(self) -> dict[str, Any]:
        return {"sid": self.sid, "start": self.start, "boot": self.boot}

    def ours(self) -> bool:
        """Whether the processes of session ``sid`` are still the ones recorded. While any of
        them lives the id is not given out again, so a leader that is gone does not make them
        somebody else's."""
        if self.start is None or self.boot != boot_id():
            return False
        now = started_at(self.sid)
        return now is None or now == self.start

    def members(self) -> list[int]:
        """The live processes of the recorded session; none when the id is somebody else's now."""
        return session_members(self.sid) if self.ours() else []

    def stop(self, grace: float = 30, sig: int = signal.SIGTERM, leader_only: bool = False) -> list[int]:
        """:func:`stop_session` of the recorded session, when it is still ours; else nothing."""
        return stop_session(self.sid, grace, sig, leader_only) if self.ours() else []


def stop_session(sid: int, grace: float = 30, sig: int = signal.SIGTERM, leader_only: bool = False) -> list[int]:
    """Send ``sig`` to every process of session ``sid`` (to its leader alone with
    ``leader_only``: a server that stops its own children, as PostgreSQL does on SIGINT), then
    SIGKILL what is left after ``grace`` seconds; the pids that had to be killed."""
    for pid in [sid] if leader_only else session_members(sid):
        _signal(pid, sig)
    if _wait_gone(sid, grace):
        return []
    killed = session_members(sid)
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    if not _wait_gone(sid, 15):
        raise RuntimeError(f"processes {session_members(sid)} of session {sid} survived SIGKILL")
    return killed


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(sid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while session_members(sid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def wait_until(what: str, ready: Callable[[], bool], timeout: float, log: str | None = None,
               proc: subprocess.Popen | None = None) -> None:
    """Poll ``ready`` until true; TimeoutError naming ``what`` (with the tail of ``log``), or
    RuntimeError at once when ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with status {proc.returncode}\n{tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready within {timeout:.0f} s\n{tail(log)}")
        time.sleep(0.5)


def tail(path: str | None, n: int = 3000) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()[-n:]
