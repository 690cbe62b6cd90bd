"""The benchmark scripts measure what users run, and clean up after themselves.

- They import the tests' helpers (moto_server, free ports): doing so must not switch their JVMs
  to the tests' options (client compiler, serial collector), which ``tests/conftest.py`` set on
  import until 2026-11-29 and so slowed every benchmark's Spark since 2026-11-28."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

def test_importing_the_tests_helpers_leaves_the_jvm_options_alone():
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    env["PYTHONPATH"] = ROOT
    got = subprocess.run([sys.executable, "-c", "import os, bench.common, tests.conftest, bench.sweep; "
                          "print(repr(os.environ.get('JAVA_TOOL_OPTIONS')))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.strip().splitlines()[-1] == "None", got.stdout


def test_the_tests_jvms_still_get_the_tests_options():
    # tests/conftest.py's pytest_configure sets them (a user's own are kept)
    assert "JAVA_TOOL_OPTIONS" in os.environ
