"""The operator lifecycle (FLIP-147's table, translated), stop requests and savepoints."""

from __future__ import annotations

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import JobHeadState
from include.checkpoints.lifecycle import (
    Lifecycle,
    LifecycleError,
    StopMode,
    operator_names,
    transition,
)
from include.checkpoints.lifecycle import OperatorState as S
from include.checkpoints.manifest import Manifest
from include.errors import ConfigError
from include.store import LocalStore

META = {"name": "kmeans", "heads": {"centroids": ["cluster_id"]}, "outputs": ["centroids", "assignments"],
        "epoch_outputs": ["centroid_history"]}


def test_operators_of_a_job():
    assert operator_names(META) == ["source", "head:centroids", "sink:centroids", "sink:assignments",
                                    "sink:centroid_history"]


@pytest.mark.parametrize("path", [
    [S.RUNNING, S.END_OF_INPUT, S.FINISHED, S.FULLY_FINISHED, S.PUBLISHED, S.CLOSED],
    [S.RUNNING, S.END_OF_INPUT, S.FINISHED, S.FULLY_FINISHED, S.CLOSED],
])
def test_every_step_of_the_lifecycle_in_order(path):
    state = path[0]
    for step in path[1:]:
        state = transition("sink:out", state, step)
    assert state is path[-1]


@pytest.mark.parametrize("current, to", [
    (S.RUNNING, S.FINISHED),  # finish without end of input
    (S.END_OF_INPUT, S.FULLY_FINISHED),  # fully finished without flushing
    (S.FINISHED, S.PUBLISHED),  # published before a checkpoint covers it
    (S.PUBLISHED, S.RUNNING),  # nothing goes back
    (S.CLOSED, S.RUNNING),
])
def test_skipping_or_going_back_is_refused_with_the_states_named(current, to):
    with pytest.raises(LifecycleError, match=f"'sink:out' cannot go from {current.value} to {to.value}"):
        transition("sink:out", current, to)


@pytest.mark.parametrize("state", list(S))
def test_close_is_allowed_from_every_state(state):
    """Failure or cancel: close alone, from wherever the operator is."""
    assert transition("head:h", state, S.CLOSED) is S.CLOSED


def test_only_sinks_are_published():
    with pytest.raises(LifecycleError, match="'head:centroids' is not a sink"):
        transition("head:centroids", S.FULLY_FINISHED, S.PUBLISHED)


def test_checkpoint_lifecycles():
    running = Lifecycle.at_epoch(META, terminating=False)
    assert set(running.states.values()) == {S.RUNNING}
    ending = Lifecycle.at_epoch(META, terminating=True)
    assert ending.states["source"] is S.END_OF_INPUT and ending.states["head:centroids"] is S.END_OF_INPUT
    assert ending.states["sink:assignments"] is S.RUNNING
    final = Lifecycle.at_final(META, StopMode.DRAIN)
    assert final.all_fully_finished and final.stop is StopMode.DRAIN
    assert Lifecycle.from_dict(final.to_dict()) == final
    published = final.advance(["sink:centroids"], S.PUBLISHED)
    assert published.states["sink:centroids"] is S.PUBLISHED and published.fully_finished("sink:centroids")
    with pytest.raises(LifecycleError, match="no operator 'sink:nope'"):
        final.advance(["sink:nope"], S.PUBLISHED)


def test_lifecycle_is_recorded_in_the_manifest():
    m = Manifest(job_id="j", checkpoint_id=0, kind="epoch", epoch=0, parent_id=None, attempt_id="a0-x",
                 batch_id=None, num_partitions=1, body={"name": "kmeans"},
                 head_state=JobHeadState.initial(["centroids"], 1), decision=None, variables={},
                 lifecycle=Lifecycle.at_epoch(META, terminating=True))
    back = Manifest.from_bytes(m.to_bytes(), "test")
    assert back.lifecycle == m.lifecycle


def test_stop_mode_is_validated():
    assert StopMode.parse(" Drain ") is StopMode.DRAIN
    with pytest.raises(ConfigError, match="stop mode 'halt' is not one of: drain, suspend"):
        StopMode.parse("halt")


def test_stop_request_and_savepoints(tmp_path):
    log = CheckpointLog(LocalStore(str(tmp_path)), "j")
    assert log.control.stop_request() is None
    log.control.request_stop("suspend", requested_by="alice")
    assert log.control.stop_request() is StopMode.SUSPEND
    log.control.request_stop(StopMode.DRAIN)  # a later request replaces a pending one
    assert log.control.stop_request() is StopMode.DRAIN
    log.control.clear_stop_request()
    log.control.clear_stop_request()  # idempotent
    assert log.control.stop_request() is None
    with pytest.raises(ConfigError):
        log.control.request_stop("pause")
    log.control.record_savepoint(4, "test")
    assert log.control.savepoints() == [4]
