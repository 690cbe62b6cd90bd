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
skipped.

The suite of an attempt: the runtime's (metrics finite; each head's schema the one it was
restored with), then the body's (``IterationBody.expectations``),
then the job's (``JobConfig.checks``: a DAG's checks file, then the run's ``checks`` param). A
later entry with the name of an earlier one replaces the keys it gives (``{"name":
"rank_mass", "severity": "warning"}`` only downgrades it; ``"enabled": false`` removes it).

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
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

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
_PARAMETER_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


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
            if isinstance(value, Mapping) and isinstance(value.get("$PARAMETER"), str):
                names.update(_PARAMETER_NAME.findall(value["$PARAMETER"]))
        return names

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CheckSettings:
    """A job's data-check settings: on/off, and its expectations (entries merged over the
    runtime's and the body's by name)."""

    enabled: bool = True
    expectations: tuple[dict[str, Any], ...] = ()

    @classmethod
    def parse(cls, value: Any, where: str = "checks") -> "CheckSettings":
        """From ``None``, a mapping ``{"enabled", "expectations"}``, or a JSON string of one;
        ConfigError naming the bad value otherwise."""
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
        """These settings layered over ``base`` (a DAG's file under a run's param)."""
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


def merge(entries: Iterable[Mapping[str, Any]]) -> list[ExpectationSpec]:
    """Entries in order; a later entry with an earlier name replaces the keys it gives."""
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
        out.append(ExpectationSpec(name, e["type"], dict(e["kwargs"]), e.get("severity", BLOCKING),
                                   e.get("description", "")))
    return out


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
        out.append({"name": f"{m}_finite", "type": "expect_column_values_to_be_between",
                    "kwargs": {"column": f"{m}.nonfinite", "max_value": 0},
                    "description": f"the metric {m} is a finite number"})
    for head in heads:
        if restored_schemas.get(head):
            out.append({"name": f"{head}_schema_stable", "type": "expect_column_values_to_be_in_set",
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
    columns = list(profile)
    outcomes: list[Outcome] = []
    runnable: list[ExpectationSpec] = []
    for spec in [e for s in specs for e in expand(s, columns)]:
        missing_cols = [c for c in spec.columns() if c not in profile]
        missing_params = sorted(spec.parameters() - set(parameters))
        if missing_cols or missing_params:
            note = (f"the attempt has no column {', '.join(missing_cols)}" if missing_cols
                    else f"no value for parameter {', '.join(missing_params)} (no parent checkpoint)")
            outcomes.append(Outcome(spec.name, spec.type, spec.severity, "skipped", spec.description, note=note))
        else:
            runnable.append(spec)
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
                       _expected(kwargs), note=str(exc.get("exception_message"))[:500])
    status = "passed" if result.success else "failed"
    return Outcome(spec.name, spec.type, spec.severity, status, spec.description, observed, _expected(kwargs))


def _expected(kwargs: Mapping[str, Any]) -> str:
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    if low is not None or high is not None:
        if low is not None and high is not None:
            return f"between {_fmt(low)} and {_fmt(high)}"
        return f">= {_fmt(low)}" if low is not None else f"<= {_fmt(high)}"
    if "value_set" in kwargs:
        return f"in {kwargs['value_set']!r}"
    if "column_A" in kwargs and "column_B" in kwargs:
        return f"{kwargs['column_A']} == {kwargs['column_B']}"
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
    "ExpectationSpec",
    "Outcome",
    "SEVERITIES",
    "combine",
    "expand",
    "load_checks_file",
    "merge",
    "profile_row",
    "runtime_expectations",
    "schema_string",
    "validate",
]
