"""The ``hold`` failure point: the first process to reach it stops until released; later ones pass."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from include.process import failpoints
from tests.conftest import ROOT

SPEC = "tail.partition_written@job=j@partition=1"
SCRIPT = ("from include.process.failpoints import failpoint; import time; t = time.monotonic(); "
          "failpoint('tail.partition_written', job='j', epoch=3, partition=1); "
          "print(round(time.monotonic() - t, 2))")


def run(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, failpoints.ENV: f"{SPEC}=hold", failpoints.DIR_ENV: str(tmp_path)}
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE, text=True)


def test_hold_stops_the_first_arrival_until_released_and_lets_later_ones_pass(tmp_path):
    first = run(tmp_path)
    held = tmp_path / f"{SPEC}.held"
    deadline = time.monotonic() + 30
    while not held.exists():
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    assert int(held.read_text()) == first.pid
    second = run(tmp_path)  # Spark's retry of the task, say
    assert second.wait(30) == 0 and float(second.stdout.read()) < 1.0
    time.sleep(0.5)
    assert first.poll() is None, "still held"
    (tmp_path / f"{SPEC}.release").touch()
    assert first.wait(30) == 0 and float(first.stdout.read()) >= 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{SPEC}.held", f"{SPEC}.release"], "no drafts left"


def test_hold_needs_its_directory_and_other_contexts_pass(monkeypatch):
    monkeypatch.delenv(failpoints.DIR_ENV, raising=False)
    failpoints.configure(f"{SPEC}=hold")
    try:
        failpoints.failpoint("tail.partition_written", job="other", partition=1)  # not this job: passes
        with pytest.raises(failpoints.FailpointError, match=failpoints.DIR_ENV):
            failpoints.failpoint("tail.partition_written", job="j", partition=1)
    finally:
        failpoints.configure("")


def test_unknown_actions_are_refused_naming_them():
    with pytest.raises(ValueError, match="'x@a=1=pause'.*hold"):
        failpoints.configure("x@a=1=pause")


def test_a_point_the_code_does_not_place_is_refused_naming_it_and_the_points():
    """A misspelled point would never fire, and a test waiting for it would wait for nothing."""
    with pytest.raises(ValueError, match=r"'commit\.after_wrote@epoch=1=raise': no failure point 'commit\.after_wrote'"
                                         r"; the points are align\.before_decide, "):
        failpoints.configure("commit.after_wrote@epoch=1=raise")
    failpoints.configure("commit.after_write@epoch=1=raise")
    try:  # armed, a call site naming an undeclared point is refused as well
        with pytest.raises(ValueError, match="'commit.after_wrote' is not declared"):
            failpoints.failpoint("commit.after_wrote", epoch=1)
        with pytest.raises(failpoints.FailpointError):
            failpoints.failpoint("commit.after_write", epoch=1)
    finally:
        failpoints.configure("")
    failpoints.failpoint("commit.after_wrote", epoch=1)  # nothing armed: nothing checked, nothing done
