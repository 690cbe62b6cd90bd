"""Every DAG's params, fuzzed from their JSON schema with hostile values mixed in (see
tests/faults/fuzz_params.py): refused, or harmless (paths under their roots, argv a list)."""

from __future__ import annotations

import pytest

from tests.faults.fuzz_params import fuzz_all


@pytest.fixture
def roots_env(monkeypatch):
    monkeypatch.setenv("ITERATIONS_ALLOWED_ROOTS", "")  # fuzz_all sets its own roots; restored after


def test_fuzzed_params_are_refused_or_harmless(roots_env):
    counts = fuzz_all(examples=120)
    assert counts["escaped"] == 0, counts
    assert counts["refused"] > 100 and counts["accepted"] > 50, counts


def test_the_fuzzing_finds_paths_that_escape_when_nothing_checks_them(roots_env, monkeypatch):
    from include.store import AllowedRoots

    monkeypatch.setattr(AllowedRoots, "allows", lambda self, location: True)
    assert fuzz_all(examples=120)["escaped"] > 0
