"""Validating an attempt's profile with its suite: the outcome of each expectation and the
report kept with the attempt (``CheckReport``).

How the data checks work. Cheap by construction. The tail computes a profile of every dataset it writes in the pass
that writes it (``spark_jobs.storeio.Profile``: records, nulls per column; for numeric
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
    D.C.nonfinite, D.C.min, D.C.max, D.C.sum    (numeric C, or an array of numbers: over its elements)
                                                NaN/inf count; min/max/sum of the finite values

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

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from include.checks.allowlist import BLOCKING, is_glob
from include.checks.columns import ProfileLayout
from include.checks.gx import jsonable, run_gx
from include.checks.profile import expand
from include.checks.specs import ExpectationSpec
from include.errors import ConfigError


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
            "outcomes": [asdict(o) for o in self.outcomes], "profile": jsonable(self.profile),
            "parameters": jsonable(self.parameters),
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
    layout = ProfileLayout(profile, specs, kind)
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
        if isinstance(pattern, str) and is_glob(pattern) and expanded == [spec]:  # it matches nothing
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
        results, gx_json, rendered = run_gx(runnable, profile, parameters, html)
        for spec, result in zip(runnable, results):
            outcomes.append(_outcome(spec, result, profile))
        if html and any(o.status in ("failed", "error") for o in outcomes):
            page = rendered()
    report = CheckReport(job_id, checkpoint_id, attempt_id, kind, outcomes, dict(profile), dict(parameters))
    report.seconds = time.perf_counter() - started
    return report, gx_json, page

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
    return json.dumps(jsonable(rest), sort_keys=True) if rest else ""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.10g}"
    return repr(v) if isinstance(v, str) else str(v)
