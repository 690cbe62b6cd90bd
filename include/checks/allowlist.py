"""What an expectation may say: the allow-list of expectation types and the kwargs each
takes (``EXPECTATION_TYPES``), and the arithmetic a bound's ``$PARAMETER`` may use."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from include.errors import ConfigError

SEVERITIES = ("critical", "warning", "info")  # great_expectations' FailureSeverity values
BLOCKING = "critical"
SPEC_KEYS = {"name", "type", "kwargs", "severity", "description", "enabled"}
SETTINGS_KEYS = {"enabled", "expectations"}
EXPECTATION_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-\[\]]{0,199}$")
COLUMN_KWARGS = ("column", "column_A", "column_B")


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


def is_glob(column: str) -> bool:
    return any(ch in column for ch in "*?[")


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
    if problem is None and is_glob(v):
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


def expression_names(expression: Any) -> set[str]:
    if not isinstance(expression, str):
        return set()
    try:
        return _parse_expression(expression)
    except ValueError:  # refused elsewhere; the names it seems to use
        return set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", expression))


# --- specs and settings ----------------------------------------------------------------------
