"""Which columns a checkpoint's profile can have: globs, the body's schemas, and the check
that every expectation's column can exist (``check_columns``)."""

from __future__ import annotations

import fnmatch
from typing import Any, Mapping, Sequence

from include.checks.allowlist import is_glob
from include.checks.specs import CheckSettings, ExpectationSpec
from include.errors import ConfigError

_STATS = ("nulls", "nonfinite", "min", "max", "sum")
_NUMERIC_STATS = ("nonfinite", "min", "max", "sum")
_SCALARS = ("tinyint", "smallint", "int", "bigint", "float", "double")
#: Column types (as ``schema_string`` writes them) whose nonfinite, min, max and sum the tail
#: computes (``spark_jobs.storeio.Profile``): integer and floating-point columns, and arrays of
#: them (their stats are over all their elements)
NUMERIC_TYPES = frozenset({*_SCALARS, *(f"array<{t}>" for t in _SCALARS)})


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
        if not is_glob(column):
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


class ProfileLayout:
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
