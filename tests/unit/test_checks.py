"""The data checks without Spark: settings and their errors, merging by name, the profile
(the tail's per-partition statistics combined into one row), and validation with Great
Expectations on that row (blocking, warnings, skipped, globs, parameters)."""

from __future__ import annotations

import json
import math
import sys

import pyarrow as pa
import pytest

from include.checks import (
    CheckSettings,
    ExpectationSpec,
    combine,
    load_checks_file,
    merge,
    profile_row,
    runtime_expectations,
    schema_string,
    validate,
)
from include.errors import ConfigError
from include.head import AlignmentDecision, EpochReport

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "node", "type": "long", "nullable": True, "metadata": {}},
    {"name": "rank", "type": "double", "nullable": True, "metadata": {}}]})


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("value, message", [
    ([], "must be an object"),
    ({"expectation": []}, r"unknown key\(s\) \['expectation'\]"),
    ({"enabled": "yes"}, "enabled must be true or false, got 'yes'"),
    ({"expectations": {"name": "x"}}, "expectations must be a list"),
    ({"expectations": [{"name": "a b"}]}, "name must be a name"),
    ({"expectations": [{"name": "x", "type": "column_max"}]}, "type must be a Great Expectations expectation type"),
    ({"expectations": [{"name": "x", "severity": "block"}]}, "severity must be one of critical, warning, info.*'block'"),
    ({"expectations": [{"name": "x", "kwargs": [1]}]}, "kwargs must be an object"),
    ({"expectations": [{"name": "x", "colour": "red"}]}, r"unknown key\(s\) \['colour'\]"),
    ("{not json", "must be a JSON object"),
])
def test_bad_settings_are_refused_naming_the_value(value, message):
    with pytest.raises(ConfigError, match=message):
        CheckSettings.parse(value)


def test_settings_layer_and_merge_by_name():
    base = [{"name": "mass", "type": "expect_column_values_to_be_between",
             "kwargs": {"column": "ranks.rank.sum", "min_value": 0.9}, "description": "d"},
            {"name": "other", "type": "expect_column_values_to_be_between", "kwargs": {"column": "x", "max_value": 0}}]
    dag = CheckSettings.parse({"expectations": [{"name": "mass", "severity": "warning"}]})
    run = CheckSettings.parse(json.dumps({"expectations": [{"name": "other", "enabled": False},
                                                            {"name": "new", "type": "expect_column_to_exist",
                                                             "kwargs": {"column": "y"}, "severity": "info"}]}))
    layered = run.over(dag)
    specs = merge(base + list(layered.expectations))
    assert [s.name for s in specs] == ["mass", "new"]
    assert specs[0] == ExpectationSpec("mass", "expect_column_values_to_be_between",
                                       {"column": "ranks.rank.sum", "min_value": 0.9}, "warning", "d")
    assert not CheckSettings.parse({"enabled": False}).over(dag).enabled
    with pytest.raises(ConfigError, match="expectation 'lonely' has no type or kwargs"):
        merge([{"name": "lonely", "severity": "warning"}])


def test_checks_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "checks.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match=f"checks file {bad} is not valid JSON"):
        load_checks_file(str(bad))
    bad.write_text(json.dumps({"expectations": [{"name": "x", "severity": "fatal"}]}))
    with pytest.raises(ConfigError, match=f"checks file {bad}.expectations\\[0\\] \\(x\\): severity"):
        load_checks_file(str(bad))
    with pytest.raises(ConfigError, match="cannot read checks file"):
        load_checks_file(str(tmp_path / "missing.json"))


def test_the_project_checks_file_is_valid():
    import os

    from tests.conftest import ROOT

    settings = CheckSettings.parse(load_checks_file(os.path.join(ROOT, "include", "pagerank_checks.json")))
    assert {e["name"] for e in settings.expectations} >= {"no_dominant_node", "rank_mass"}


# --- the profile ---------------------------------------------------------------------------


def profiled(batches, keys=("node",)):
    from spark_jobs.storeio import _Profile

    p = _Profile(keys, {"input_nodes": 5})
    for b in batches:
        p.add(b)
    return p.to_dict()


def test_the_tail_profile_of_a_partition():
    nan, inf = float("nan"), float("inf")
    first = pa.record_batch({"node": pa.array([1, 2, 2], pa.int64()), "rank": pa.array([0.5, nan, None], pa.float64())})
    second = pa.record_batch({"node": pa.array([2, 3], pa.int64()), "rank": pa.array([-inf, 0.25], pa.float64())})
    p = profiled([first, second])
    assert p["rows"] == 5
    assert p["duplicate_keys"] == 2, "2 after 2 inside a batch, and again across the batch boundary"
    assert p["columns"]["rank"] == {"nulls": 1, "nonfinite": 2, "sum": 0.75, "min": 0.25, "max": 0.5}
    assert p["columns"]["node"] == {"nulls": 0, "nonfinite": 0, "sum": 10.0, "min": 1.0, "max": 3.0}
    assert p["facts"] == {"input_nodes": 5.0}
    strings = profiled([pa.record_batch({"node": pa.array(["a", None, "b"]), "w": pa.array([1, 2, 3], pa.int32())})], keys=())
    assert strings["columns"]["node"] == {"nulls": 1} and "duplicate_keys" not in strings


def report(partition, profile, head="ranks"):
    return EpochReport(head, partition, 3, "a3", profile["rows"], {}, (), SCHEMA, profile)


def test_partitions_combine_into_one_row():
    parts = [
        report(0, {"rows": 2, "duplicate_keys": 0, "facts": {"input_nodes": 4.0},
                   "columns": {"node": {"nulls": 0, "nonfinite": 0, "sum": 3.0, "min": 1.0, "max": 2.0},
                               "rank": {"nulls": 0, "nonfinite": 1, "sum": 0.5, "min": 0.5, "max": 0.5}}}),
        report(1, {"rows": 2, "duplicate_keys": 1, "facts": {"input_nodes": 4.0},
                   "columns": {"node": {"nulls": 1, "nonfinite": 0, "sum": 3.0, "min": 3.0, "max": 3.0},
                               "rank": {"nulls": 0, "nonfinite": 0, "sum": 0.25, "min": 0.1, "max": 0.15}}}),
        report(2, {"rows": 0, "duplicate_keys": 0, "columns": {}}),
    ]
    assert combine(parts)["rows"] == 4
    decision = AlignmentDecision(3, "a3", False, None, 4, {"l1_delta": math.nan})
    row = profile_row(epoch=3, kind="epoch", decision=decision, datasets={"ranks": parts})
    assert row["ranks.rows"] == 4 and row["ranks.duplicate_keys"] == 1 and row["input_nodes"] == 4.0
    assert row["ranks.rank.sum"] == 0.75 and row["ranks.rank.min"] == 0.1 and row["ranks.rank.max"] == 0.5
    assert row["ranks.rank.nonfinite"] == 1 and row["ranks.node.nulls"] == 1
    assert row["l1_delta.nonfinite"] == 1 and row["feedback"] == 4
    assert row["ranks.schema"] == schema_string(SCHEMA) == "node bigint, rank double"


# --- validation ----------------------------------------------------------------------------

PROFILE = {"epoch": 2, "kind": "epoch", "l1_delta": 0.5, "l1_delta.nonfinite": 0, "ranks.rows": 4,
           "ranks.schema": "node bigint, rank double", "ranks.duplicate_keys": 0, "ranks.node.nulls": 0,
           "ranks.rank.nonfinite": 0, "ranks.rank.sum": 0.93, "ranks.rank.min": 0.01, "ranks.rank.max": 0.6,
           "ranks.node.nonfinite": 0, "input_nodes": 4.0}


def spec(name, column, severity="critical", **kwargs):
    return ExpectationSpec(name, "expect_column_values_to_be_between", {"column": column, **kwargs}, severity)


def run(specs, parameters=None, profile=PROFILE):
    return validate(specs, profile, parameters or {}, job_id="j", checkpoint_id=2, attempt_id="a2-x", kind="epoch")


def test_a_blocking_failure_names_expectation_observed_and_expected():
    report, gx_json, html = run([spec("rank_mass", "ranks.rank.sum", min_value=0.999, max_value=1.001),
                                 spec("ranks_nonnegative", "ranks.rank.min", min_value=0)])
    assert not report.success and [o.name for o in report.blocking] == ["rank_mass"]
    summary = report.summary()
    assert "1 passed, 1 failed (blocking), 0 warning(s), 0 skipped" in summary
    assert "FAILED  rank_mass [critical] expect_column_values_to_be_between: observed ranks.rank.sum=0.93; " \
           "expected between 0.999 and 1.001" in summary
    assert gx_json["success"] is False and len(gx_json["results"]) == 2
    assert "<html" in html.lower()
    json.dumps(report.to_dict())  # JSON-able as stored


def test_warnings_do_not_block_and_are_reported():
    report, _, html = run([spec("dominant", "ranks.rank.max", severity="warning", max_value=0.5),
                           spec("info_only", "ranks.rank.max", severity="info", max_value=0.1)])
    assert html is not None, "a page for what warned"
    assert report.success and [o.name for o in report.warnings] == ["dominant", "info_only"]
    assert "WARNING" not in report.headline() and "2 warning(s)" in report.headline()


def test_missing_columns_and_parameters_skip_globs_expand():
    specs = [
        spec("not_here", "centroids.rows", min_value=1),
        spec("not_increasing", "l1_delta", max_value={"$PARAMETER": "previous__l1_delta + 1e-9"}),
        spec("finite", "ranks.*.nonfinite", max_value=0),
        ExpectationSpec("cover", "expect_column_pair_values_to_be_equal",
                        {"column_A": "ranks.rows", "column_B": "input_nodes"}),
        ExpectationSpec("schema", "expect_column_values_to_be_in_set",
                        {"column": "ranks.schema", "value_set": ["node bigint, rank double"]}),
    ]
    first, gx_json, html = run(specs)
    assert gx_json["success"] is True and html is None, "no Data Docs page when everything passed"
    status = {o.name: o.status for o in first.outcomes}
    assert status == {"not_here": "skipped", "not_increasing": "skipped", "finite[ranks.rank.nonfinite]": "passed",
                      "finite[ranks.node.nonfinite]": "passed", "cover": "passed", "schema": "passed"}
    assert "no value for parameter previous__l1_delta" in {o.name: o for o in first.outcomes}["not_increasing"].note
    later, _, _ = run(specs, {"previous__l1_delta": 0.4})
    outcome = {o.name: o for o in later.outcomes}["not_increasing"]
    assert outcome.status == "failed" and outcome.expected.startswith("<= 0.400000001")


def test_nan_in_a_metric_is_caught_by_its_nonfinite_column():
    profile = {**PROFILE, "l1_delta": math.nan, "l1_delta.nonfinite": 1}
    specs = merge(runtime_expectations({"ranks": ["node"]}, ["l1_delta"], {"ranks": "node bigint, rank double"}))
    report, _, _ = run(specs, profile=profile)
    assert [o.name for o in report.blocking] == ["l1_delta_finite"]


def test_an_unknown_expectation_type_is_a_config_error():
    with pytest.raises(ConfigError, match="expectation 'x' .*expect_column_values_to_be_purple"):
        run([ExpectationSpec("x", "expect_column_values_to_be_purple", {"column": "ranks.rows"})])


def test_the_suite_kept_between_validations_takes_each_runs_parameters():
    # The suite of a spec list is built once per process; the parameters (the parent's metrics)
    # differ from epoch to epoch and must be the ones of each validation, passing or failing.
    specs = [spec("not_increasing", "l1_delta", max_value={"$PARAMETER": "previous__l1_delta + 1e-9"})]
    for previous, status in [(0.4, "passed"), (0.2, "failed"), (0.5, "passed"), (0.1, "failed")]:
        report, gx_json, html = run(specs, {"previous__l1_delta": previous}, profile={**PROFILE, "l1_delta": 0.3})
        (outcome,) = report.outcomes
        assert (outcome.status, outcome.expected) == (status, f"<= {previous + 1e-9:.10g}")
        assert gx_json["success"] is (status == "passed")
        if status == "failed":  # the details of a failure, as Great Expectations reports them
            assert gx_json["results"][0]["result"]["unexpected_count"] == 1 and "<html" in html.lower()
        else:
            assert html is None


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own niceness is Linux's (elsewhere yield_cpu does nothing)")
def test_the_warm_up_thread_yields_the_cpu_and_only_it():
    """Great Expectations is imported in a background thread while an epoch's Spark work runs;
    the thread lowers its own priority so the import takes the CPU the epoch leaves, and the
    calling thread keeps its own."""
    import os
    import threading

    from include.checks import WARM_UP_NICENESS, yield_cpu

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before, seen = niceness(), {}

    def worker():
        yield_cpu()
        seen["worker"] = niceness()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["worker"] == min(before + WARM_UP_NICENESS, 19)
    assert niceness() == before
