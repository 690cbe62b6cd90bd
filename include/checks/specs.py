"""Expectation specs and the job's check settings: parsing and merging entries from checks
files, bodies and run confs, and what a run's conf may change (``run_settings``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from include.checks.allowlist import (
    BLOCKING,
    COLUMN_KWARGS,
    EXPECTATION_NAME,
    SETTINGS_KEYS,
    SEVERITIES,
    SPEC_KEYS,
    check_expectation,
    expression_names,
)
from include.errors import ConfigError


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
        cols = [self.kwargs[k] for k in COLUMN_KWARGS if isinstance(self.kwargs.get(k), str)]
        return cols + [c for c in self.kwargs.get("column_list") or [] if isinstance(c, str)]

    def parameters(self) -> set[str]:
        """The names its ``$PARAMETER`` expressions use."""
        names: set[str] = set()
        for value in self.kwargs.values():
            if isinstance(value, Mapping) and "$PARAMETER" in value:
                names.update(expression_names(value["$PARAMETER"]))
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
        unknown = set(value) - SETTINGS_KEYS
        if unknown:
            raise ConfigError(f"{where} has unknown key(s) {sorted(unknown)}; accepted: {sorted(SETTINGS_KEYS)}")
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
    unknown = set(entry) - SPEC_KEYS
    if unknown:
        raise ConfigError(f"{where} has unknown key(s) {sorted(unknown)}; accepted: {sorted(SPEC_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not EXPECTATION_NAME.match(name):
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


#: the namespace of the expectations a run's conf adds: ``<RUN_PREFIX><name>``
RUN_PREFIX = "run."


def run_expectation_name(name: str) -> str:
    """The name an expectation a run adds goes by: in the run's own namespace."""
    return name if name.startswith(RUN_PREFIX) else RUN_PREFIX + name


def _shadows(name: str, owners: Mapping[str, str]) -> str | None:
    """The locked expectation ``name`` would change or shadow: the same name, or one of the
    names its column glob expands to (``<locked>[<column>]``, include.checks.profile.expand)."""
    if name in owners:
        return name
    base = name.split("[", 1)[0]
    return base if "[" in name and base in owners else None


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
    takes), with the run's entries checked against the allow-list.

    Unless ``run_may_relax`` (the DAG's author lets runs relax its checks), a run may only add
    expectations, each in the run's own namespace (``run.<name>``: it can never change, shadow
    or relax an expectation of the body, the author or the runtime, nor one of the names their
    column globs expand to): ConfigError if it sets ``"enabled": false``, or gives an entry
    named like one of ``locked_names`` or of the author's entries (or one of their expansions,
    or named so that it would land on one in the run's namespace). ``locked_names``: the names
    of the runtime's and the body's expectations, best ``locked_expectation_names(body.describe(),
    author)`` (a mapping name -> whose it is, named in the error). With ``run_may_relax`` a run
    may change or disable anything; its new entries still go by ``run.<name>``."""
    settings = CheckSettings.parse(run, where)
    base = CheckSettings.parse(author, "the DAG's checks")
    owners = dict(locked_names) if isinstance(locked_names, Mapping) else {n: "" for n in locked_names}
    for e in base.expectations:
        owners.setdefault(e["name"], "the DAG's checks")
    if run_may_relax:
        renamed = [e if e["name"] in owners else {**e, "name": run_expectation_name(e["name"])}
                   for e in settings.expectations]
        return CheckSettings(settings.enabled, tuple(renamed)).over(base)
    if not settings.enabled:
        raise ConfigError(f'{where}: "enabled": false would turn this DAG\'s data checks off; only the DAG\'s '
                          "author may allow a run to do that (the DAG lets runs relax its checks). A run may "
                          "add expectations with new names")
    renamed = []
    for i, e in enumerate(settings.expectations):
        target = _shadows(e["name"], owners) or _shadows(run_expectation_name(e["name"]), owners)
        if target is not None:
            owner = owners[target]
            whose = f" (one of {owner})" if owner else ""
            changes = ", ".join(k for k in ("type", "kwargs", "severity", "description", "enabled") if k in e)
            raise ConfigError(
                f"{where}.expectations[{i}] ({e['name']}): a run may not change the expectation {target!r}"
                f"{whose}{' (it gives ' + changes + ')' if changes else ''}: only the DAG's author may allow "
                "runs to change or disable its checks (the DAG lets runs relax its checks). A run may add "
                f"expectations with new names (they go by {RUN_PREFIX}<name>)")
        renamed.append({**e, "name": run_expectation_name(e["name"])})
    return CheckSettings(settings.enabled, tuple(renamed)).over(base)


# --- the profile -----------------------------------------------------------------------------
