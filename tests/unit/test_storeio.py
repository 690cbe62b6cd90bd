"""Pure helpers of the Spark I/O module: no Spark session."""

from __future__ import annotations

import pytest

from include.checkpoints.head_state import EpochReport, FileRef
from include.errors import CheckpointError
from spark_jobs.storeio import broadcast_threshold, by_partition


class _Conf:
    def __init__(self, value):
        self.value = value

    def get(self, key, default=None):
        assert key == "spark.sql.autoBroadcastJoinThreshold"
        return self.value


class _Session:
    def __init__(self, value):
        self.conf = _Conf(value)


@pytest.mark.parametrize("text, expected", [
    ("10485760b", 10 << 20), ("10485760", 10 << 20), ("10m", 10 << 20), ("10MB", 10 << 20),
    (" 5 kb", 5 << 10), ("1g", 1 << 30), ("0", 0), ("-1", None), ("-1b", None), ("ten", None),
    ("10 parsecs", None),
])
def test_the_broadcast_threshold_is_read_in_spark_byte_syntax(text, expected):
    assert broadcast_threshold(_Session(text)) == expected


def report(partition, task):
    key = f"ranks/part-{partition:05d}-{task}.parquet"
    return EpochReport("ranks", partition, 4, "a4", 10, {}, (FileRef(key, 100, "0" * 64, 10),))


def test_reports_are_keyed_by_partition():
    reports = [report(2, 7), report(0, 5), report(1, 5)]
    assert {p: r.files[0].key for p, r in by_partition("ranks", reports).items()} == {
        0: "ranks/part-00000-5.parquet", 1: "ranks/part-00001-5.parquet", 2: "ranks/part-00002-7.parquet"}


def test_a_partition_reported_by_two_tasks_fails_the_attempt_instead_of_dropping_a_file():
    with pytest.raises(CheckpointError, match=r"partition\(s\) \[1\] were written by more than one Spark task"
                                              r".*part-00001-5.parquet.*part-00001-9.parquet"):
        by_partition("ranks", [report(0, 5), report(1, 5), report(1, 9)])
