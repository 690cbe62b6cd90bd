"""Leaving a process's heap to the operating system at exit (include.process.interpreter_exit)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

# An object in a reference cycle, alive until exit, whose finaliser leaves a mark: Python's exit
# collection finalises it; after skip_exit_collection it is left to the operating system, as
# under os._exit. An atexit handler registered earlier still runs.
SCRIPT = textwrap.dedent("""
    import atexit, os, sys
    mark = sys.argv[1]
    atexit.register(lambda: open(mark + ".atexit", "w").close())
    from include.process.interpreter_exit import skip_exit_collection

    class Cyclic:
        def __init__(self):
            self.me = self
        def __del__(self, _open=os.open, _close=os.close, _path=mark + ".finalised",
                    _flags=os.O_CREAT | os.O_WRONLY):  # bound now: module globals are gone at exit
            _close(_open(_path, _flags))

    kept = Cyclic()
    print("REGISTERED", skip_exit_collection(), skip_exit_collection())
""")


@pytest.mark.parametrize("collect_at_exit", [None, "1"])
def test_the_heap_is_not_collected_at_exit_unless_asked(tmp_path, collect_at_exit):
    env = {k: v for k, v in os.environ.items() if k != "ITERATIONS_COLLECT_AT_EXIT"}
    if collect_at_exit:
        env["ITERATIONS_COLLECT_AT_EXIT"] = collect_at_exit
    mark = str(tmp_path / "mark")
    done = subprocess.run([sys.executable, "-c", SCRIPT, mark], cwd=ROOT, env={**env, "PYTHONPATH": ROOT},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    registered = collect_at_exit is None
    assert f"REGISTERED {registered} {registered}" in done.stdout
    assert os.path.exists(mark + ".atexit")  # atexit handlers run either way
    assert os.path.exists(mark + ".finalised") is not registered
