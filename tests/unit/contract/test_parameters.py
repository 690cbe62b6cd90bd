"""Settings declared once (include.contract.parameters.Parameter): the Python check and the JSON Schema a
DAG's trigger form validates with accept exactly the same values, for every built-in body's
parameters and every bounded job setting; errors name the setting, what it accepts and the value."""

from __future__ import annotations

import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from include.contract.body import BUILTIN_BODIES, resolve_body
from include.contract.config import SETTINGS, JobConfig
from include.contract.parameters import Parameter
from include.errors import ConfigError

# lists whose items are declared (numbers in bounds, an enum) beside the built-in ones
LISTS = [Parameter("weights", [1.0], "", {"type": ["null", "array"], "minItems": 1,
                                           "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 10}}),
         Parameter("modes", [], "", {"type": "array", "items": {"type": "string", "enum": ["y", "parquet"]}}),
         Parameter("counts", [2, 3], "", {"type": "array", "minItems": 2, "items": {"type": "integer", "minimum": 1}})]
DECLARED = ([p for name in sorted(BUILTIN_BODIES) for p in resolve_body(name).parameters] + list(SETTINGS.values())
            + LISTS)

# JSON values a run conf can carry (finite numbers: see test_non_finite_numbers_are_refused)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**7, 10**7) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6) | st.sampled_from(["parquet", "delta", "fail", "previous", "y", ""]),
    lambda inner: st.lists(inner, max_size=3), max_leaves=4)


def schema_accepts(p: Parameter, value) -> bool:
    try:
        jsonschema.Draft7Validator(p.json_schema()).validate(value)
        return True
    except jsonschema.ValidationError:
        return False


def check_accepts(p: Parameter, value) -> bool:
    try:
        p.check(value)
        return True
    except ConfigError as e:
        assert str(e).startswith(f"{p.name} must be ") and repr(value) in str(e)
        return False


@pytest.mark.parametrize("p", DECLARED, ids=lambda p: p.name)
def test_the_check_and_the_schema_agree(p):
    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(VALUES)
    def agree(value):
        assert check_accepts(p, value) == schema_accepts(p, value), value

    agree()
    assert check_accepts(p, p.default) and schema_accepts(p, p.default)


def test_non_finite_numbers_are_refused():
    """JSON confs parsed by Python may carry NaN and Infinity; the check refuses them."""
    damping = next(p for p in resolve_body("pagerank").parameters if p.name == "damping")
    lr = next(p for p in resolve_body("sgd").parameters if p.name == "learning_rate")
    for value in (float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="must be a number"):
            lr.check(value)
        with pytest.raises(ConfigError):
            damping.check(value)


def test_messages_say_what_is_accepted():
    k = next(p for p in resolve_body("kmeans").parameters if p.name == "k")
    with pytest.raises(ConfigError, match=r"^k must be an integer in \[1, 10000\], got True$"):
        k.check(True)
    with pytest.raises(ConfigError, match=r"features must be null or a list of one or more non-empty strings, got \[\]"):
        resolve_body("kmeans").parse_params({"features": []})
    with pytest.raises(ConfigError, match=r"num_partitions must be null or an integer in \[1, 100000\], got 0"):
        JobConfig(job_id="j", body="pagerank", input="x.csv", checkpoint_root="/tmp/s", num_partitions=0)
    with pytest.raises(ConfigError, match=r"output_format must be one of \['parquet', 'delta'\], got 'orc'"):
        JobConfig(job_id="j", body="pagerank", input="x.csv", checkpoint_root="/tmp/s", output_format="orc")


def test_a_list_checks_its_items_by_their_declaration():
    weights, modes, counts = LISTS
    assert weights.check([0, 2.5]) == (0, 2.5) and counts.check([1, 2.0]) == (1, 2)
    with pytest.raises(ConfigError, match=r"^weights must be null or a list of one or more numbers in \[0, 10\), "
                                          r"got \[1, 10\]$"):
        weights.check([1, 10])
    with pytest.raises(ConfigError, match=r"modes must be a list of one of \['y', 'parquet'\], got \['orc'\]"):
        modes.check(["orc"])
    with pytest.raises(ConfigError, match=r"counts must be a list of at least 2 integers >= 1, got \[1\]"):
        counts.check([1])


def test_a_declaration_the_code_cannot_check_is_refused_at_once():
    with pytest.raises(TypeError, match="pattern"):
        Parameter("x", "a", "", {"type": "string", "pattern": "^a$"})
    with pytest.raises(ConfigError, match="x must be an integer >= 1, got 0"):
        Parameter("x", 0, "", {"type": "integer", "minimum": 1})  # its own default refused
    with pytest.raises(TypeError, match="items"):  # a list of lists (or of nulls) is not supported
        Parameter("x", (), "", {"type": "array", "items": {"type": "array"}})


def test_parameters_are_declared_once_on_the_dataclass():
    from dataclasses import dataclass

    from include.contract.body import IterationBody
    from include.contract.parameters import param, parameters_of

    @dataclass(frozen=True)
    class Params:
        rate: float = param(0.5, "A rate.", type="number", exclusiveMinimum=0)
        names: tuple[str, ...] = param(["a"], "Names.", type="array", minItems=1)

    class Body(IterationBody):
        name = "b"
        params_type = Params
        load = init = step = finish = None  # not run here

    assert [(p.name, p.default) for p in Body.parameters] == [("rate", 0.5), ("names", ("a",))]
    assert Body().parse_params({"rate": 2}) == Params(rate=2, names=("a",))
    with pytest.raises(ConfigError, match=r"^rate must be a number > 0, got 0$"):
        Body().parse_params({"rate": 0})

    @dataclass(frozen=True)
    class Undeclared:
        rate: float = 0.5

    with pytest.raises(TypeError, match=r"Undeclared.rate is not declared with include.contract.parameters.param"):
        parameters_of(Undeclared)


PARENT = {"parentRunId": "0191a5b2-7c3d-7e4f-8a5b-6c7d8e9f0a1b", "parentJobNamespace": "default"}
ROOT = {"rootParentRunId": "0191a5b2-0000-7e4f-8a5b-6c7d8e9f0a1b", "rootParentJobName": "iterate_pagerank",
        "rootParentJobNamespace": "default"}


def test_the_openlineage_parent_information_is_the_one_key_besides_the_params():
    """A continuation's run conf carries the OpenLineage provider's parent run: accepted when it
    is that (an object of the provider's fields, strings), refused naming what is wrong."""
    import pytest

    from include.contract.parameters import check_conf_keys
    from include.errors import ConfigError

    declared = {"job_id", "max_epochs"}
    parent = {**PARENT, "parentJobName": "iterate_pagerank.continue", **ROOT}
    check_conf_keys({"job_id": "j", "openlineage": parent}, declared)
    for bad, why in (("not an object", "must be an object"), ({"parentRunId": 3}, "parentRunId must be a printable string"),
                     ({"parentRunId": "x" * 1001}, "1 to 1,000"), ({"run": "x"}, r"unknown field\(s\) \['run'\]"),
                     ({**parent, "parentJobName": "a\nb"}, r"parentJobName must be a printable string .* got 'a\\nb'"),
                     ({**parent, "parentRunId": "0190-x"}, r"parentRunId must be an OpenLineage run id \(a UUID\), got '0190-x'"),
                     ({"parentRunId": PARENT["parentRunId"], "parentJobName": "x"},
                      "the parent needs parentRunId, parentJobNamespace, parentJobName together, got only parentRunId, "
                      "parentJobName"),
                     (ROOT, "a root parent without a parent")):
        with pytest.raises(ConfigError, match=why):
            check_conf_keys({"openlineage": bad}, declared)
    with pytest.raises(ConfigError, match="'openlinage'"):
        check_conf_keys({"openlinage": parent}, declared)


OWN = {"iterate_pagerank", "iterate_pagerank.continue", "iterate_pagerank.finish"}


@pytest.mark.parametrize("claimed", [
    {**PARENT, "parentJobName": "iterate_pagerank.continue", **ROOT},  # what a continuation writes
    {**PARENT, "parentJobName": "iterate_pagerank"},  # the DAG's run, no root
])
def test_a_run_may_name_its_own_dag_as_its_lineage_parent(claimed):
    from include.contract.parameters import check_lineage_conf, check_lineage_parent

    check_lineage_conf(claimed)
    check_lineage_parent(claimed, OWN, namespace="default")


@pytest.mark.parametrize("claimed, named", [
    ({**PARENT, "parentJobName": "payroll.publish"}, "parentJobName 'payroll.publish' in namespace 'default' is not a parent"),
    ({**PARENT, "parentJobName": "iterate_pagerank.continue", "parentJobNamespace": "other-team"},
     "parentJobName 'iterate_pagerank.continue' in namespace 'other-team' is not a parent"),
    ({**PARENT, "parentJobName": "iterate_pagerank.no_such_task"}, "'iterate_pagerank.no_such_task'"),
    ({**PARENT, "parentJobName": "iterate_pagerank.continue", **ROOT, "rootParentJobName": "payroll"},
     "rootParentJobName 'payroll' in namespace 'default' is not a root parent"),
])
def test_issue_64_a_run_may_not_claim_another_job_as_its_lineage_parent(claimed, named):
    """Issue 64: any job could be named as a run's parent. A run names its own DAG (a
    continuation's entry), or a job the DAG's author allows; anything else is refused naming it."""
    from include.contract.parameters import check_lineage_parent
    from include.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(named) + ".*only this DAG's own runs and tasks in namespace "
                                          "'default' \\(what a continuation sets\\); its author allows others with "
                                          "iteration_dag\\(lineage_parents=...\\)"):
        check_lineage_parent(claimed, OWN, namespace="default")


def test_the_author_may_allow_other_lineage_parents():
    from include.contract.parameters import check_lineage_parent, check_lineage_parents
    from include.errors import ConfigError

    allowed = [("scheduler", "nightly.*")]
    check_lineage_parent({**PARENT, "parentJobNamespace": "scheduler", "parentJobName": "nightly.graph"}, OWN,
                         namespace="default", allowed=allowed)
    with pytest.raises(ConfigError, match=r"'nightly.graph' in namespace 'default' .* or 'nightly.\*' in "
                                          r"'scheduler' \(its author's lineage_parents\)"):
        check_lineage_parent({**PARENT, "parentJobName": "nightly.graph"}, OWN, namespace="default", allowed=allowed)
    for bad in ("nightly.*", [("scheduler",)], [("scheduler", 3)], [("", "x")]):
        with pytest.raises(ConfigError, match="lineage_parents"):
            check_lineage_parents(bad)
