"""Data checks between rounds: Great Expectations 1.x suites over what an attempt wrote,
validated before its checkpoint commits.

Cheap by construction. The tail computes a profile of every dataset it writes in the pass
that writes it (``spark_jobs.storeio._Profile``: records, nulls per column; for numeric
columns the non-finite values and the min, max and sum of the finite ones; duplicate keys);
each partition's profile travels in its report. The commit step combines the reports into one
row, the attempt's **profile**, and validates that row with Great Expectations' pandas engine:
no Spark job, no second pass over the data, milliseconds per epoch.

Columns of the profile (``D`` a dataset the attempt wrote: a head's feedback, an epoch output,
or, for the final checkpoint, an output; ``C`` one of its columns)::

    epoch, kind                    the checkpoint id, "epoch" or "final"
    feedback                       feedback records (all heads)
    <metric>, <metric>.nonfinite   each metric of the epoch, and 1 if it is NaN or infinite
    <fact>                         scalars the body reported (StepResult.facts), e.g. input_nodes
    D.rows, D.schema               records; the schema as "name type, name type"
    D.duplicate_keys               (heads) records whose key (the head's key columns) an
                                   earlier record has too
    D.C.nulls                      null values
    D.C.nonfinite, D.C.min, D.C.max, D.C.sum    (numeric C) NaN/inf count; min/max/sum of the finite values

An expectation is a Great Expectations configuration plus a name: ``{"name", "type",
"kwargs", "severity", "description"}``. ``severity`` is Great Expectations' own: ``critical``
(the default) blocks the commit; ``warning`` and ``info`` are reported and kept, and do not
block. A ``column`` may be a glob (``centroids.*.nonfinite``): the expectation applies to each
matching column. Parameters (``{"$PARAMETER": "previous__l1_delta + 1e-9"}``) are the parent
checkpoint's metrics as ``previous__<metric>``. An expectation whose columns or parameters the
attempt does not have (the final checkpoint has no metrics; epoch 0 no parent) is reported as
skipped (see below for what is an error instead).

The suite of an attempt: the runtime's (metrics finite; each head's schema the one it was
restored with), then the body's (``IterationBody.expectations``),
then the job's (``JobConfig.checks``: a DAG's checks file, then the run's ``checks`` param). A
later entry with the name of an earlier one replaces the keys it gives (``{"name":
"rank_mass", "severity": "warning"}`` only downgrades it; ``"enabled": false`` removes it).

What an expectation may say is an allow-list (``EXPECTATION_TYPES``: per type, the kwargs it
takes and the values each accepts), enforced on every entry, wherever it comes from (a run's
``checks`` param, a DAG's checks file, a body, the runtime) when settings are parsed, when
entries are merged and again when a suite is validated. Nothing Great Expectations evaluates as
code or as an expression is accepted (``row_condition``, ``condition_parser``...), except a
bound's ``$PARAMETER``, restricted to arithmetic (numbers, parameter names, ``+ - * /``, unary
minus, parentheses; at most ``MAX_PARAMETER_LENGTH`` characters), checked here before Great
Expectations parses it.

A run's conf is untrusted: ``run_settings`` layers it over the DAG author's settings and, unless
the DAG lets runs relax its checks, refuses a run that turns the checks off or touches an
expectation of the runtime, the body or the DAG's checks file (a run may add new ones).

A column no checkpoint can have is a configuration error, found when the job starts
(``check_columns``, from the body's metadata); at validation, a column of a dataset the profile
has but that dataset does not (``ranks.rnk.min``; ``ranks.node.min`` of a string column) is one
too. What is legitimately absent (a column of the other kind of checkpoint, a parameter epoch 0
does not have, a statistic of an empty dataset) is reported as skipped.

Nothing here imports Spark or Airflow; Great Expectations is imported when a suite runs.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import os
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from include.errors import ConfigError

if TYPE_CHECKING:
    from include.head import AlignmentDecision, EpochReport

log = logging.getLogger("iterations")

SEVERITIES = ("critical", "warning", "info")  # great_expectations' FailureSeverity values
BLOCKING = "critical"
_SPEC_KEYS = {"name", "type", "kwargs", "severity", "description", "enabled"}
_SETTINGS_KEYS = {"enabled", "expectations"}
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-\[\]]{0,199}$")
_COLUMN_KWARGS = ("column", "column_A", "column_B")


# --- what an expectation may say: the allow-list ----------------------------------------------

#: The longest ``$PARAMETER`` expression accepted (characters).
MAX_PARAMETER_LENGTH = 200
#: How deep parentheses and unary minus may nest in a ``$PARAMETER`` expression.
MAX_PARAMETER_DEPTH = 10
#: The longest column name or glob an expectation may give (characters), and the most
#: wildcards a glob may have.
MAX_COLUMN_LENGTH = 500
MAX_GLOB_WILDCARDS = 10
#: The most values a ``value_set`` may list, and the most characters its strings may have in all
#: (a head's schema string, the runtime's ``<head>_schema_stable``, can be long).
MAX_VALUE_SET = 1000
MAX_VALUE_SET_CHARS = 1_000_000
MAX_COLUMN_LIST = 100

# Names Great Expectations' expression parser reads as constants (e, pi) or calls (a bare
# function name is called, even without parentheses): never parameter names.
_RESERVED_NAMES = frozenset({"e", "pi", "sin", "cos", "tan", "exp", "abs", "trunc", "round", "sgn", "now",
                             "datetime", "timedelta"})
# The kwargs Great Expectations evaluates as code or as an expression, refused with the reason.
_CODE_KWARGS = {
    "row_condition": "Great Expectations evaluates it as code (a pandas query, a Spark SQL filter)",
    "condition_parser": "it selects how Great Expectations evaluates a row_condition as code",
    "windows": "it makes Great Expectations compute its own parameters",
}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _column_problem(v: Any) -> str | None:
    if not isinstance(v, str) or not v:
        return "must be a profile column name (a non-empty string)"
    if len(v) > MAX_COLUMN_LENGTH:
        return f"must be at most {MAX_COLUMN_LENGTH} characters"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in v):
        return "must not contain control characters"
    if sum(v.count(ch) for ch in "*?[") > MAX_GLOB_WILDCARDS:
        return f"may have at most {MAX_GLOB_WILDCARDS} wildcards"
    return None


def _column_name_problem(v: Any) -> str | None:
    problem = _column_problem(v)
    if problem is None and _is_glob(v):
        return "must be a column name, not a glob (only 'column' may be a glob)"
    return problem


def _column_list_problem(v: Any) -> str | None:
    if not isinstance(v, list) or not v or len(v) > MAX_COLUMN_LIST:
        return f"must be a list of 1 to {MAX_COLUMN_LIST} column names"
    for c in v:
        problem = _column_name_problem(c)
        if problem:
            return f"must list column names: {c!r} {problem}"
    return None


def _number_or_parameter_problem(v: Any) -> str | None:
    if _is_number(v):
        return None
    if isinstance(v, Mapping) and "$PARAMETER" in v:
        if set(v) != {"$PARAMETER"}:
            return 'must be {"$PARAMETER": expression} with no other key'
        return parameter_expression_problem(v["$PARAMETER"])
    return 'must be a finite number or {"$PARAMETER": expression}'


def _bound_problem(v: Any) -> str | None:
    return None if v is None else _number_or_parameter_problem(v)


def _bool_problem(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def _mostly_problem(v: Any) -> str | None:
    return None if _is_number(v) and 0 <= v <= 1 else "must be a number in [0, 1]"


def _value_set_problem(v: Any) -> str | None:
    if not isinstance(v, list) or len(v) > MAX_VALUE_SET:
        return f"must be a list of at most {MAX_VALUE_SET} values"
    chars = 0
    for x in v:
        if isinstance(x, str):
            chars += len(x)
        elif not (x is None or isinstance(x, bool) or _is_number(x)):
            return f"must list strings, finite numbers, booleans or null, not {x!r:.100}"
    if chars > MAX_VALUE_SET_CHARS:
        return f"must have at most {MAX_VALUE_SET_CHARS} characters of strings in all"
    return None


def _one_of(*choices: str):
    def problem(v: Any) -> str | None:
        return None if v in choices else f"must be one of {', '.join(choices)}"
    return problem


def _column_index_problem(v: Any) -> str | None:
    ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 100_000)
    return None if ok else "must be a column position (an integer >= 0) or null"


@dataclass(frozen=True)
class _Kwarg:
    accepts: str  # what it accepts, for the messages
    problem: Callable[[Any], "str | None"]  # None: the value is accepted; else what is wrong


_COLUMN = _Kwarg("a profile column, or a glob of them", _column_problem)
_COLUMN_NAME = _Kwarg("a profile column", _column_name_problem)
_BOUND = _Kwarg('a finite number, null, or {"$PARAMETER": "<arithmetic>"}', _bound_problem)
_BOOL = _Kwarg("true or false", _bool_problem)
_MOSTLY = _Kwarg("a number in [0, 1]", _mostly_problem)
_VALUE_SET = _Kwarg(f"a list of at most {MAX_VALUE_SET} strings, finite numbers, booleans or nulls",
                    _value_set_problem)
_PAIR_IGNORE = ("both_values_are_missing", "either_value_is_missing", "neither")
_MULTI_IGNORE = ("all_values_are_missing", "any_value_is_missing", "never")
_BETWEEN = {"min_value": _BOUND, "max_value": _BOUND, "strict_min": _BOOL, "strict_max": _BOOL}
_PAIR = {"column_A": _COLUMN_NAME, "column_B": _COLUMN_NAME, "mostly": _MOSTLY,
         "ignore_row_if": _Kwarg(f"one of {', '.join(_PAIR_IGNORE)}", _one_of(*_PAIR_IGNORE))}

#: The expectation types a data check may use, and per type the kwargs it takes (what each
#: accepts). Everything else is refused, in particular what Great Expectations evaluates as code.
EXPECTATION_TYPES: dict[str, dict[str, _Kwarg]] = {
    "expect_column_values_to_be_between": {"column": _COLUMN, **_BETWEEN, "mostly": _MOSTLY},
    "expect_column_values_to_be_in_set": {"column": _COLUMN, "value_set": _VALUE_SET, "mostly": _MOSTLY},
    "expect_column_values_to_not_be_in_set": {"column": _COLUMN, "value_set": _VALUE_SET, "mostly": _MOSTLY},
    "expect_column_values_to_be_null": {"column": _COLUMN, "mostly": _MOSTLY},
    "expect_column_values_to_not_be_null": {"column": _COLUMN, "mostly": _MOSTLY},
    "expect_column_max_to_be_between": {"column": _COLUMN, **_BETWEEN},
    "expect_column_min_to_be_between": {"column": _COLUMN, **_BETWEEN},
    "expect_column_sum_to_be_between": {"column": _COLUMN, **_BETWEEN},
    "expect_column_mean_to_be_between": {"column": _COLUMN, **_BETWEEN},
    "expect_column_median_to_be_between": {"column": _COLUMN, **_BETWEEN},
    "expect_column_to_exist": {"column": _COLUMN,
                               "column_index": _Kwarg("an integer >= 0 or null", _column_index_problem)},
    "expect_column_pair_values_to_be_equal": dict(_PAIR),
    "expect_column_pair_values_a_to_be_greater_than_b": {**_PAIR, "or_equal": _BOOL},
    "expect_multicolumn_sum_to_equal": {
        "column_list": _Kwarg(f"a list of 1 to {MAX_COLUMN_LIST} profile columns", _column_list_problem),
        "sum_total": _Kwarg('a finite number or {"$PARAMETER": "<arithmetic>"}', _number_or_parameter_problem),
        "mostly": _MOSTLY,
        "ignore_row_if": _Kwarg(f"one of {', '.join(_MULTI_IGNORE)}", _one_of(*_MULTI_IGNORE)),
    },
}
#: The kwargs each type must be given.
_REQUIRED_KWARGS: dict[str, tuple[str, ...]] = {
    t: tuple(k for k in ("column", "column_A", "column_B", "column_list", "value_set", "sum_total") if k in kw)
    for t, kw in EXPECTATION_TYPES.items()
}
#: Every kwarg some accepted type takes (the ``checks`` param's JSON schema lists these).
EXPECTATION_KWARGS: tuple[str, ...] = tuple(sorted({k for kw in EXPECTATION_TYPES.values() for k in kw}))


def _accepts(type_: str) -> str:
    return "; ".join(f"{k} ({arg.accepts})" for k, arg in EXPECTATION_TYPES[type_].items())


def _accepted_types() -> str:
    return ", ".join(sorted(EXPECTATION_TYPES))


def check_expectation(type_: Any, kwargs: Any, *, name: str = "?", where: str = "expectation",
                      partial: bool = False) -> None:
    """ConfigError unless ``type_`` is an accepted expectation type (``EXPECTATION_TYPES``) and
    ``kwargs`` only the kwargs it takes, each with a value it accepts (a ``$PARAMETER`` in the
    arithmetic ``parameter_expression_problem`` allows). The error names ``where`` (where the
    entry comes from), the expectation's ``name``, the key and what the type accepts.
    ``partial``: an entry that changes an expectation by name may give kwargs without a type
    (the type is an earlier entry's): ``type_`` None then checks each kwarg against the types
    that take it, and no kwarg is required (the merged expectation is checked in full)."""
    label = f"{where} ({name})"
    if type_ is None and partial:
        if kwargs is None:
            return
        if not isinstance(kwargs, Mapping):
            raise ConfigError(f"{label}: kwargs must be an object, got {kwargs!r:.200}")
        for key, value in kwargs.items():
            takers = [t for t, kw in EXPECTATION_TYPES.items() if key in kw]
            if not takers:
                raise ConfigError(f"{label}: kwarg {key!r} is refused{_code_reason(key)}; the accepted "
                                  f"kwargs are {', '.join(EXPECTATION_KWARGS)} (which of them depends on "
                                  f"the type; accepted types: {_accepted_types()})")
            problems = [EXPECTATION_TYPES[t][key].problem(value) for t in takers]
            if all(problems):
                raise ConfigError(f"{label}: kwarg {key!r} {problems[0]}, got {_short(value)}")
        return
    if not isinstance(type_, str) or type_ not in EXPECTATION_TYPES:
        raise ConfigError(f"{label}: type must be a Great Expectations expectation type this project "
                          f"accepts; expectation {name!r} has {_short(type_)}. Accepted types: {_accepted_types()}")
    if kwargs is None and partial:
        return
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"{label}: kwargs must be an object, got {kwargs!r:.200}")
    allowed = EXPECTATION_TYPES[type_]
    for key, value in kwargs.items():
        if key not in allowed:
            raise ConfigError(f"{label}: kwarg {key!r} is refused for {type_}{_code_reason(key)}. "
                              f"{type_} accepts: {_accepts(type_)}")
        problem = allowed[key].problem(value)
        if problem:
            raise ConfigError(f"{label}: kwarg {key!r} of {type_} {problem}, got {_short(value)}. "
                              f"{type_} accepts: {_accepts(type_)}")
    missing = [k for k in _REQUIRED_KWARGS[type_] if k not in kwargs]
    if missing:
        raise ConfigError(f"{label}: {type_} needs kwarg(s) {', '.join(missing)}. {type_} accepts: {_accepts(type_)}")


def _code_reason(key: Any) -> str:
    reason = _CODE_KWARGS.get(key) if isinstance(key, str) else None
    return f" ({reason}: a data check never takes it)" if reason else ""


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 200 else text[:200] + "..."


# --- $PARAMETER: arithmetic only ---------------------------------------------------------------

_EXPR_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z][A-Za-z0-9_]*)|(?P<op>[-+*/()]))")
_EXPR_ACCEPTED = ("numbers (e.g. 1, 0.5, 1e-9), parameter names (letters, digits and _, starting with a letter, "
                  "e.g. previous__l1_delta), + - * /, unary minus and parentheses; no ** or ^, no function "
                  "calls, no attributes")


def _tokens(expression: str) -> list[tuple[str, str]]:
    """(kind, text) of each token; ConfigError-free: raises ValueError naming what is wrong."""
    out: list[tuple[str, str]] = []
    pos, end = 0, len(expression.rstrip())
    while pos < end:
        m = _EXPR_TOKEN.match(expression, pos)
        if m is None or m.end() == pos:
            ch = expression[pos:].lstrip()[:1]
            what = {"^": "^ (a power)", ".": "'.' (an attribute, or a number like 1.)", ",": "',' (arguments)",
                    "[": "'[' (an index)", "_": "'_' at the start of a name"}.get(ch, repr(ch))
            raise ValueError(f"{what} at position {len(expression) - len(expression[pos:].lstrip())} is not accepted")
        kind = m.lastgroup or "op"
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _parse_expression(expression: str) -> set[str]:
    """The parameter names of an arithmetic expression (``expr := term (('+'|'-') term)*``,
    ``term := unary (('*'|'/') unary)*``, ``unary := '-' unary | number | name | '(' expr ')'``);
    ValueError saying what is wrong."""
    tokens = _tokens(expression)
    names: set[str] = set()
    pos = 0

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    def expr(depth: int) -> None:
        nonlocal pos
        term(depth)
        while peek() in (("op", "+"), ("op", "-")):
            pos += 1
            term(depth)

    def term(depth: int) -> None:
        nonlocal pos
        unary(depth)
        while peek() in (("op", "*"), ("op", "/")):
            pos += 1
            unary(depth)

    def unary(depth: int) -> None:
        nonlocal pos
        if depth > MAX_PARAMETER_DEPTH:
            raise ValueError(f"parentheses and unary minus nest deeper than {MAX_PARAMETER_DEPTH}")
        token = peek()
        if token is None:
            raise ValueError("it ends where a number, a name or '(' is expected")
        kind, text = token
        pos += 1
        if (kind, text) == ("op", "-"):
            unary(depth + 1)
        elif (kind, text) == ("op", "("):
            expr(depth + 1)
            if peek() != ("op", ")"):
                raise ValueError("a '(' is not closed")
            pos += 1
        elif kind == "number":
            if not math.isfinite(float(text)):
                raise ValueError(f"the number {text} is not finite")
        elif kind == "name":
            if text.lower() in _RESERVED_NAMES:
                raise ValueError(f"{text!r} is reserved by Great Expectations' parser (a constant or a function)")
            names.add(text)
        elif text == "*" and pos >= 2 and tokens[pos - 2] == ("op", "*"):
            raise ValueError("** (a power) is not accepted")
        else:
            raise ValueError(f"{text!r} where a number, a name or '(' is expected")
        if peek() == ("op", "(") and kind != "op":
            raise ValueError(f"{text}(...) is a function call: no function is accepted")
        if peek() is not None and peek()[0] in ("number", "name") and kind != "op":
            raise ValueError(f"{peek()[1]!r} follows {text!r} without an operator")

    expr(0)
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos][1]!r}")
    return names


def parameter_expression_problem(expression: Any) -> str | None:
    """None if ``expression`` (a ``$PARAMETER``'s) is arithmetic this project accepts; else
    what is wrong with it, naming it and what is accepted. Never evaluates anything."""
    if not isinstance(expression, str) or not expression.strip():
        return f"has a $PARAMETER that is not an expression ({_short(expression)}); accepted: {_EXPR_ACCEPTED}"
    if len(expression) > MAX_PARAMETER_LENGTH:
        return (f"has a $PARAMETER expression of {len(expression)} characters ({expression[:60]!r}...): "
                f"at most {MAX_PARAMETER_LENGTH} are accepted")
    try:
        _parse_expression(expression)
    except ValueError as e:
        return f"has a $PARAMETER expression {expression!r} that is refused: {e}; accepted: {_EXPR_ACCEPTED}"
    return None


def _expression_names(expression: Any) -> set[str]:
    if not isinstance(expression, str):
        return set()
    try:
        return _parse_expression(expression)
    except ValueError:  # refused elsewhere; the names it seems to use
        return set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", expression))


# --- specs and settings ----------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectationSpec:
    name: str
    type: str
    kwargs: dict[str, Any]
    severity: str = BLOCKING
    description: str = ""

    @property
    def blocking(self) -> bool:
        return self.severity == BLOCKING

    def columns(self) -> list[str]:
        cols = [self.kwargs[k] for k in _COLUMN_KWARGS if isinstance(self.kwargs.get(k), str)]
        return cols + [c for c in self.kwargs.get("column_list") or [] if isinstance(c, str)]

    def parameters(self) -> set[str]:
        """The names its ``$PARAMETER`` expressions use."""
        names: set[str] = set()
        for value in self.kwargs.values():
            if isinstance(value, Mapping) and "$PARAMETER" in value:
                names.update(_expression_names(value["$PARAMETER"]))
        return names

    def check(self, where: str = "expectation") -> None:
        """ConfigError unless the allow-list accepts it (``check_expectation``)."""
        check_expectation(self.type, self.kwargs, name=self.name, where=where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CheckSettings:
    """A job's data-check settings: on/off, and its expectations (entries merged over the
    runtime's and the body's by name). Every entry is checked against the allow-list when
    parsed (``check_expectation``)."""

    enabled: bool = True
    expectations: tuple[dict[str, Any], ...] = ()

    @classmethod
    def parse(cls, value: Any, where: str = "checks") -> "CheckSettings":
        """From ``None``, a mapping ``{"enabled", "expectations"}``, or a JSON string of one;
        ConfigError naming the bad value (and ``where`` it comes from) otherwise."""
        if value is None or value == "":
            return cls()
        if isinstance(value, CheckSettings):
            return value
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise ConfigError(f"{where} must be a JSON object, got {value[:200]!r}: {e}") from e
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be an object with 'enabled' and 'expectations', got {value!r}")
        unknown = set(value) - _SETTINGS_KEYS
        if unknown:
            raise ConfigError(f"{where} has unknown key(s) {sorted(unknown)}; accepted: {sorted(_SETTINGS_KEYS)}")
        enabled = value.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"{where}.enabled must be true or false, got {enabled!r}")
        entries = value.get("expectations") or []
        if not isinstance(entries, (list, tuple)):
            raise ConfigError(f"{where}.expectations must be a list, got {entries!r}")
        return cls(enabled, tuple(_check_entry(e, f"{where}.expectations[{i}]") for i, e in enumerate(entries)))

    def over(self, base: "CheckSettings") -> "CheckSettings":
        """These settings layered over ``base`` (a DAG's file under a run's param), as they
        are: ``run_settings`` is how a run's untrusted conf is layered."""
        return CheckSettings(self.enabled and base.enabled, base.expectations + self.expectations)

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "expectations": [dict(e) for e in self.expectations]}


def _check_entry(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} must be an object, got {entry!r}")
    unknown = set(entry) - _SPEC_KEYS
    if unknown:
        raise ConfigError(f"{where} has unknown key(s) {sorted(unknown)}; accepted: {sorted(_SPEC_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}.name must be a name of letters, digits and _.-[], got {name!r}")
    if "type" in entry and (not isinstance(entry["type"], str) or not entry["type"].startswith("expect_")):
        raise ConfigError(f"{where} ({name}): type must be a Great Expectations expectation type "
                          f"such as 'expect_column_values_to_be_between', got {entry['type']!r}")
    if "kwargs" in entry and not isinstance(entry["kwargs"], Mapping):
        raise ConfigError(f"{where} ({name}): kwargs must be an object, got {entry['kwargs']!r}")
    if "severity" in entry and entry["severity"] not in SEVERITIES:
        raise ConfigError(f"{where} ({name}): severity must be one of {', '.join(SEVERITIES)} "
                          f"(critical blocks the commit), got {entry['severity']!r}")
    if "enabled" in entry and not isinstance(entry["enabled"], bool):
        raise ConfigError(f"{where} ({name}): enabled must be true or false, got {entry['enabled']!r}")
    if "description" in entry and not isinstance(entry["description"], str):
        raise ConfigError(f"{where} ({name}): description must be a string, got {entry['description']!r}")
    check_expectation(entry.get("type"), entry.get("kwargs"), name=name, where=where, partial=True)
    return dict(entry)


def load_checks_file(path: str) -> dict[str, Any]:
    """A checks file (JSON, the shape of ``CheckSettings``); ConfigError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read checks file {path}: {e}") from e
    except ValueError as e:
        raise ConfigError(f"checks file {path} is not valid JSON: {e}") from e
    CheckSettings.parse(value, where=f"checks file {path}")
    return value


def merge(entries: Iterable[Mapping[str, Any]], *,
          where: str = "the data checks (the runtime's, the body's and the job's, merged by name)"
          ) -> list[ExpectationSpec]:
    """Entries in order; a later entry with an earlier name replaces the keys it gives. Each
    merged expectation is checked against the allow-list (``check_expectation``): a body's
    entries too, and a type from one entry with kwargs from another."""
    merged: dict[str, dict[str, Any]] = {}
    for e in entries:
        name = e["name"]
        merged[name] = {**merged.get(name, {}), **e}
    out = []
    for name, e in merged.items():
        if not e.get("enabled", True):
            continue
        missing = [k for k in ("type", "kwargs") if k not in e]
        if missing:
            raise ConfigError(f"expectation {name!r} has no {' or '.join(missing)}: a new expectation needs "
                              "type and kwargs; an existing one is changed by its name")
        spec = ExpectationSpec(name, e["type"], dict(e["kwargs"]), e.get("severity", BLOCKING),
                               e.get("description", ""))
        spec.check(where)
        out.append(spec)
    return out


# --- who may change what: a run's conf over the DAG author's ----------------------------------


def finite_metric_name(metric: str) -> str:
    """The name of the runtime's expectation that ``metric`` is finite."""
    return f"{metric}_finite"


def schema_stable_name(head: str) -> str:
    """The name of the runtime's expectation that ``head`` keeps its restored schema."""
    return f"{head}_schema_stable"


def locked_expectation_names(body: Mapping[str, Any], author: Any = None) -> dict[str, str]:
    """The expectations a run may not change unless the DAG allows it, name -> whose it is:
    the runtime's (``<metric>_finite`` for each metric, ``<head>_schema_stable`` for each head),
    the body's (``body`` is ``IterationBody.describe()``) and the DAG author's (``author``: its
    checks, anything ``CheckSettings.parse`` takes)."""
    out: dict[str, str] = {}
    for metric in body.get("metric_aggregations") or {}:
        out[finite_metric_name(metric)] = "the runtime's checks"
    for head in body.get("heads") or {}:
        out[schema_stable_name(head)] = "the runtime's checks"
    for e in body.get("expectations") or ():
        if isinstance(e, Mapping) and isinstance(e.get("name"), str):
            out.setdefault(e["name"], f"the body {body.get('name', '?')!r}")
    for e in CheckSettings.parse(author, "the DAG's checks").expectations:
        out.setdefault(e["name"], "the DAG's checks")
    return out


def run_settings(
    run: Any,
    author: Any,
    locked_names: Iterable[str] | Mapping[str, str] = (),
    *,
    run_may_relax: bool = False,
    where: str = "the checks param",
) -> CheckSettings:
    """A run's checks (``run``: its ``checks`` param, untrusted) layered over the DAG author's
    (``author``: the DAG's checks file, a ``CheckSettings`` or anything ``CheckSettings.parse``
    takes), as ``CheckSettings.parse(run).over(author)``, with the run's entries checked against
    the allow-list.

    Unless ``run_may_relax`` (the DAG's author lets runs relax its checks), a run may only add
    expectations: ConfigError if it sets ``"enabled": false``, or gives an entry (changing
    kwargs, severity, description or ``enabled``) named like one of ``locked_names`` or of the
    author's entries. ``locked_names``: the names of the runtime's and the body's expectations,
    best ``locked_expectation_names(body.describe(), author)`` (a mapping name -> whose it is,
    named in the error). With ``run_may_relax`` a run may change or disable anything."""
    settings = CheckSettings.parse(run, where)
    base = CheckSettings.parse(author, "the DAG's checks")
    if run_may_relax:
        return settings.over(base)
    owners = dict(locked_names) if isinstance(locked_names, Mapping) else {n: "" for n in locked_names}
    for e in base.expectations:
        owners.setdefault(e["name"], "the DAG's checks")
    if not settings.enabled:
        raise ConfigError(f'{where}: "enabled": false would turn this DAG\'s data checks off; only the DAG\'s '
                          "author may allow a run to do that (the DAG lets runs relax its checks). A run may "
                          "add expectations with new names")
    for i, e in enumerate(settings.expectations):
        owner = owners.get(e["name"])
        if owner is not None:
            whose = f" (one of {owner})" if owner else ""
            changes = ", ".join(k for k in ("type", "kwargs", "severity", "description", "enabled") if k in e)
            raise ConfigError(
                f"{where}.expectations[{i}] ({e['name']}): a run may not change the expectation {e['name']!r}"
                f"{whose}{' (it gives ' + changes + ')' if changes else ''}: only the DAG's author may allow "
                "runs to change or disable its checks (the DAG lets runs relax its checks). A run may add "
                "expectations with new names")
    return settings.over(base)


# --- the profile -----------------------------------------------------------------------------


def schema_string(schema_json: str) -> str:
    """A Spark StructType JSON as ``name type, name type`` (types in Spark's simple form)."""
    if not schema_json:
        return ""
    return ", ".join(f"{f['name']} {_simple_type(f['type'])}" for f in json.loads(schema_json).get("fields", []))


def _simple_type(t: Any) -> str:
    if isinstance(t, str):
        return {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}.get(t, t)
    if isinstance(t, Mapping):
        if t.get("type") == "array":
            return f"array<{_simple_type(t['elementType'])}>"
        if t.get("type") == "map":
            return f"map<{_simple_type(t['keyType'])},{_simple_type(t['valueType'])}>"
        if t.get("type") == "struct":
            return "struct<" + ",".join(f"{f['name']}:{_simple_type(f['type'])}" for f in t.get("fields", [])) + ">"
    return json.dumps(t)


def combine(reports: Sequence["EpochReport"]) -> dict[str, Any]:
    """One dataset's profile from its partitions' (the reports of one head or output)."""
    rows = 0
    dup = None
    columns: dict[str, dict[str, Any]] = {}
    facts: dict[str, float] = {}
    for r in reports:
        p = r.profile or {}
        rows += int(p.get("rows", r.feedback_count))
        if "duplicate_keys" in p:
            dup = (dup or 0) + int(p["duplicate_keys"])
        facts.update(p.get("facts") or {})
        for name, s in (p.get("columns") or {}).items():
            c = columns.setdefault(name, {"nulls": 0})
            c["nulls"] += int(s.get("nulls", 0))
            for k in ("nonfinite", "sum"):
                if k in s:
                    c[k] = c.get(k, 0) + s[k]
            for k, pick in (("min", min), ("max", max)):
                if s.get(k) is not None:
                    c[k] = s[k] if c.get(k) is None else pick(c[k], s[k])
    schema = next((r.schema for r in reports if r.schema), "")
    for name in _schema_names(schema):  # a column no partition saw (all partitions empty)
        columns.setdefault(name, {"nulls": 0})
    return {"rows": rows, "duplicate_keys": dup, "columns": columns, "facts": facts, "schema": schema}


def _schema_names(schema_json: str) -> list[str]:
    return [f["name"] for f in json.loads(schema_json).get("fields", [])] if schema_json else []


def profile_row(
    *,
    epoch: int,
    kind: str,
    decision: "AlignmentDecision | None",
    datasets: Mapping[str, Sequence["EpochReport"]],
) -> dict[str, Any]:
    """The attempt's profile: one row (see the module docstring)."""
    row: dict[str, Any] = {"epoch": epoch, "kind": kind}
    if decision is not None:
        row["feedback"] = decision.feedback_count
        for name, value in sorted(decision.metrics.items()):
            row[name] = value
            row[f"{name}.nonfinite"] = 0 if math.isfinite(value) else 1
    for name, reports in datasets.items():
        p = combine(reports)
        row[f"{name}.rows"] = p["rows"]
        row[f"{name}.schema"] = schema_string(p["schema"])
        if p["duplicate_keys"] is not None:
            row[f"{name}.duplicate_keys"] = p["duplicate_keys"]
        for col, stats in p["columns"].items():
            for stat in ("nulls", "nonfinite", "min", "max", "sum"):
                if stat in stats or (stat in ("min", "max") and "sum" in stats):
                    row[f"{name}.{col}.{stat}"] = stats.get(stat)
        for fact, value in p["facts"].items():
            row.setdefault(fact, value)
    return row


# --- the suite of an attempt -----------------------------------------------------------------


def runtime_expectations(
    heads: Mapping[str, Sequence[str]],
    metrics: Iterable[str],
    restored_schemas: Mapping[str, str],
) -> list[dict[str, Any]]:
    """What every job checks: metrics finite; a head's schema the one it was restored with.
    (A head's key columns only partition its records: whether they are unique is the body's
    to say, in its own expectations.)"""
    out: list[dict[str, Any]] = []
    for m in sorted(metrics):
        out.append({"name": finite_metric_name(m), "type": "expect_column_values_to_be_between",
                    "kwargs": {"column": f"{m}.nonfinite", "max_value": 0},
                    "description": f"the metric {m} is a finite number"})
    for head in heads:
        if restored_schemas.get(head):
            out.append({"name": schema_stable_name(head), "type": "expect_column_values_to_be_in_set",
                        "kwargs": {"column": f"{head}.schema", "value_set": [restored_schemas[head]]},
                        "description": f"{head} keeps the schema it was restored with"})
    return out


def expand(spec: ExpectationSpec, columns: Sequence[str]) -> list[ExpectationSpec]:
    """An expectation whose ``column`` is a glob, once per matching column."""
    pattern = spec.kwargs.get("column")
    if not isinstance(pattern, str) or not any(ch in pattern for ch in "*?["):
        return [spec]
    return [replace(spec, name=f"{spec.name}[{c}]", kwargs={**spec.kwargs, "column": c})
            for c in columns if fnmatch.fnmatchcase(c, pattern)] or [spec]


# --- which columns a checkpoint's profile can have ---------------------------------------------

_STATS = ("nulls", "nonfinite", "min", "max", "sum")
_NUMERIC_STATS = ("nonfinite", "min", "max", "sum")
#: Column types (as ``schema_string`` writes them) whose nonfinite, min, max and sum the tail
#: computes (``spark_jobs.storeio._Profile``: integer and floating-point columns).
NUMERIC_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double"})


def _is_glob(column: str) -> bool:
    return any(ch in column for ch in "*?[")


def _glob_escape(text: str) -> str:
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in text)


def _glob_tokens(pattern: str) -> list[tuple[str, str]]:
    """``pattern`` as fnmatch reads it: ("lit", char) | ("?", "") | ("*", "") | ("set", "[...]")."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        i += 1
        if ch == "*":
            if not tokens or tokens[-1][0] != "*":
                tokens.append(("*", ""))
        elif ch == "?":
            tokens.append(("?", ""))
        elif ch == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                tokens.append(("lit", "["))
            else:
                tokens.append(("set", pattern[i - 1:j + 1]))
                i = j + 1
        else:
            tokens.append(("lit", ch))
    return tokens


def _glob_closure(tokens: Sequence[tuple[str, str]], state: int) -> list[int]:
    out = [state]
    while state < len(tokens) and tokens[state][0] == "*":  # a star may match nothing
        state += 1
        out.append(state)
    return out


def _glob_step(tokens: Sequence[tuple[str, str]], state: int, ch: str) -> int | None:
    if state >= len(tokens):
        return None
    kind, text = tokens[state]
    if kind == "*":
        return state
    if kind == "?" or (kind == "lit" and text == ch) or (kind == "set" and fnmatch.fnmatchcase(ch, text)):
        return state + 1
    return None


def _globs_overlap(a: str, b: str) -> bool:
    """Whether some column name matches both globs (fnmatch's): the product of their automata,
    over the characters they name plus one they do not."""
    ta, tb = _glob_tokens(a), _glob_tokens(b)
    alphabet = {text for kind, text in ta + tb if kind == "lit"}
    alphabet |= {ch for kind, text in ta + tb if kind == "set" for ch in text} | {"\x00"}
    start = [(i, j) for i in _glob_closure(ta, 0) for j in _glob_closure(tb, 0)]
    seen, todo = set(start), list(start)
    while todo:
        i, j = todo.pop()
        if i == len(ta) and j == len(tb):
            return True
        for ch in alphabet:
            ni, nj = _glob_step(ta, i, ch), _glob_step(tb, j, ch)
            if ni is None or nj is None:
                continue
            for pair in ((x, y) for x in _glob_closure(ta, ni) for y in _glob_closure(tb, nj)):
                if pair not in seen:
                    seen.add(pair)
                    todo.append(pair)
    return False


class _ColumnSpace:
    """The columns the profiles of a body's checkpoints can have (module docstring), from its
    metadata (``IterationBody.describe()``): a dataset's own columns (``C``) are any."""

    def __init__(self, body: Mapping[str, Any]):
        self.body_name = str(body.get("name", "?"))
        heads = body.get("heads") or {}
        self.heads = list(heads)
        self.keyed = [h for h, keys in heads.items() if keys]
        self.epoch_outputs = list(body.get("epoch_outputs") or [])
        self.outputs = list(body.get("outputs") or [])
        self.metrics = sorted(body.get("metric_aggregations") or {})
        self.facts = sorted(body.get("facts") or [])
        self.datasets = list(dict.fromkeys(self.heads + self.epoch_outputs + self.outputs))
        self.literal = ["epoch", "kind", "feedback", *self.metrics, *[f"{m}.nonfinite" for m in self.metrics],
                        *self.facts, *[f"{d}.{x}" for d in self.datasets for x in ("rows", "schema")],
                        *[f"{h}.duplicate_keys" for h in self.keyed]]
        self.templates = [f"{_glob_escape(d)}.?*.{stat}" for d in self.datasets for stat in _STATS]
        self.parameters = [f"previous__{m}" for m in self.metrics]

    def possible(self, column: str) -> bool:
        if not _is_glob(column):
            return column in self.literal or any(fnmatch.fnmatchcase(column, t) for t in self.templates)
        return any(fnmatch.fnmatchcase(c, column) for c in self.literal) or \
            any(_globs_overlap(column, t) for t in self.templates)

    def describe(self) -> str:
        def names(xs: Sequence[str]) -> str:
            return ", ".join(xs) if xs else "none"

        return (f"The profiles of body {self.body_name!r} have the columns epoch, kind, feedback; its metrics "
                f"<metric> and <metric>.nonfinite ({names(self.metrics)}); its facts ({names(self.facts)}); and "
                f"for each dataset D (heads: {names(self.heads)}; epoch outputs: {names(self.epoch_outputs)}; "
                f"outputs: {names(self.outputs)}) D.rows, D.schema, D.duplicate_keys (heads with key columns: "
                f"{names(self.keyed)}), D.<column>.nulls and, for numeric columns, D.<column>.nonfinite, "
                f".min, .max, .sum (a column C may be a glob, e.g. ranks.*.nonfinite)")


def _named_kwargs(specs: Any) -> list[tuple[str, Mapping[str, Any]]]:
    if isinstance(specs, CheckSettings):
        specs = specs.expectations
    out = []
    for s in specs:
        if isinstance(s, ExpectationSpec):
            out.append((s.name, s.kwargs))
        elif isinstance(s, Mapping) and s.get("enabled", True) and isinstance(s.get("kwargs"), Mapping):
            out.append((str(s.get("name", "?")), s["kwargs"]))
    return out


def check_columns(specs: Any, body: Mapping[str, Any], *, where: str = "the job's data checks") -> None:
    """ConfigError, before any Spark work, if an expectation names a column (``column``,
    ``column_A``, ``column_B``, ``column_list``; a glob too) that no checkpoint's profile of
    ``body`` (``IterationBody.describe()``) can have, or a ``$PARAMETER`` name that is not
    ``previous__<metric>``; the error names each such column and the columns there are.
    ``specs``: the job's merged expectations (``merge(...)``), a ``CheckSettings``, or entries.
    A dataset's own columns are not known before its data is seen: any ``D.C.<stat>`` of a
    dataset ``D`` passes here, and ``validate`` refuses a ``C`` that ``D`` does not have."""
    space = _ColumnSpace(body)
    problems = []
    for name, kwargs in _named_kwargs(specs):
        probe = ExpectationSpec(name, "", dict(kwargs))
        bad = [c for c in probe.columns() if not space.possible(c)]
        if bad:
            problems.append(f"expectation {name!r} names {', '.join(map(repr, bad))}, which no checkpoint's "
                            f"profile can have")
        unknown = sorted(p for p in probe.parameters() if p not in space.parameters)
        if unknown:
            problems.append(f"expectation {name!r} uses the parameter(s) {', '.join(unknown)}, which no checkpoint "
                            f"has (parameters: {', '.join(space.parameters) or 'none'}: previous__<metric>)")
    if problems:
        raise ConfigError(f"{where}: {'; '.join(problems)}. {space.describe()}")


def _schema_columns(schema: Any) -> list[tuple[str, str]] | None:
    """(name, type) of each column of a ``schema_string``; None if it cannot be read."""
    if not isinstance(schema, str) or not schema:
        return None
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(schema):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(schema[start:i])
            start = i + 1
    parts.append(schema[start:])
    out = []
    for part in parts:
        name, sep, type_ = part.strip().rpartition(" ")
        if not sep or not name or type_.count("<") != type_.count(">") or type_.count("(") != type_.count(")"):
            return None
        out.append((name, type_))
    return out


class _ProfileLayout:
    """What a profile says about the datasets it covers (those with a ``D.schema``), to tell a
    column that is legitimately absent (skipped) from one that cannot be there (ConfigError)."""

    def __init__(self, profile: Mapping[str, Any], specs: Sequence[ExpectationSpec], kind: str):
        self.profile = profile
        self.kind = kind
        self.datasets = {k[:-len(".schema")]: _schema_columns(v) for k, v in profile.items()
                         if k.endswith(".schema") and isinstance(v, str)}
        # schemas an expectation pins a dataset to (the runtime's <head>_schema_stable): a column
        # of a pinned schema missing from the data is the data's fault, not the configuration's
        self.pinned: dict[str, list[list[tuple[str, str]]]] = {}
        for s in specs:
            column = s.kwargs.get("column")
            if s.type == "expect_column_values_to_be_in_set" and isinstance(column, str) \
                    and column.endswith(".schema") and column[:-len(".schema")] in self.datasets:
                for v in s.kwargs.get("value_set") or []:
                    cols = _schema_columns(v)
                    if cols is not None:
                        self.pinned.setdefault(column[:-len(".schema")], []).append(cols)

    def dataset_of(self, text: str) -> str | None:
        found = [d for d in self.datasets if text.startswith(d + ".")]
        return max(found, key=len) if found else None

    @staticmethod
    def potential(dataset: str, columns: Sequence[tuple[str, str]]) -> list[str]:
        out = [f"{dataset}.rows", f"{dataset}.schema"]
        for c, t in columns:
            out += [f"{dataset}.{c}.{s}" for s in (_STATS if t in NUMERIC_TYPES else ("nulls",))]
        return out

    def _schema(self, dataset: str) -> str:
        return str(self.profile.get(f"{dataset}.schema")) or "none"

    def absent(self, name: str, column: str) -> tuple[str, str]:
        """Why ``column`` (of expectation ``name``) is not in the profile: ("skipped", note),
        ("failed", note) when the data lost a column its pinned schema has, or ("error",
        message) when the column cannot be there although its dataset is."""
        skipped = ("skipped", f"the attempt has no column {column}")
        dataset = self.dataset_of(column)
        columns = self.datasets.get(dataset) if dataset is not None else None
        if dataset is None or columns is None:
            return skipped  # a column of the other kind of checkpoint, a metric, a fact
        rest = column[len(dataset) + 1:]
        if rest == "duplicate_keys":
            return "skipped", f"{dataset} has no key columns in this {self.kind} checkpoint"
        col, dot, stat = rest.rpartition(".")
        if not dot or not col or stat not in _STATS:
            return skipped
        types = dict(columns)
        if col in types and (stat == "nulls" or types[col] in NUMERIC_TYPES):
            return "skipped", f"{dataset} has no records: no {stat} of {col}"
        if any(col in dict(p) and (stat == "nulls" or dict(p)[col] in NUMERIC_TYPES)
               for p in self.pinned.get(dataset, [])):
            return "failed", (f"no column {column}: {dataset} no longer has the numeric column {col} of the "
                              f"schema it is pinned to; its schema is {self._schema(dataset)}")
        if col not in types:
            return "error", (f"expectation {name!r} names column {column!r}, but dataset {dataset} (in this "
                             f"{self.kind} checkpoint) has no column {col!r}; its columns: {self._schema(dataset)}")
        numeric = [c for c, t in columns if t in NUMERIC_TYPES]
        return "error", (f"expectation {name!r} names column {column!r}, but {dataset}.{col} is {types[col]}: "
                         f"{', '.join(_NUMERIC_STATS)} exist only for numeric (integer or floating-point) columns; "
                         f"{dataset}'s numeric columns: {', '.join(numeric) or 'none'} "
                         f"(schema {self._schema(dataset)})")

    def unmatched(self, name: str, pattern: str) -> tuple[str, str]:
        """Why glob ``pattern`` matches nothing in the profile (as ``absent``)."""
        skipped = ("skipped", f"no column of the attempt matches {pattern}")
        prefix = pattern[:min([pattern.index(ch) for ch in "*?[" if ch in pattern] or [len(pattern)])]
        dataset = self.dataset_of(prefix)
        columns = self.datasets.get(dataset) if dataset is not None else None
        if dataset is None or columns is None:
            return skipped
        if any(fnmatch.fnmatchcase(c, pattern) for c in self.potential(dataset, columns)):
            return "skipped", f"{dataset} has no records: no column matches {pattern}"
        pinned = [c for p in self.pinned.get(dataset, []) for c in self.potential(dataset, p)]
        if any(fnmatch.fnmatchcase(c, pattern) for c in pinned):
            return "failed", (f"no column matches {pattern}: {dataset} no longer has the columns of the schema "
                              f"it is pinned to; its schema is {self._schema(dataset)}")
        return "error", (f"expectation {name!r} names the glob {pattern!r}, which matches no column of dataset "
                         f"{dataset} (in this {self.kind} checkpoint); its columns: {self._schema(dataset)} "
                         f"(with D.<column>.nulls, and .nonfinite, .min, .max, .sum of numeric columns)")


# --- validation ------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    type: str
    severity: str
    status: str  # "passed" | "failed" | "skipped" | "error"
    description: str = ""
    observed: dict[str, Any] = field(default_factory=dict)  # the profile columns it read
    expected: str = ""
    note: str = ""

    @property
    def blocking_failure(self) -> bool:
        return self.status in ("failed", "error") and self.severity == BLOCKING

    def line(self) -> str:
        observed = ", ".join(f"{k}={_fmt(v)}" for k, v in self.observed.items()) or "-"
        text = f"{self.status.upper():7} {self.name} [{self.severity}] {self.type}: observed {observed}"
        if self.expected:
            text += f"; expected {self.expected}"
        if self.note:
            text += f" ({self.note})"
        if self.description:
            text += f" -- {self.description}"
        return text


@dataclass
class CheckReport:
    job_id: str
    checkpoint_id: int
    attempt_id: str
    kind: str
    outcomes: list[Outcome]
    profile: dict[str, Any]
    parameters: dict[str, Any]
    seconds: float = 0.0
    locations: dict[str, str] = field(default_factory=dict)  # "json" / "html" -> where they are kept

    @property
    def blocking(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.blocking_failure]

    @property
    def warnings(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in ("failed", "error") and not o.blocking_failure]

    @property
    def success(self) -> bool:
        return not self.blocking

    def counts(self) -> dict[str, int]:
        out = {"passed": 0, "failed": 0, "warned": 0, "skipped": 0}
        for o in self.outcomes:
            if o.status == "passed":
                out["passed"] += 1
            elif o.status == "skipped":
                out["skipped"] += 1
            elif o.blocking_failure:
                out["failed"] += 1
            else:
                out["warned"] += 1
        return out

    def headline(self) -> str:
        c = self.counts()
        what = "final checkpoint" if self.kind == "final" else f"epoch {self.checkpoint_id}"
        return (f"data checks of {what} (job {self.job_id}, attempt {self.attempt_id}): "
                f"{c['passed']} passed, {c['failed']} failed (blocking), {c['warned']} warning(s), "
                f"{c['skipped']} skipped, {self.seconds:.2f}s")

    def summary(self) -> str:
        """The headline, then one line per failure and warning, then where the report is."""
        lines = [self.headline()]
        lines += ["  " + o.line() for o in self.blocking + self.warnings]
        if self.locations:
            lines.append("  report: " + ", ".join(f"{k} {v}" for k, v in sorted(self.locations.items())))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "checkpoint_id": self.checkpoint_id, "attempt_id": self.attempt_id,
            "kind": self.kind, "success": self.success, "counts": self.counts(), "seconds": self.seconds,
            "outcomes": [asdict(o) for o in self.outcomes], "profile": _jsonable(self.profile),
            "parameters": _jsonable(self.parameters),
        }


def validate(
    specs: Sequence[ExpectationSpec],
    profile: Mapping[str, Any],
    parameters: Mapping[str, Any],
    *,
    job_id: str,
    checkpoint_id: int,
    attempt_id: str,
    kind: str,
    html: bool = True,
) -> tuple[CheckReport, dict[str, Any] | None, str | None]:
    """Validate ``profile`` with ``specs``: (report, Great Expectations' validation result as
    JSON or None when no expectation applied, its Data Docs page as HTML when an expectation
    failed or warned, else None: rendering costs more than validating, and a page of passes is
    rarely read)."""
    started = time.perf_counter()
    what = "the final checkpoint" if kind == "final" else f"epoch {checkpoint_id}"
    for spec in specs:  # whoever made them: the allow-list holds here too
        spec.check(f"the data checks of {what}")
    columns = list(profile)
    layout = _ProfileLayout(profile, specs, kind)
    outcomes: list[Outcome] = []
    runnable: list[ExpectationSpec] = []
    errors: list[str] = []

    def absent(spec: ExpectationSpec, status: str, note: str) -> None:
        if status == "error":
            errors.append(note)
        else:
            observed = {c: profile.get(c) for c in spec.columns()} if status == "failed" else {}
            outcomes.append(Outcome(spec.name, spec.type, spec.severity, status, spec.description, observed, note=note))

    for spec in specs:
        pattern = spec.kwargs.get("column")
        expanded = expand(spec, columns)
        if isinstance(pattern, str) and _is_glob(pattern) and expanded == [spec]:  # it matches nothing
            absent(spec, *layout.unmatched(spec.name, pattern))
            continue
        for one in expanded:
            missing_cols = [c for c in one.columns() if c not in profile]
            missing_params = sorted(one.parameters() - set(parameters))
            if missing_cols:
                why = [layout.absent(one.name, c) for c in missing_cols]
                worst = next((w for w in why if w[0] == "error"), None) or \
                    next((w for w in why if w[0] == "failed"), None) or why[0]
                absent(one, *worst)
            elif missing_params:
                absent(one, "skipped", f"no value for parameter {', '.join(missing_params)} (no parent checkpoint)")
            else:
                runnable.append(one)
    if errors:
        raise ConfigError(f"the data checks of {what} (job {job_id}) name columns it cannot have: "
                          + "; ".join(errors))
    gx_json = page = None
    if runnable:
        results, gx_json, rendered = _run_gx(runnable, profile, parameters, html)
        for spec, result in zip(runnable, results):
            outcomes.append(_outcome(spec, result, profile))
        if html and any(o.status in ("failed", "error") for o in outcomes):
            page = rendered()
    report = CheckReport(job_id, checkpoint_id, attempt_id, kind, outcomes, dict(profile), dict(parameters))
    report.seconds = time.perf_counter() - started
    return report, gx_json, page


_GX: dict[str, Any] = {}
_GX_LOCK = threading.RLock()


def _gx():
    """(great_expectations, an ephemeral context with a pandas data source, its batch
    definition), made once per process, quietly (no analytics, no progress bars)."""
    with _GX_LOCK:
        if not _GX:
            _make_gx()
    return _GX["gx"], _GX["ctx"], _GX["batch"]


_WARMING: list[threading.Thread] = []

#: How much the warm-up thread lowers its priority: the import takes whatever CPU the epoch's
#: Spark work leaves (on a machine shared with the Spark driver or a local Connect server it
#: would otherwise slow the epoch down about as much as it saves).
WARM_UP_NICENESS = 10


def yield_cpu(niceness: int = WARM_UP_NICENESS) -> None:
    """Lower the calling thread's CPU priority by ``niceness`` (Linux: niceness is per thread;
    at most 19); elsewhere, or if refused, nothing."""
    try:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + niceness))
    except (AttributeError, OSError):
        pass


def warm_up() -> None:
    """Make Great Expectations' context in a background thread: importing it takes seconds,
    which then overlap with the Spark work of the first epoch instead of delaying its commit.
    The first validation waits for it (the lock) if it is not ready; a failure here is left
    for that validation to raise."""
    def make() -> None:
        yield_cpu()
        try:
            _gx()
        except Exception:  # raised again, with its context, by the validation that needs it
            pass

    with _GX_LOCK:
        if _GX or _WARMING:
            return
        thread = threading.Thread(target=make, name="great-expectations-warm-up", daemon=True)
        _WARMING.append(thread)
    thread.start()


def import_gx() -> Any:
    """Import Great Expectations quietly (no analytics, its INFO logging off): the one way this
    project imports it, also used to preload it in a process that forks task processes
    (``include.preload``)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig  # noqa: F401

    for name in ("great_expectations", "great_expectations.data_context.types.base"):  # the latter sets INFO itself
        logging.getLogger(name).setLevel(logging.WARNING)
    return gx


def _make_gx() -> None:
    started = time.perf_counter()
    preloaded = "great_expectations" in sys.modules
    gx = import_gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = ctx.data_sources.add_pandas("iterations").add_dataframe_asset("profile") \
        .add_batch_definition_whole_dataframe("attempt")
    _GX.update(gx=gx, ctx=ctx, batch=batch)
    log.info("Great Expectations ready in %.2f s (%s)", time.perf_counter() - started,
             "its modules were preloaded" if preloaded else "imported by this process")


_SUITES: "dict[str, Any]" = {}  # the specs' JSON -> their Great Expectations suite, built once
_MAX_SUITES = 64


def _suite(gx: Any, specs: Sequence[ExpectationSpec]) -> Any:
    """The suite of ``specs``, built once per process and kept (an epoch's suite is usually its
    predecessor's: only the parameters change, and they are given to each validation)."""
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    key = json.dumps([asdict(s) for s in specs], sort_keys=True, default=str)
    with _GX_LOCK:
        suite = _SUITES.get(key)
    if suite is not None:
        return suite
    suite = gx.ExpectationSuite(name="iterations_checks")
    for spec in specs:
        try:
            expectation = ExpectationConfiguration(
                type=spec.type, kwargs=dict(spec.kwargs), meta={"name": spec.name},
                description=spec.description or None, severity=spec.severity,
            ).to_domain_obj()
        except Exception as e:  # an unknown type or bad kwargs: the user's configuration
            raise ConfigError(f"expectation {spec.name!r} ({spec.type} {spec.kwargs}) is not a valid "
                              f"Great Expectations expectation: {e}") from e
        suite.add_expectation(expectation)
    with _GX_LOCK:
        if len(_SUITES) >= _MAX_SUITES:
            _SUITES.pop(next(iter(_SUITES)))
        return _SUITES.setdefault(key, suite)


def _run_gx(specs: Sequence[ExpectationSpec], profile: Mapping[str, Any], parameters: Mapping[str, Any],
            html: bool) -> tuple[list[Any], dict[str, Any], Any]:
    """Validate the one-row profile with Great Expectations (``Batch.validate``: nothing is kept
    in the context between validations). Pass/fail first, with ``BOOLEAN_ONLY`` results: that
    is all a passing attempt needs (the observed values are the profile's own), and it costs
    half as much as ``SUMMARY``. When an expectation fails (or raises), the same validation runs
    again with ``SUMMARY`` results, the detail the kept JSON and the Data Docs page show."""
    import pandas as pd

    gx, _ctx, batch_definition = _gx()
    suite = _suite(gx, specs)
    frame = pd.DataFrame([{k: (math.nan if v is None else v) for k, v in profile.items()}])

    def run(result_format: str) -> Any:
        with _GX_LOCK:  # one validation at a time in the shared context
            batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
            return batch.validate(suite, result_format=result_format, expectation_parameters=dict(parameters))

    result = run("BOOLEAN_ONLY")
    if not result.success:
        result = run("SUMMARY")
    _plain_numbers(result)
    by_name = {r.expectation_config.meta.get("name"): r for r in result.results}
    ordered = [by_name.get(s.name) for s in specs]

    def render() -> str:
        from great_expectations.render.renderer import ValidationResultsPageRenderer
        from great_expectations.render.view import DefaultJinjaPageView

        return DefaultJinjaPageView().render(ValidationResultsPageRenderer().render(result))

    return ordered, _jsonable(result.to_json_dict()), render


def _plain_numbers(result: Any) -> None:
    """numpy scalars in results -> Python numbers (Data Docs' renderer refuses numpy 2 reprs)."""
    for r in result.results:
        r.result = _jsonable(r.result or {})


def _outcome(spec: ExpectationSpec, result: Any, profile: Mapping[str, Any]) -> Outcome:
    observed = {c: profile.get(c) for c in spec.columns()}
    if result is None:
        return Outcome(spec.name, spec.type, spec.severity, "error", spec.description, observed,
                       note="no result from Great Expectations")
    kwargs = dict(result.expectation_config.kwargs)  # parameters substituted
    exc = result.exception_info or {}
    if isinstance(exc, Mapping) and exc.get("raised_exception"):
        return Outcome(spec.name, spec.type, spec.severity, "error", spec.description, observed,
                       _expected(kwargs, spec.type), note=str(exc.get("exception_message"))[:500])
    status = "passed" if result.success else "failed"
    return Outcome(spec.name, spec.type, spec.severity, status, spec.description, observed,
                   _expected(kwargs, spec.type))


def _expected(kwargs: Mapping[str, Any], type_: str = "") -> str:
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    if low is not None or high is not None:
        if low is not None and high is not None:
            return f"between {_fmt(low)} and {_fmt(high)}"
        return f">= {_fmt(low)}" if low is not None else f"<= {_fmt(high)}"
    if "value_set" in kwargs:
        return f"{'not in' if 'not_be_in_set' in type_ else 'in'} {kwargs['value_set']!r}"
    if "column_A" in kwargs and "column_B" in kwargs:
        op = (">=" if kwargs.get("or_equal") else ">") if "greater_than" in type_ else "=="
        return f"{kwargs['column_A']} {op} {kwargs['column_B']}"
    if type_ == "expect_column_values_to_be_null":
        return "null"
    if type_ == "expect_column_values_to_not_be_null":
        return "not null"
    if "value" in kwargs:
        return f"== {_fmt(kwargs['value'])}"
    rest = {k: v for k, v in kwargs.items() if k not in ("column", "batch_id", "result_format")}
    return json.dumps(_jsonable(rest), sort_keys=True) if rest else ""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.10g}"
    return repr(v) if isinstance(v, str) else str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and type(v).__module__ == "numpy":
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


__all__ = [
    "BLOCKING",
    "CheckReport",
    "CheckSettings",
    "EXPECTATION_KWARGS",
    "EXPECTATION_TYPES",
    "ExpectationSpec",
    "MAX_PARAMETER_LENGTH",
    "NUMERIC_TYPES",
    "Outcome",
    "SEVERITIES",
    "check_columns",
    "check_expectation",
    "combine",
    "expand",
    "finite_metric_name",
    "load_checks_file",
    "locked_expectation_names",
    "merge",
    "parameter_expression_problem",
    "profile_row",
    "run_settings",
    "runtime_expectations",
    "schema_stable_name",
    "schema_string",
    "validate",
]
