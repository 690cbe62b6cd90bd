"""The data checks without Spark: settings and their errors, merging by name, the profile
(the tail's per-partition statistics combined into one row), and validation with Great
Expectations on that row (blocking, warnings, skipped, globs, parameters)."""

from __future__ import annotations

import importlib
import json
import math
import re
import sys

import pyarrow as pa
import pytest

from include.checkpoints.head_state import AlignmentDecision, EpochReport
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
    from spark_jobs.storeio import Profile

    p = Profile(keys, {"input_nodes": 5})
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


def test_an_array_of_numbers_is_profiled_over_its_elements():
    nan = float("nan")
    centers = pa.array([[1.0, 2.0], None, [nan, -4.0, None]], pa.list_(pa.float64()))
    p = profiled([pa.record_batch({"cluster_id": pa.array([0, 1, 2], pa.int32()), "center": centers})],
                 keys=("cluster_id",))
    assert p["columns"]["center"] == {"nulls": 1, "nonfinite": 1, "sum": -1.0, "min": -4.0, "max": 2.0}
    words = profiled([pa.record_batch({"k": pa.array([1]), "w": pa.array([["a"]], pa.list_(pa.string()))})], keys=())
    assert words["columns"]["w"] == {"nulls": 0}


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


def test_an_expectation_whose_inputs_did_not_change_reuses_its_passing_result():
    # Epoch after epoch most checks read the same values (k centroids, 0 non-finite): their
    # result is reused; what changed (a column it reads, a parameter it names, the value's type)
    # is validated again, and a failure is never served from before.
    importlib.import_module("include.checks.gx")._PASSED.clear()  # what earlier tests passed with
    specs = [ExpectationSpec("cover", "expect_column_pair_values_to_be_equal",  # GX returns its results in its order
                             {"column_A": "ranks.rows", "column_B": "input_nodes"}),
             spec("finite", "ranks.*.nonfinite", max_value=0), spec("mass", "ranks.rank.sum", min_value=0.9),
             spec("not_increasing", "l1_delta", max_value={"$PARAMETER": "previous__l1_delta + 1e-9"})]
    first, first_json, _ = run(specs, {"previous__l1_delta": 0.6})
    assert first.success and "reused_results" not in first_json["meta"]
    again, again_json, _ = run(specs, {"previous__l1_delta": 0.6})
    assert [(o.name, o.status, o.expected) for o in again.outcomes] == \
        [(o.name, o.status, o.expected) for o in first.outcomes]
    assert again_json["meta"]["reused_results"] == [o.name for o in first.outcomes]
    assert again_json["results"] == first_json["results"] and again_json["statistics"] == first_json["statistics"]
    assert again_json["meta"]["batch_markers"]["pandas_data_fingerprint"] == \
        first_json["meta"]["batch_markers"]["pandas_data_fingerprint"], "the same profile, the same fingerprint"

    _, changed, _ = run(specs, {"previous__l1_delta": 0.7}, profile={**PROFILE, "ranks.rank.sum": 0.95})
    assert changed["meta"]["reused_results"] == ["cover", "finite[ranks.rank.nonfinite]", "finite[ranks.node.nonfinite]"]
    assert [r["expectation_config"]["meta"]["name"] for r in changed["results"]] == [o.name for o in first.outcomes]
    assert changed["meta"]["batch_markers"]["pandas_data_fingerprint"] != \
        first_json["meta"]["batch_markers"]["pandas_data_fingerprint"]
    _, retyped, _ = run(specs, {"previous__l1_delta": 0.7}, profile={**PROFILE, "ranks.rank.sum": 0.95,
                                                                   "ranks.rank.nonfinite": 0.0})
    assert "finite[ranks.rank.nonfinite]" not in retyped["meta"]["reused_results"]

    failing, failing_json, html = run(specs, {"previous__l1_delta": 0.6}, profile={**PROFILE, "ranks.rank.sum": 0.5})
    assert [o.name for o in failing.blocking] == ["mass"] and "<html" in html.lower()
    assert "reused_results" not in failing_json["meta"], "a failure validates every expectation again, in detail"
    assert all("unexpected_count" in r["result"] for r in failing_json["results"])
    twice, _, _ = run(specs, {"previous__l1_delta": 0.6}, profile={**PROFILE, "ranks.rank.sum": 0.5})
    assert [o.name for o in twice.blocking] == ["mass"], "a failure is not kept for reuse"


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


# --- what a run's conf may say: the allow-list (a conf is untrusted) -------------------------


def exploit(marker) -> dict:
    """A spec whose row_condition Great Expectations' pandas engine would evaluate as code."""
    return {"column": "ranks.rows", "min_value": 0,
            "row_condition": f"@pd.io.common.os.system('touch {marker}')==0", "condition_parser": "pandas"}


def test_a_row_condition_in_a_run_conf_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    conf = {"expectations": [{"name": "evil", "type": "expect_column_values_to_be_between", "kwargs": exploit(marker)}]}
    for value in (conf, json.dumps(conf)):
        with pytest.raises(ConfigError, match=r"the checks param\.expectations\[0\] \(evil\): kwarg 'row_condition' "
                                              r"is refused .*evaluates it as code.*accepts: column"):
            CheckSettings.parse(value, "the checks param")
    # a kwargs-only entry (changing an expectation by name) is checked too
    with pytest.raises(ConfigError, match="kwarg 'row_condition' is refused"):
        CheckSettings.parse({"expectations": [{"name": "rank_mass", "kwargs": exploit(marker)}]})
    assert not marker.exists()


def test_a_row_condition_in_a_checks_file_is_refused_naming_the_file(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "checks.json"
    path.write_text(json.dumps({"expectations": [
        {"name": "evil", "type": "expect_column_max_to_be_between", "kwargs": exploit(marker)}]}))
    with pytest.raises(ConfigError, match=f"checks file {path}.expectations\\[0\\] \\(evil\\): kwarg 'row_condition'"):
        load_checks_file(str(path))
    assert not marker.exists()


def test_validate_and_merge_refuse_a_row_condition_given_directly(tmp_path):
    """Defence in depth: a spec that never went through CheckSettings (a body's, one built in
    code) is held to the allow-list when merged and again when validated."""
    marker = tmp_path / "pwned"
    with pytest.raises(ConfigError, match=r"the data checks of epoch 2 \(evil\): kwarg 'row_condition' is refused"):
        run([ExpectationSpec("evil", "expect_column_values_to_be_between", exploit(marker))])
    with pytest.raises(ConfigError, match=r"\(evil\): kwarg 'row_condition' is refused"):
        merge([{"name": "evil", "type": "expect_column_values_to_be_between", "kwargs": exploit(marker)}])
    # a body's type with a later entry's kwargs: the merged expectation is what is checked
    with pytest.raises(ConfigError, match=r"\(evil\): kwarg 'condition_parser' is refused"):
        merge([{"name": "evil", "type": "expect_column_values_to_be_between", "kwargs": {"column": "x", "max_value": 0}},
               {"name": "evil", "kwargs": {"column": "x", "max_value": 0, "condition_parser": "pandas"}}])
    assert not marker.exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"column": "ranks.rows", "max_value": 1, "condition_parser": "pandas"}, "kwarg 'condition_parser' is refused"),
    ({"column": "ranks.rows", "max_value": 1, "result_format": "COMPLETE"},
     "kwarg 'result_format' is refused for expect_column_values_to_be_between. expect_column_values_to_be_between "
     "accepts: column .*min_value .*mostly"),
    ({"column": "ranks.rows", "value_set": [1]}, "kwarg 'value_set' is refused for expect_column_values_to_be_between"),
    ({"column": "ranks.rows", "max_value": "1"}, r"kwarg 'max_value' .* must be a finite number or \{\"\$PARAMETER\""),
    ({"column": "ranks.rows", "max_value": float("inf")}, "kwarg 'max_value' .* must be a finite number"),
    ({"column": "ranks.rows", "mostly": 2}, r"kwarg 'mostly' .* must be a number in \[0, 1\]"),
    ({"column": "ranks.rows", "strict_min": "yes"}, "kwarg 'strict_min' .* must be true or false"),
    ({"column": ["ranks.rows"], "max_value": 1}, "kwarg 'column' .* must be a profile column name"),
    ({"column": "ranks.rows\n", "max_value": 1}, "kwarg 'column' .* must not contain control characters"),
    ({"max_value": 1}, "expect_column_values_to_be_between needs kwarg.s. column"),
    ({"column": "x", "max_value": {"$PARAMETER": "previous__l1_delta", "$PARAMETER.previous__l1_delta": "now()"}},
     "kwarg 'max_value' .* with no other key"),  # GX would take the other key's value as it is
])
def test_kwargs_outside_the_allow_list_are_refused(kwargs, message):
    entry = {"name": "x", "type": "expect_column_values_to_be_between", "kwargs": kwargs}
    with pytest.raises(ConfigError, match=r"run\.expectations\[0\] \(x\): " + message):
        CheckSettings.parse({"expectations": [entry]}, "run")


def test_only_column_may_be_a_glob():
    entry = {"name": "x", "type": "expect_column_pair_values_to_be_equal",
             "kwargs": {"column_A": "ranks.*.sum", "column_B": "input_nodes"}}
    with pytest.raises(ConfigError, match="kwarg 'column_A' .* must be a column name, not a glob"):
        CheckSettings.parse({"expectations": [entry]})


def test_value_sets_are_bounded():
    entry = {"name": "x", "type": "expect_column_values_to_be_in_set",
             "kwargs": {"column": "ranks.schema", "value_set": list(range(1001))}}
    with pytest.raises(ConfigError, match="value_set' .* at most 1000 values"):
        CheckSettings.parse({"expectations": [entry]})
    entry["kwargs"]["value_set"] = [{"nested": 1}]
    with pytest.raises(ConfigError, match="value_set' .* must list strings, finite numbers"):
        CheckSettings.parse({"expectations": [entry]})


def test_an_unknown_type_is_refused_naming_the_accepted_types():
    entry = {"name": "x", "type": "expect_column_values_to_match_regex", "kwargs": {"column": "ranks.schema"}}
    with pytest.raises(ConfigError, match=r"run\.expectations\[0\] \(x\): type must be a Great Expectations "
                                          r"expectation type this project accepts; expectation 'x' has "
                                          r"'expect_column_values_to_match_regex'\. Accepted types: .*"
                                          r"expect_column_values_to_be_between"):
        CheckSettings.parse({"expectations": [entry]}, "run")


@pytest.mark.parametrize("expression, message", [
    ("previous__l1_delta ** 1000", r"\*\* \(a power\) is not accepted"),
    ("previous__l1_delta ^ 1000", r"\^ \(a power\) at position 19 is not accepted"),
    ("now()", "'now' is reserved"),
    ("round(previous__l1_delta)", "'round' is reserved"),
    ("timedelta(days=1)", "'=' at position 14 is not accepted"),
    ("f(previous__l1_delta)", r"f\(\.\.\.\) is a function call"),
    ("previous__l1_delta.real", r"'\.' \(an attribute"),
    ("__import__", "'_' at the start of a name"),
    ("1" + " + 1" * 60, "of 241 characters .*at most 200 are accepted"),
    ("((((((((((((1))))))))))))", "nest deeper than 10"),
    ("1e999", "not finite"),
    ("", "not an expression"),
])
def test_parameter_expressions_are_arithmetic_only(expression, message):
    entry = {"name": "x", "type": "expect_column_values_to_be_between",
             "kwargs": {"column": "l1_delta", "max_value": {"$PARAMETER": expression}}}
    with pytest.raises(ConfigError, match=r"kwarg 'max_value' of expect_column_values_to_be_between has a "
                                          rf"\$PARAMETER.*{message}"):
        CheckSettings.parse({"expectations": [entry]})
    if expression:
        shown = expression if len(expression) <= 200 else expression[:60]
        with pytest.raises(ConfigError, match=re.escape(repr(shown)[:-1])):
            CheckSettings.parse({"expectations": [entry]})
    with pytest.raises(ConfigError, match="accepted: numbers|at most 200"):  # and never reaches GX
        run([ExpectationSpec("x", entry["type"], entry["kwargs"])], {"previous__l1_delta": 0.5})


def test_arithmetic_parameters_work_end_to_end():
    specs = [spec("not_increasing", "l1_delta", max_value={"$PARAMETER": "previous__l1_delta + 1e-9"}),
             spec("halved", "l1_delta", min_value={"$PARAMETER": "-(previous__l1_delta - 2 * previous__l1_delta) / 2"},
                  max_value={"$PARAMETER": "(previous__l1_delta + .5) * 1E0 - -0"}),
             ExpectationSpec("few_nodes", "expect_column_max_to_be_between",
                             {"column": "ranks.rows", "max_value": {"$PARAMETER": "previous__l1_delta * 8"}})]
    report, _, _ = run(specs, {"previous__l1_delta": 0.5})
    assert {o.name: (o.status, o.expected) for o in report.outcomes} == {
        "not_increasing": ("passed", "<= 0.500000001"), "halved": ("passed", "between 0.25 and 1"),
        "few_nodes": ("passed", "<= 4")}
    report, _, _ = run(specs, {"previous__l1_delta": 0.1})
    assert {o.name: (o.status, o.expected) for o in report.outcomes} == {
        "not_increasing": ("failed", "<= 0.100000001"), "halved": ("passed", "between 0.05 and 0.6"),
        "few_nodes": ("failed", "<= 0.8")}


def test_the_checks_param_schema_lists_the_allow_list():
    pytest.importorskip("airflow.sdk")
    from include.checks import EXPECTATION_KWARGS, EXPECTATION_TYPES
    from plugins.iterations.dag_factory import job_params

    schema = job_params(job_id="j", input_path="i", output_path=None)["checks"].schema
    item = schema["properties"]["expectations"]["items"]["properties"]
    assert item["type"]["enum"] == sorted(EXPECTATION_TYPES)
    assert item["kwargs"] == {"type": "object", "propertyNames": {"enum": list(EXPECTATION_KWARGS)}}
    assert "row_condition" not in EXPECTATION_KWARGS and "condition_parser" not in EXPECTATION_KWARGS


# --- who may relax what: run_settings --------------------------------------------------------

BODY = {"name": "pagerank", "heads": {"ranks": ["node"]}, "metric_aggregations": {"l1_delta": "sum"},
        "convergence_metric": "l1_delta", "outputs": ["ranks"], "epoch_outputs": [], "facts": ["input_nodes"],
        "expectations": [{"name": "rank_mass", "type": "expect_column_values_to_be_between",
                          "kwargs": {"column": "ranks.rank.sum", "min_value": 0.999, "max_value": 1.001}},
                         {"name": "ranks_cover_input", "type": "expect_column_pair_values_to_be_equal",
                          "kwargs": {"column_A": "ranks.rows", "column_B": "input_nodes"}}]}
AUTHOR = {"expectations": [{"name": "no_dominant_node", "type": "expect_column_values_to_be_between",
                            "kwargs": {"column": "ranks.rank.max", "max_value": 0.5}, "severity": "warning"}]}
NEW = {"name": "mine", "type": "expect_column_values_to_be_between", "kwargs": {"column": "ranks.rows", "min_value": 1}}


def test_locked_names_are_the_runtimes_the_bodys_and_the_authors():
    from include.checks import locked_expectation_names

    locked = locked_expectation_names(BODY, AUTHOR)
    assert locked == {"l1_delta_finite": "the runtime's checks", "ranks_schema_stable": "the runtime's checks",
                      "rank_mass": "the body 'pagerank'", "ranks_cover_input": "the body 'pagerank'",
                      "no_dominant_node": "the DAG's checks"}
    runtime = {e["name"] for e in runtime_expectations(BODY["heads"], BODY["metric_aggregations"], {"ranks": "x"})}
    assert runtime <= set(locked)


@pytest.mark.parametrize("run_conf, message", [
    ({"enabled": False}, r'the checks param: "enabled": false would turn this DAG\'s data checks off; only the '
                         r"DAG's author may allow"),
    ({"expectations": [NEW, {"name": "rank_mass", "severity": "warning"}]},
     r"the checks param\.expectations\[1\] \(rank_mass\): a run may not change the expectation 'rank_mass' "
     r"\(one of the body 'pagerank'\) \(it gives severity\): only the DAG's author"),
    ({"expectations": [{"name": "l1_delta_finite", "enabled": False}]}, r"'l1_delta_finite' \(one of the runtime's"),
    ({"expectations": [{"name": "ranks_schema_stable", "kwargs": {"column": "ranks.schema", "value_set": ["x"]}}]},
     "'ranks_schema_stable'.*it gives kwargs"),
    ({"expectations": [{"name": "no_dominant_node", "kwargs": {"column": "ranks.rank.max", "max_value": 1}}]},
     r"'no_dominant_node' \(one of the DAG's checks\)"),
])
def test_a_run_may_not_relax_the_authors_checks(run_conf, message):
    from include.checks import locked_expectation_names, run_settings

    author = CheckSettings.parse(AUTHOR, "the DAG's checks")
    with pytest.raises(ConfigError, match=message):
        run_settings(run_conf, author, locked_expectation_names(BODY, author), run_may_relax=False)
    # the author's own names are locked even if the caller passes only the body's
    if "no_dominant_node" in json.dumps(run_conf):
        with pytest.raises(ConfigError, match="no_dominant_node"):
            run_settings(run_conf, author, ["rank_mass"])
    # the DAG lets runs relax its checks: the run's entries change the author's by name, and its
    # new ones go by run.<name>
    relaxed = run_settings(run_conf, author, locked_expectation_names(BODY, author), run_may_relax=True)
    given = CheckSettings.parse(run_conf)
    locked = locked_expectation_names(BODY, author)
    renamed = tuple(e if e["name"] in locked else {**e, "name": "run." + e["name"]} for e in given.expectations)
    assert relaxed == CheckSettings(given.enabled, renamed).over(author)


def test_a_run_may_add_expectations():
    from include.checks import locked_expectation_names, run_settings

    settings = run_settings(json.dumps({"expectations": [NEW]}), AUTHOR, locked_expectation_names(BODY))
    assert settings.enabled and [e["name"] for e in settings.expectations] == ["no_dominant_node", "run.mine"]
    assert [s.name for s in merge([*BODY["expectations"], *settings.expectations])] == \
        ["rank_mass", "ranks_cover_input", "no_dominant_node", "run.mine"]
    assert run_settings(None, AUTHOR, locked_expectation_names(BODY)) == CheckSettings.parse(AUTHOR)
    with pytest.raises(ConfigError, match="kwarg 'row_condition' is refused"):  # adding is allow-listed too
        run_settings({"expectations": [{**NEW, "kwargs": {**NEW["kwargs"], "row_condition": "x"}}]}, AUTHOR, ())


@pytest.mark.parametrize("name, shadowed", [
    ("rank_mass[ranks.rank.sum]", "rank_mass"),  # a name the body's column glob expands to
    ("run.no_dominant_node", None),
    ("no_dominant_node[ranks.rank.max]", "no_dominant_node"),
])
def test_a_run_never_shadows_an_expectation_glob_expansions_included(name, shadowed):
    """A run's expectations go by run.<name>: none can take the place of one of the body's, the
    author's or the runtime's, nor of a name their column globs expand to (expand: name[col])."""
    from include.checks import locked_expectation_names, run_settings

    entry = {"name": name, "type": "expect_column_values_to_be_between",
             "kwargs": {"column": "ranks.rank.max", "max_value": 1.0}}
    if shadowed is not None:
        with pytest.raises(ConfigError, match=f"may not change the expectation '{shadowed}'"):
            run_settings({"expectations": [entry]}, AUTHOR, locked_expectation_names(BODY, AUTHOR))
        return
    settings = run_settings({"expectations": [entry]}, AUTHOR, locked_expectation_names(BODY, AUTHOR))
    mine = [e for e in settings.expectations if e["name"].startswith("run.")]
    assert [e["name"] for e in mine] == [name]
    locked = locked_expectation_names(BODY, AUTHOR)
    assert not any(e["name"] == n or e["name"].startswith(n + "[") for e in mine for n in locked)


# --- columns no checkpoint can have ----------------------------------------------------------

KMEANS = {"name": "kmeans", "heads": {"centroids": ["cluster_id"]}, "outputs": ["centroids", "assignments"],
          "epoch_outputs": ["centroid_history"], "facts": ["input_points", "k"],
          "metric_aggregations": {"max_shift": "max", "min_cluster_size": "min", "assigned_points": "sum"}}


def between(name, column, **kwargs):
    return {"name": name, "type": "expect_column_values_to_be_between", "kwargs": {"column": column, **kwargs}}


@pytest.mark.parametrize("column", [
    "assignments.cluster_id.min",  # a final-only output
    "centroid_history.shift.max",  # an epoch output
    "centroids.*.nonfinite",  # a glob over a head
    "*.cluster_id.nulls", "centroids.duplicate_keys", "centroids.rows", "k", "input_points", "max_shift",
    "max_shift.nonfinite", "epoch", "feedback", "[a-c]*.rows",
])
def test_columns_a_checkpoint_can_have_pass_the_static_check(column):
    from include.checks import check_columns

    check_columns(merge([between("x", column, max_value=1)]), KMEANS)
    check_columns(CheckSettings.parse({"expectations": [between("x", column, max_value=1)]}), KMEANS)


@pytest.mark.parametrize("column", [
    "centroid.x.min",  # a typo in the dataset
    "centroids.x.mean",  # no such statistic
    "centroids.x",  # no statistic
    "assignments.duplicate_keys",  # outputs have no key columns
    "input_point",  # a typo in a fact
    "max_shift.nulls",
    "centroid.*.nonfinite",  # a glob that can match nothing
    "*.average",
])
def test_a_column_no_checkpoint_can_have_is_refused_when_the_job_starts(column):
    from include.checks import check_columns

    with pytest.raises(ConfigError) as refused:
        check_columns(merge([between("x", column, max_value=1)]), KMEANS)
    message = str(refused.value)
    assert f"expectation 'x' names {column!r}, which no checkpoint's profile can have" in message
    for kinds in ("heads: centroids", "epoch outputs: centroid_history", "outputs: centroids, assignments",
                  "(input_points, k)", "(assigned_points, max_shift, min_cluster_size)", "D.<column>.nulls"):
        assert kinds in message
    # column_A, column_B and column_list are columns too
    pair = {"name": "p", "type": "expect_column_pair_values_to_be_equal", "kwargs": {"column_A": "k", "column_B": column}}
    multi = {"name": "m", "type": "expect_multicolumn_sum_to_equal", "kwargs": {"column_list": ["k", column], "sum_total": 1}}
    for entry in (pair, multi):
        with pytest.raises(ConfigError, match=re.escape(repr(column))):
            check_columns(merge([entry]), KMEANS)


def test_a_parameter_no_checkpoint_has_is_refused_when_the_job_starts():
    from include.checks import check_columns

    check_columns(merge([between("x", "max_shift", max_value={"$PARAMETER": "previous__max_shift * 2"})]), KMEANS)
    with pytest.raises(ConfigError, match="uses the parameter.s. previous__max_shfit, which no checkpoint has "
                                          r"\(parameters: previous__assigned_points, previous__max_shift"):
        check_columns(merge([between("x", "max_shift", max_value={"$PARAMETER": "previous__max_shfit * 2"})]), KMEANS)


def test_the_bodies_declare_their_facts_and_their_checks_name_real_columns():
    from include.checks import check_columns
    from include.contract.body import resolve_body

    facts = {"pagerank": ["input_nodes"], "kmeans": ["input_points", "k"], "sgd": []}
    for name, declared in facts.items():
        meta = resolve_body(name).describe()
        assert meta["facts"] == declared
        runtime = runtime_expectations(meta["heads"], meta["metric_aggregations"], {h: "x bigint" for h in meta["heads"]})
        check_columns(merge([*runtime, *meta["expectations"]]), meta)
    import os

    from tests.conftest import ROOT

    meta = resolve_body("pagerank").describe()
    dag = CheckSettings.parse(load_checks_file(os.path.join(ROOT, "include", "pagerank_checks.json")))
    check_columns(merge([*meta["expectations"], *dag.expectations]), meta)


EPOCH_PROFILE = {**PROFILE, "ranks.schema": "node string, rank double", "ranks.node.nulls": 0}
del EPOCH_PROFILE["ranks.node.nonfinite"]


@pytest.mark.parametrize("column, message", [
    ("ranks.rnk.min", r"'ranks\.rnk\.min', but dataset ranks \(in this epoch checkpoint\) has no column 'rnk'; "
                      r"its columns: node string, rank double"),
    ("ranks.node.min", r"'ranks\.node\.min', but ranks\.node is string: nonfinite, min, max, sum exist only for "
                       r"numeric .* ranks's numeric columns: rank"),
    ("ranks.*.mean", r"the glob 'ranks\.\*\.mean', which matches no column of dataset ranks"),
])
def test_a_column_its_dataset_cannot_have_is_a_config_error_at_validation(column, message):
    specs = [spec("fine", "ranks.rank.min", min_value=0), spec("typo", column, max_value=1)]
    with pytest.raises(ConfigError, match=r"the data checks of epoch 2 \(job j\) name columns it cannot have: "
                                          r"expectation 'typo' names .*" + message):
        run(specs, profile=EPOCH_PROFILE)
    if "*" not in column:  # only "column" may be a glob
        pair = ExpectationSpec("pair", "expect_column_pair_values_to_be_equal",
                               {"column_A": "ranks.rows", "column_B": column})
        with pytest.raises(ConfigError, match="expectation 'pair'"):
            run([pair], profile=EPOCH_PROFILE)


def test_what_is_legitimately_absent_is_skipped():
    final = {"epoch": 3, "kind": "final", "ranks.rows": 4, "ranks.schema": "node bigint, rank double",
             "ranks.node.nulls": 0, "ranks.rank.nulls": 0, "ranks.rank.nonfinite": 0, "ranks.rank.sum": 1.0,
             "ranks.rank.min": 0.1, "ranks.rank.max": 0.4, "ranks.node.nonfinite": 0, "ranks.node.sum": 10.0,
             "ranks.node.min": 1.0, "ranks.node.max": 4.0}
    specs = [spec("not_increasing", "l1_delta", max_value={"$PARAMETER": "previous__l1_delta + 1e-9"}),  # a metric
             spec("unique", "ranks.duplicate_keys", max_value=0),  # a head's keys: outputs have none
             ExpectationSpec("cover", "expect_column_pair_values_to_be_equal",  # a fact: epochs only
                             {"column_A": "ranks.rows", "column_B": "input_nodes"}),
             spec("history", "centroid_history.shift.max", max_value=1),  # a dataset of epochs only
             spec("finite", "ranks.*.nonfinite", max_value=0)]
    report = run(specs, profile=final)[0]
    assert {o.name: o.status for o in report.outcomes} == {
        "not_increasing": "skipped", "unique": "skipped", "cover": "skipped", "history": "skipped",
        "finite[ranks.rank.nonfinite]": "passed", "finite[ranks.node.nonfinite]": "passed"}
    # an empty head has no min/max/sum of its numeric columns (no records): skipped, not an error
    empty = {"epoch": 1, "kind": "epoch", "l1_delta": 0.0, "l1_delta.nonfinite": 0, "ranks.rows": 0,
             "ranks.schema": "node bigint, rank double", "ranks.duplicate_keys": 0, "ranks.node.nulls": 0,
             "ranks.rank.nulls": 0}
    report = run([spec("low", "ranks.rank.min", min_value=0), spec("finite", "ranks.*.nonfinite", max_value=0),
                  spec("rows", "ranks.rows", max_value=0)], profile=empty)[0]
    assert {o.name: o.status for o in report.outcomes} == {"low": "skipped", "finite": "skipped", "rows": "passed"}
    assert "ranks has no records" in {o.name: o for o in report.outcomes}["low"].note


def test_a_column_lost_by_the_data_fails_its_check_instead():
    """A head pinned to the schema it was restored with (the runtime's <head>_schema_stable)
    that lost a column: the data's fault (a failed check, the attempt refused), not the
    configuration's."""
    drifted = {**PROFILE, "ranks.schema": "node bigint"}
    for key in [k for k in drifted if k.startswith("ranks.rank.")]:
        del drifted[key]
    specs = merge([*runtime_expectations({"ranks": ["node"]}, ["l1_delta"], {"ranks": "node bigint, rank double"}),
                   between("low", "ranks.rank.min", min_value=0), between("finite", "ranks.rank*.nonfinite", max_value=0)])
    report = run(specs, profile=drifted)[0]
    status = {o.name: o.status for o in report.outcomes}
    assert status["ranks_schema_stable"] == "failed" and status["low"] == "failed" and status["finite"] == "failed"
    assert not report.success and "no longer has" in {o.name: o for o in report.outcomes}["low"].note
