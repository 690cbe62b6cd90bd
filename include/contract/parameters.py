"""A setting declared once: its default, its JSON Schema and a description. The same declaration
checks a value in Python (a ConfigError naming the setting, what it accepts and the value) and
becomes a DAG param's schema, so that the trigger form and the runtime accept the same values.
Used for bodies' parameters (declared as the fields of a body's parameters dataclass with
``param``) and a job's bounded settings (``include.contract.config.SETTINGS``)."""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from include.errors import ConfigError

_SCHEMA_KEYS = frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                          "minItems", "items", "enum"})
_TYPES = ("null", "boolean", "integer", "number", "string", "array")


@dataclass(frozen=True)
class Parameter:
    """A body parameter, declared once: its default, its JSON Schema (draft 7; the keys in
    ``_SCHEMA_KEYS``) and a description. The body checks every value with it
    (``IterationBody.parse_params``: a ConfigError naming the parameter, what it accepts and the
    value), and the DAG factory makes the trigger form's param of it
    (``iterations.dag_factory.body_params``)."""

    name: str
    default: Any
    description: str
    schema: Mapping[str, Any]

    def __post_init__(self) -> None:
        for where, schema in (("schema", self.schema), ("items", self.schema.get("items", _ITEMS))):
            if not isinstance(schema, Mapping):
                raise TypeError(f"parameter {self.name!r}: {where} must be a JSON Schema object, got {schema!r}")
            unknown = set(schema) - _SCHEMA_KEYS
            types = _types(schema)
            scalar = where == "schema" or not set(types) & {"array", "null"}
            if unknown or not types or set(types) - set(_TYPES) or not scalar:
                raise TypeError(f"parameter {self.name!r}: {where} keys {sorted(unknown)} / types {types} are not "
                                f"supported (keys: {sorted(_SCHEMA_KEYS)}; types: {_TYPES}; items: one scalar "
                                "type)")
        self.check(self.default)  # a default its own schema refuses is a mistake in the body

    def types(self) -> list[str]:
        return _types(self.schema)

    def accepts(self) -> str:
        """What the parameter accepts, in words: ``a number in (0, 1)``."""
        return _describe(self.schema)

    def check(self, value: Any) -> Any:
        """``value`` if the schema accepts it (a list as a tuple), else a ConfigError."""
        ok = _accept_any(self.schema, value)
        if ok is not _REFUSED:
            return ok
        raise ConfigError(f"{self.name} must be {self.accepts()}, got {value!r}")

    def json_schema(self) -> dict[str, Any]:
        """The schema for a DAG param: an array's items spelled out (non-empty strings unless
        the parameter says otherwise), as Airflow's trigger form shows them."""
        out = dict(self.schema)
        if "array" in self.types():
            out["items"] = dict(self.schema.get("items", _ITEMS))
        return out


def _types(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    return [t] if isinstance(t, str) else list(t or [])


def _accept(s: Mapping[str, Any], t: str, v: Any) -> Any:
    """``v`` as type ``t`` of schema ``s`` accepts it, else _REFUSED."""
    if t == "null":
        return v if v is None else _REFUSED
    if t == "boolean":
        return v if isinstance(v, bool) else _REFUSED
    if t in ("integer", "number"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            return _REFUSED
        if t == "integer":  # as JSON Schema has it: 2.0 is an integer (and is taken as 2)
            if isinstance(v, float) and not v.is_integer():
                return _REFUSED
            v = int(v)
        bounds = (("minimum", lambda b: v >= b), ("maximum", lambda b: v <= b),
                  ("exclusiveMinimum", lambda b: v > b), ("exclusiveMaximum", lambda b: v < b))
        return v if all(k not in s or ok(s[k]) for k, ok in bounds) else _REFUSED
    if t == "string":
        if not isinstance(v, str) or len(v) < s.get("minLength", 0) or ("enum" in s and v not in s["enum"]):
            return _REFUSED
        return v
    if t == "array":
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)) or len(v) < s.get("minItems", 0):
            return _REFUSED
        items = s.get("items", _ITEMS)
        out = tuple(_accept_any(items, x) for x in v)
        return _REFUSED if any(x is _REFUSED for x in out) else out
    return _REFUSED


def _accept_any(s: Mapping[str, Any], v: Any) -> Any:
    """``v`` as the first of schema ``s``'s types that accepts it, else _REFUSED."""
    for t in _types(s):
        got = _accept(s, t, v)
        if got is not _REFUSED:
            return got
    return _REFUSED


def _describe(s: Mapping[str, Any], plural: bool = False) -> str:
    """What schema ``s`` accepts, in words (``plural``: as a list's items)."""
    parts = []
    for t in _types(s):
        if t in ("integer", "number"):
            low = ("(", s["exclusiveMinimum"]) if "exclusiveMinimum" in s else ("[", s.get("minimum"))
            high = (")", s["exclusiveMaximum"]) if "exclusiveMaximum" in s else ("]", s.get("maximum"))
            what = ("integers" if plural else "an integer") if t == "integer" else ("numbers" if plural else "a number")
            if low[1] is not None and high[1] is not None:
                what += f" in {low[0]}{low[1]}, {high[1]}{high[0]}"
            elif low[1] is not None:
                what += f" {'>' if low[0] == '(' else '>='} {low[1]}"
            elif high[1] is not None:
                what += f" {'<' if high[0] == ')' else '<='} {high[1]}"
            parts.append(what)
        elif t == "string":
            empty = s.get("minLength", 0) > 0
            parts.append(f"one of {s['enum']}" if "enum" in s else
                         ("non-empty strings" if empty else "strings") if plural else
                         ("a non-empty string" if empty else "a string"))
        elif t == "array":
            n = s.get("minItems", 0)
            parts.append(f"a list of {'at least ' + str(n) + ' ' if n > 1 else 'one or more ' if n else ''}"
                         f"{_describe(s.get('items', _ITEMS), plural=True)}")
        else:
            parts.append(("true or false" if t == "boolean" else "null"))
    return " or ".join(parts)

_FIELD_KEY = "iterations.parameter"


def param(default: Any, description: str, **schema: Any) -> Any:
    """A body parameter declared as a field of the body's parameters dataclass
    (``IterationBody.params_type``)::

        @dataclass(frozen=True)
        class MyParams:
            damping: float = param(0.85, "Probability of following a link.",
                                   type="number", exclusiveMinimum=0, exclusiveMaximum=1)

    The same declaration checks each value (``Parameter``) and makes the DAG's param and its
    trigger form (iterations.dag_factory.body_params). A list default is kept as a tuple."""
    import dataclasses

    if isinstance(default, list):
        default = tuple(default)
    return dataclasses.field(default=default, metadata={_FIELD_KEY: (description, dict(schema))})


def parameters_of(params_type: Any) -> tuple[Parameter, ...]:
    """The parameters a dataclass declares with ``param`` fields, in field order (a field
    without ``param`` is not a parameter: TypeError, so that nothing is taken unchecked)."""
    import dataclasses

    if not dataclasses.is_dataclass(params_type):
        return ()
    out = []
    for f in dataclasses.fields(params_type):
        if _FIELD_KEY not in f.metadata:
            raise TypeError(f"{params_type.__name__}.{f.name} is not declared with include.contract.parameters.param(): "
                            "give it a default, a description and its schema")
        description, schema = f.metadata[_FIELD_KEY]
        out.append(Parameter(f.name, f.default, description, schema))
    return tuple(out)


_REFUSED = object()
_ITEMS: Mapping[str, Any] = {"type": "string", "minLength": 1}  # an array's items unless declared


__all__ = ["Parameter", "param", "parameters_of"]


#: why a DAG may have no param of these names (a run conf that sets one is told so)
ABSENT_PARAMS = {
    "take_over": "this DAG does not allow a run to take a job over (its author sets allow_take_over)",
    "recompute": "only a scheduled DAG's runs recompute a date",
    "batch_date": "only a scheduled DAG's runs have a batch date",
}


#: The one conf key besides a DAG's params: the OpenLineage provider's parent-run information,
#: which a triggering task (the continuation) adds so that lineage links the runs. Lineage
#: metadata only, never read by the job; its shape is checked (``check_lineage_conf``), and
#: whom it names (``check_lineage_parent``).
LINEAGE_KEY = "openlineage"
LINEAGE_FIELDS = ("parentRunId", "parentJobName", "parentJobNamespace", "rootParentRunId", "rootParentJobName",
                  "rootParentJobNamespace")
#: the DAG param that carries its author's ``lineage_parents`` (a hidden, constant param: a run
#: cannot change it), for the API server to read with the DAG
LINEAGE_PARENTS_PARAM = "lineage_parents"
#: (run id, namespace, job name) fields of the parent and of the root parent
_LINEAGE_RUNS = {"parent": ("parentRunId", "parentJobNamespace", "parentJobName"),
                 "root parent": ("rootParentRunId", "rootParentJobNamespace", "rootParentJobName")}
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]{1,1000}")


def check_lineage_conf(value: Any) -> None:
    """ConfigError unless ``value`` is the provider's parent-run information: an object of
    those fields, each a printable string of at most 1,000 characters; the parent's run id,
    namespace and job name all three or none (the same for the root parent, which needs a
    parent); run ids UUIDs (as the provider reads them)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{LINEAGE_KEY}: OpenLineage parent-run information must be an object, got {value!r:.100}")
    extra = sorted(str(k) for k in value if k not in LINEAGE_FIELDS)
    if extra:
        raise ConfigError(f"{LINEAGE_KEY}: unknown field(s) {extra[:5]}; it may hold {', '.join(LINEAGE_FIELDS)}")
    bad = sorted(k for k, v in value.items() if not isinstance(v, str) or not _PRINTABLE.fullmatch(v))
    if bad:
        raise ConfigError(f"{LINEAGE_KEY}: {bad[0]} must be a printable string of 1 to 1,000 characters, "
                          f"got {value[bad[0]]!r:.100}")
    for which, fields in _LINEAGE_RUNS.items():
        given = [f for f in fields if f in value]
        if given and len(given) != len(fields):
            raise ConfigError(f"{LINEAGE_KEY}: the {which} needs {', '.join(fields)} together, got only "
                              f"{', '.join(given)}")
        if given and not _UUID.fullmatch(value[fields[0]]):
            raise ConfigError(f"{LINEAGE_KEY}: {fields[0]} must be an OpenLineage run id (a UUID), "
                              f"got {value[fields[0]]!r:.100}")
    if "rootParentRunId" in value and "parentRunId" not in value:
        raise ConfigError(f"{LINEAGE_KEY}: a root parent without a parent ({', '.join(_LINEAGE_RUNS['parent'])})")


def check_lineage_parents(allowed: Any, where: str = "lineage_parents") -> list[list[str]]:
    """A DAG author's ``lineage_parents``, checked: (OpenLineage namespace, job name pattern)
    pairs, the pattern ``fnmatch``'s (``nightly.*``); ConfigError naming the bad entry."""
    if isinstance(allowed, (str, bytes)) or not isinstance(allowed, (list, tuple)):
        raise ConfigError(f"{where} must be a list of (namespace, job name pattern) pairs, got {allowed!r:.100}")
    out = []
    for entry in allowed:
        if isinstance(entry, (str, bytes)) or not isinstance(entry, (list, tuple)) or len(entry) != 2 or not all(
                isinstance(part, str) and _PRINTABLE.fullmatch(part) for part in entry):
            raise ConfigError(f"{where}: {entry!r:.100} is not a (namespace, job name pattern) pair of strings")
        out.append([entry[0], entry[1]])
    return out


def check_lineage_parent(value: Mapping[str, Any], own_jobs: Any, *, namespace: str | None = None,
                         allowed: Any = ()) -> None:
    """ConfigError, naming the job, unless the parent and the root parent that ``value`` (the
    shape-checked ``openlineage`` entry of a run's conf) names are ones a run of this DAG may
    claim: the DAG itself or one of its tasks (``own_jobs``: the DAG id and ``<dag_id>.<task_id>``
    of each task; what a continuation sets), in the deployment's OpenLineage namespace
    ``namespace`` (None: not known, not checked); or a job its author allows (``allowed``:
    ``check_lineage_parents``' pairs). A run names no other job as its parent: lineage would
    show it as started by a job that did not start it."""
    own = set(own_jobs)
    pairs = check_lineage_parents(allowed)
    for which, (_, ns_field, name_field) in _LINEAGE_RUNS.items():
        if name_field not in value:
            continue
        ns, job = value[ns_field], value[name_field]
        if job in own and (namespace is None or ns == namespace):
            continue
        if any(ns == a_ns and fnmatch.fnmatchcase(job, pattern) for a_ns, pattern in pairs):
            continue
        mine = f"this DAG's own runs and tasks{'' if namespace is None else f' in namespace {namespace!r}'}"
        raise ConfigError(
            f"{LINEAGE_KEY}: {name_field} {job!r} in namespace {ns!r} is not a {which} a run of this DAG may name: "
            f"only {mine} (what a continuation sets)"
            + (f", or {', '.join(f'{p!r} in {n!r}' for n, p in pairs)} (its author's lineage_parents)" if pairs
               else "; its author allows others with iteration_dag(lineage_parents=...)"))


def check_conf_keys(given: Mapping[str, Any] | Any, declared: Any, what: str = "run conf") -> None:
    """ConfigError if ``given`` (a run's conf, or its params merged with it) has a key that is
    not in ``declared`` (the DAG's params), naming the key and the nearest declared one: a
    misspelt setting (``tolerence``) must not be silently ignored. ``openlineage``
    (``LINEAGE_KEY``) is accepted when well formed."""
    import difflib

    if LINEAGE_KEY in given and LINEAGE_KEY not in declared:
        check_lineage_conf(given[LINEAGE_KEY])
    known = sorted(declared)
    unknown = sorted(k for k in given if k not in declared and k != LINEAGE_KEY)
    if not unknown:
        return
    absent = [k for k in unknown if k in ABSENT_PARAMS]
    if absent:
        raise ConfigError(f"{absent[0]}: {ABSENT_PARAMS[absent[0]]}")
    hints = []
    for key in unknown:
        near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
        hints.append(f"{key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    raise ConfigError(f"unknown {what} key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}: the DAG has no such "
                      f"param, and a run conf may set only its params ({', '.join(known)})")
