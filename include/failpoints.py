"""Named failure points for tests. Off, and one dict lookup, unless ITERATIONS_FAILPOINTS is set.

Syntax: ``name[@key=value...]=action`` separated by ``;``, for example::

    ITERATIONS_FAILPOINTS="tail.partition_written@epoch=3@partition=1=kill-driver"

Actions: ``kill`` (SIGKILL this process), ``kill-driver`` (SIGKILL the driver, whose pid the
Spark session helper puts in ITERATIONS_DRIVER_PID before the JVM starts: its whole process
group when it leads one, as when a machine dies, else the driver and this process),
``raise`` (raise FailpointError).
"""

from __future__ import annotations

import os
import signal

ENV = "ITERATIONS_FAILPOINTS"
DRIVER_PID_ENV = "ITERATIONS_DRIVER_PID"


class FailpointError(RuntimeError):
    pass


def _parse(text: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    points: dict[str, list[tuple[dict[str, str], str]]] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        spec, _, action = item.rpartition("=")
        name, *conds = spec.split("@")
        where = dict(c.split("=", 1) for c in conds)
        if action not in ("kill", "kill-driver", "raise"):
            raise ValueError(f"failpoint {item!r}: action must be kill, kill-driver or raise")
        points.setdefault(name, []).append((where, action))
    return points


_ACTIVE = _parse(os.environ.get(ENV, ""))


def configure(text: str) -> None:
    """Replace the active failpoints (tests in one process; others use the environment)."""
    global _ACTIVE
    _ACTIVE = _parse(text)


def failpoint(name: str, **context: object) -> None:
    """Trigger the failure configured for ``name`` if its conditions match ``context``."""
    if not _ACTIVE:
        return
    for where, action in _ACTIVE.get(name, ()):
        if all(str(context.get(k)) == v for k, v in where.items()):
            if action == "raise":
                raise FailpointError(f"failpoint {name} {context}")
            if action == "kill-driver" and DRIVER_PID_ENV in os.environ:
                driver = int(os.environ[DRIVER_PID_ENV])
                if os.getpgid(driver) == driver:
                    os.killpg(driver, signal.SIGKILL)
                os.kill(driver, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
