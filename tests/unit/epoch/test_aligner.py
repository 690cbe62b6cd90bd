"""Head state and the aligner (flink-ml's HeadOperatorState and SharedProgressAligner)."""

from __future__ import annotations

import math

import pytest

from include.checkpoints.head_state import (
    AlignmentDecision,
    EpochReport,
    HeadStatus,
    JobHeadState,
    PartitionState,
    UnexpectedEpoch,
)
from include.epoch.aligner import Aligner, TerminationCriteria
from include.errors import AlignmentIncomplete, CheckpointError, ConfigError


def reports(epoch, counts, metric=None, head="ranks", attempt="a"):
    return [
        EpochReport(head, p, epoch, attempt, n, {} if metric is None else {"delta": metric[p]})
        for p, n in enumerate(counts)
    ]


def aligner(max_epochs=10, tolerance=None, agg="sum"):
    return Aligner({"ranks": 3}, TerminationCriteria(max_epochs, tolerance, "delta" if tolerance is not None else None),
                   {"delta": agg})


def test_incomplete_alignment_names_missing_partitions():
    with pytest.raises(AlignmentIncomplete, match="no report yet from ranks/1, ranks/2"):
        aligner().align(0, "a", reports(0, [5]))


def test_reports_of_another_attempt_are_refused():
    with pytest.raises(CheckpointError, match="belongs to epoch 0 attempt other"):
        aligner().align(0, "a", reports(0, [1, 1, 1], attempt="other"))


def test_running_decision_sums_feedback_and_metrics():
    d = aligner(tolerance=0.01).align(2, "a", reports(2, [1, 2, 3], metric=[0.1, 0.2, 0.3]))
    assert d == AlignmentDecision(2, "a", False, None, 6, {"delta": pytest.approx(0.6)})


def test_terminates_when_no_feedback():
    d = aligner().align(0, "a", reports(0, [0, 0, 0]))
    assert d.terminated and d.reason == "no feedback records"


def test_terminates_when_converged():
    d = aligner(tolerance=1e-3).align(4, "a", reports(4, [1, 1, 1], metric=[1e-4, 2e-4, 3e-4]))
    assert d.terminated and d.reason.startswith("converged: delta=6.000e-04")


def test_terminates_at_max_epochs():
    d = aligner(max_epochs=5).align(4, "a", reports(4, [1, 1, 1]))
    assert d.terminated and d.reason == "max epochs reached (5)"
    assert not aligner(max_epochs=5).align(3, "a", reports(3, [1, 1, 1])).terminated


def test_max_metric_and_nan_propagation():
    a = aligner(tolerance=0.5, agg="max")
    assert a.align(0, "a", reports(0, [1, 1, 1], metric=[0.1, 0.7, 0.2])).metrics == {"delta": 0.7}
    d = a.align(0, "a", reports(0, [1, 1, 1], metric=[0.1, math.nan, 0.2]))
    assert math.isnan(d.metrics["delta"]) and not d.terminated


def test_bad_criteria_are_refused():
    with pytest.raises(ConfigError, match="max_epochs must be an integer >= 1 or None, got 0"):
        TerminationCriteria(0)
    with pytest.raises(ConfigError, match="max_epochs must be an integer >= 1 or None, got True"):
        TerminationCriteria(True)
    assert TerminationCriteria(None).max_epochs is None, "no limit: an unbounded job"
    with pytest.raises(ConfigError, match="tolerance must be a finite number >= 0, got -1"):
        TerminationCriteria(3, -1)
    with pytest.raises(ConfigError, match="convergence metric 'nope' is not reported"):
        Aligner({"h": 1}, TerminationCriteria(3, 0.1, "nope"), {})
    with pytest.raises(ConfigError, match="aggregation 'avg'"):
        Aligner({"h": 1}, TerminationCriteria(3), {"m": "avg"})


def test_head_state_after_an_epoch():
    state = JobHeadState.initial(["ranks"], 3)
    assert state.latest_globally_aligned == -1 and state.feedback_counts() == {}
    rs = reports(0, [4, 0, 2])
    state = state.after(aligner().align(0, "a", rs), rs)
    rs = reports(1, [1, 1, 1])
    state = state.after(aligner().align(1, "a", rs), rs)
    head = state.heads["ranks"]
    assert state.feedback_counts() == {0: 6, 1: 3}
    assert head.latest_aligned == 1 and state.latest_globally_aligned == 1
    assert [p.in_flight for p in head.partitions] == [1, 1, 1]
    assert state.status is HeadStatus.RUNNING
    assert JobHeadState.from_dict(state.to_dict()) == state


def test_an_unexpected_global_alignment_is_refused_naming_both_epochs():
    """flink-ml's head refuses a globally aligned event it does not expect ("Receive unexpected
    global aligned event, latest = %d, this one = %d"): here the head state refuses a decision on
    an epoch it is already globally aligned on (a stale one would move it back) and a report of
    another epoch than the decision's, naming the epoch expected and the one received."""
    state = JobHeadState.initial(["ranks"], 3)
    for epoch in (0, 1):
        rs = reports(epoch, [2, 2, 2])
        state = state.after(aligner().align(epoch, "a", rs), rs)
    for stale in (1, 0):
        rs = reports(stale, [5, 5, 5])
        with pytest.raises(UnexpectedEpoch, match=f"globally aligned up to epoch 1, so the next decision is on "
                                                  f"epoch 2 or later; received a decision on epoch {stale}"):
            state.after(aligner().align(stale, "a", rs), rs)
    assert state.feedback_counts() == {0: 6, 1: 6} and state.latest_globally_aligned == 1, "unchanged"
    with pytest.raises(UnexpectedEpoch, match="the decision is on epoch 2, the report of ranks/0 is of epoch 3"):
        state.after(aligner().align(2, "a", reports(2, [1, 1, 1])), reports(3, [1, 1, 1]))
    rs = reports(2, [1, 1, 1])
    assert state.after(aligner().align(2, "a", rs), rs).latest_globally_aligned == 2, "the expected one is taken"


def test_an_epoch_report_of_another_epoch_is_an_unexpected_epoch():
    """flink-ml's "Unexpected epoch watermark: latest = %d, this one = %d", at the aligner."""
    with pytest.raises(UnexpectedEpoch, match="ranks/0 belongs to epoch 1 attempt a, not to epoch 2 attempt a"):
        aligner().align(2, "a", reports(1, [1, 1, 1]))


def test_termination_moves_status_to_terminating():
    rs = reports(0, [0, 0, 0])
    state = JobHeadState.initial(["ranks"], 3).after(aligner().align(0, "a", rs), rs)
    assert state.status is HeadStatus.TERMINATING


@pytest.mark.parametrize("new_p, expected", [(2, [4 + 6, 5 + 7]), (8, [4, 5, 6, 7, 0, 0, 0, 0]), (1, [22])])
def test_redistribution_keeps_counts_exact(new_p, expected):
    parts = tuple(PartitionState(3, 3, n) for n in (4, 5, 6, 7))
    from include.checkpoints.head_state import HeadState

    state = JobHeadState(HeadStatus.RUNNING, {"ranks": HeadState({2: 20, 3: 22}, parts)})
    moved = state.redistribute(new_p)
    head = moved.heads["ranks"]
    assert [p.in_flight for p in head.partitions] == expected
    assert head.feedback_counts == {2: 20, 3: 22}
    assert all(p.latest_aligned == 3 and p.latest_globally_aligned == 3 for p in head.partitions)
    assert state.redistribute(4) == state


def test_heads_with_their_own_partition_counts():
    """testNotChainingHeadOperator: a head keeps its own number of partitions through the state,
    its redistribution when the job's count changes, and the alignment's expected reports."""
    state = JobHeadState.initial(["counts", "total"], {"counts": 3, "total": 1})
    assert {h: len(s.partitions) for h, s in state.heads.items()} == {"counts": 3, "total": 1}
    moved = state.redistribute({"counts": 2, "total": 1})
    assert {h: len(s.partitions) for h, s in moved.heads.items()} == {"counts": 2, "total": 1}
    assert moved.heads["total"] is state.heads["total"], "a head whose count is the same is left as it is"
    with pytest.raises(ConfigError, match="num_partitions of head 'total' must be an integer >= 1, got None"):
        state.redistribute({"counts": 2})
    aligner = Aligner({"counts": 3, "total": 1}, TerminationCriteria(5), {})
    assert aligner.missing([]) == [("counts", 0), ("counts", 1), ("counts", 2), ("total", 0)]


def test_a_body_declares_its_heads_own_partition_counts_or_is_refused():
    from include.contract.body import IterationBody

    class Bad(IterationBody):
        name = "bad"
        heads = {"a": ("k",)}
        head_partitions = {"b": 1}

        def load(self, raw, params): ...
        def init(self, data, ctx): ...
        def step(self, variables, data, ctx): ...
        def finish(self, variables, data, ctx): ...

    with pytest.raises(ConfigError, match=r"head_partitions names 'b', which is not one of its heads \['a'\]"):
        Bad.describe()
    Bad.head_partitions = {"a": 0}
    with pytest.raises(ConfigError, match=r"head_partitions\['a'\] must be an integer in \[1, 100000\], got 0"):
        Bad.describe()
    Bad.head_partitions = {"a": 2}
    assert Bad.describe()["head_partitions"] == {"a": 2}
