"""The profile of an attempt: one row combining the per-partition reports of what it wrote,
and the runtime's own expectations over it."""

from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from include.checks.specs import ExpectationSpec, finite_metric_name, schema_stable_name

if TYPE_CHECKING:
    from include.checkpoints.head_state import AlignmentDecision, EpochReport

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
