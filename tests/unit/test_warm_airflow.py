"""The warm Airflow server's exit of a forked command (tests/warm_airflow.py) keeps the
interpreter's rules: what it ignores at exit does not become the command's exit status."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

COMMAND = textwrap.dedent("""
    import atexit, threading
    from tests import warm_airflow

    def closed_pipe():
        raise OSError("handle is closed")

    threading._register_atexit(closed_pipe)
    atexit.register(lambda: print("atexit handlers ran", flush=True))
    warm_airflow._exit({code})
""")


def test_an_exception_in_threadings_exit_callbacks_is_reported_and_ignored():
    """As a plain interpreter reports it ("Exception ignored in: <module 'threading'>") and exits
    with the program's status: a command that succeeded does not fail at its exit (CI once saw
    a `dags test` exit 1 there after its run had succeeded)."""
    for code in (0, 3):
        done = subprocess.run([sys.executable, "-c", COMMAND.format(code=code)], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == code, done.stderr
        assert "Exception ignored in: <module 'threading'" in done.stderr and "OSError: handle is closed" in done.stderr
        assert done.stdout == "atexit handlers ran\n", "the atexit handlers still run after it"
    plain = subprocess.run([sys.executable, "-c", COMMAND.replace("warm_airflow._exit({code})", "")],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and "Exception ignored in: <module 'threading'" in plain.stderr, \
        "the interpreter's own behaviour, which the server mirrors"
