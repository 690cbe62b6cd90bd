"""A setting declared once: its default, its JSON Schema and a description. The same declaration
checks a value in Python (a ConfigError naming the setting, what it accepts and the value) and
becomes a DAG param's schema, so that the trigger form and the runtime accept the same values.
Used for bodies' parameters (``IterationBody.parameters``) and a job's bounded settings
(``include.config.SETTINGS``)."""

from __future__ import annotations

import math
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
        unknown = set(self.schema) - _SCHEMA_KEYS
        types = self.types()
        if unknown or not types or set(types) - set(_TYPES):
            raise TypeError(f"parameter {self.name!r}: schema keys {sorted(unknown)} / types {types} are not "
                            f"supported (keys: {sorted(_SCHEMA_KEYS)}; types: {_TYPES})")
        self.check(self.default)  # a default its own schema refuses is a mistake in the body

    def types(self) -> list[str]:
        t = self.schema.get("type")
        return [t] if isinstance(t, str) else list(t or [])

    def accepts(self) -> str:
        """What the parameter accepts, in words: ``a number in (0, 1)``."""
        s, parts = self.schema, []
        for t in self.types():
            if t in ("integer", "number"):
                low = ("(", s["exclusiveMinimum"]) if "exclusiveMinimum" in s else ("[", s.get("minimum"))
                high = (")", s["exclusiveMaximum"]) if "exclusiveMaximum" in s else ("]", s.get("maximum"))
                what = "an integer" if t == "integer" else "a number"
                if low[1] is not None and high[1] is not None:
                    what += f" in {low[0]}{low[1]}, {high[1]}{high[0]}"
                elif low[1] is not None:
                    what += f" {'>' if low[0] == '(' else '>='} {low[1]}"
                elif high[1] is not None:
                    what += f" {'<' if high[0] == ')' else '<='} {high[1]}"
                parts.append(what)
            elif t == "string":
                parts.append(f"one of {s['enum']}" if "enum" in s else
                             "a non-empty string" if s.get("minLength", 0) > 0 else "a string")
            elif t == "array":
                n = s.get("minItems", 0)
                parts.append(f"a list of {'at least ' + str(n) + ' ' if n > 1 else 'one or more ' if n else ''}"
                             "non-empty strings")
            else:
                parts.append("true or false" if t == "boolean" else "null")
        return " or ".join(parts)

    def check(self, value: Any) -> Any:
        """``value`` if the schema accepts it (a list as a tuple), else a ConfigError."""
        for t in self.types():
            ok = self._as(t, value)
            if ok is not _REFUSED:
                return ok
        raise ConfigError(f"{self.name} must be {self.accepts()}, got {value!r}")

    def _as(self, t: str, v: Any) -> Any:
        s = self.schema
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
            return tuple(v) if all(isinstance(x, str) and x for x in v) else _REFUSED
        return _REFUSED

    def json_schema(self) -> dict[str, Any]:
        """The schema for a DAG param (lists of strings, as Airflow's trigger form shows them)."""
        out = dict(self.schema)
        if "array" in self.types():
            out["items"] = {"type": "string", "minLength": 1}
        return out


_REFUSED = object()


__all__ = ["Parameter"]
