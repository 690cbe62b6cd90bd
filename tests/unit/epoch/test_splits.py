"""Sources and the end of a job's input (FLIP-147's partially finished job): the rule over a
checkpoint's coordinator snapshots, and a split enumerator that has finished."""

from __future__ import annotations

from include.epoch.coordinators import CoordinatorHolder, end_of_input
from include.epoch.splits import FileSplitEnumerator


def snap(finished: bool, source: bool | None = True) -> dict:
    s = {"seq": 0, "state": {}, "input_finished": finished}
    if source is not None:
        s["feeds_input"] = source
    return s


def test_the_input_ends_when_every_source_has_finished():
    assert not end_of_input({}), "no source: the input never ends by itself"
    assert not end_of_input({"alignment": snap(False, False)})
    assert end_of_input({"alignment": snap(False, False), "splits": snap(True)})
    assert not end_of_input({"a": snap(True), "b": snap(False)}), "one finished source of two is not the end"
    assert end_of_input({"a": snap(True), "b": snap(True), "alignment": snap(False, False)})
    # a snapshot written before sources were marked: a finished one is a source
    assert end_of_input({"splits": snap(True, None), "alignment": snap(False, None)})


def test_a_finished_source_is_never_listed_again(tmp_path):
    for name in ("a0.csv", "_DONE"):
        (tmp_path / name).write_text("x\n1\n")
    enumerator = FileSplitEnumerator(str(tmp_path), suffixes=(".csv",), max_splits_per_epoch=1)
    holder = CoordinatorHolder("bounded", enumerator, num_partitions=2)
    holder.restore(None, next_epoch=0)
    inbox, snapshot = holder.trigger(0)
    assert [e.payload["split"] for e in inbox] == ["a0.csv"], "assigned as epoch 0 is planned"
    assert snapshot["input_finished"] and snapshot["feeds_input"], "its last split assigned: finished"
    holder.committed()
    (tmp_path / "late.csv").write_text("x\n2\n")  # after the end marker
    holder.trigger(1)
    holder.committed()
    inbox, snapshot = holder.trigger(2)
    assert inbox == [] and snapshot["state"]["known"] == ["a0.csv"], "the late file is never a split"

    restored = FileSplitEnumerator(str(tmp_path), suffixes=(".csv",), max_splits_per_epoch=1)
    again = CoordinatorHolder("bounded", restored, num_partitions=3)
    again.restore(snapshot, next_epoch=3, partitions=2)  # a rescale: the enumerator's state goes on
    assert again.trigger(3)[0] == [] and restored.input_finished()
