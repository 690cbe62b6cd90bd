"""``python -m stack.supervise -- COMMAND...``: run COMMAND, and run it again whenever it exits,
until this process is told to stop: the compose file's ``restart: always`` for the native stack.

Airflow's components expect a supervisor. The scheduler, for one, exits when the metadata
database goes away at the wrong moment of its loop (seen here when PostgreSQL restarts), and a
deployment starts it again (Docker's restart policy, systemd, Kubernetes). The command runs in
this process's session, so stopping the service's session stops both; SIGTERM or SIGINT to this
process ends the loop (the command gets the signal with the rest of the session: ``./run.sh
stack stop`` signals every process of it). A command that exits within ``QUICK_EXIT`` seconds
of its start is started again after a growing delay (1, 2, 4... seconds); after ``GIVE_UP``
such exits in a row this process exits with the command's status, so a command that cannot
start fails the stack's start instead of spinning.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

QUICK_EXIT = 10.0
GIVE_UP = 4


def _say(text: str) -> None:
    print(f"[stack.supervise {time.strftime('%Y-%m-%dT%H:%M:%S')}] {text}", flush=True)


def supervise(argv: list[str], give_up: int = GIVE_UP) -> int:
    stopping: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.append(signum)  # the command got it too: the session is signalled as a whole

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    quick_exits, code = 0, 0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(argv)
        if stopping:  # told to stop while it was being started: it missed the signal
            child.terminate()
        code = child.wait()
        if stopping:
            return 0  # stopped as asked
        ran = time.monotonic() - started
        quick_exits = quick_exits + 1 if ran < QUICK_EXIT else 0
        if quick_exits >= give_up:
            _say(f"{argv[0]} exited with status {code} {quick_exits} times in a row within {QUICK_EXIT:.0f} s "
                 "of its start: giving up")
            break
        wait = 2.0 ** max(quick_exits - 1, 0)
        _say(f"{argv[0]} exited with status {code} after {ran:.0f} s; starting it again in {wait:.0f} s")
        deadline = time.monotonic() + wait
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
    return code


def main(argv: list[str]) -> int:
    give_up = GIVE_UP
    if argv[:1] == ["--give-up"] and len(argv) > 1 and argv[1].isdigit() and int(argv[1]) > 0:
        give_up, argv = int(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m stack.supervise [--give-up N] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return supervise(argv, give_up)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
