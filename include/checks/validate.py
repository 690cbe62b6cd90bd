"""Validating an attempt's profile with its suite: the outcome of each expectation and the
report kept with the attempt (``CheckReport``)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from include.checks.allowlist import BLOCKING, _is_glob
from include.checks.columns import _ProfileLayout
from include.checks.gx import _jsonable, _run_gx
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
