"""The chaos run's schedule (tests.chaos.faults.plan): seeded, every kind before any kind twice,
durations in their ranges, unknown kinds refused by name."""

from __future__ import annotations

import pytest

from tests.chaos.faults import KINDS, Durations, plan


def test_a_schedule_takes_every_kind_before_any_again_and_is_seeded():
    faults = plan(7, 2 * len(KINDS) + 3)
    first, second = faults[:len(KINDS)], faults[len(KINDS):2 * len(KINDS)]
    assert sorted(f.kind for f in first) == sorted(KINDS) == sorted(f.kind for f in second)
    assert [f.kind for f in first] != [f.kind for f in second], "each round shuffled again"
    assert [f.to_json() for f in plan(7, len(faults))] == [f.to_json() for f in faults]
    assert [f.kind for f in plan(8, len(KINDS))] != [f.kind for f in first]
    ats = [f.at for f in faults]
    assert ats == sorted(ats) and len(set(ats)) == len(ats)


def test_durations_and_clock_steps_stay_in_their_ranges():
    d = Durations(restart_delay=(1, 2), s3_stopped=(30, 31), disk_full=(5, 6), clock_step=(7, 8), gap=(3, 4))
    faults = plan(3, 40, durations=d)
    spans = {"s3-stopped": d.s3_stopped, "disk-full": d.disk_full, "clock-step": d.clock_step}
    for f in faults:
        low, high = spans.get(f.kind, d.restart_delay)
        assert low <= f.hold <= high, f
        if f.kind == "clock-step":
            assert 60 <= abs(float(f.detail)) <= 3600, f
    gaps = [b.at - a.at for a, b in zip(faults, faults[1:])]
    assert all(2.9 <= g <= 4.1 for g in gaps), gaps


def test_unknown_kinds_are_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown fault kinds \['disk-ful'\]"):
        plan(1, 3, ("scheduler", "disk-ful"))
    with pytest.raises(ValueError, match="none given"):
        plan(1, 3, ())
