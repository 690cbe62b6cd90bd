"""A stored data-check result as people see it (the Iterations view, the approval request):
``CheckView`` and ``check_view``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from include.checkpoints.record_schemas import DamagedRecord


@dataclass
class CheckView:
    """The data checks of one attempt, and where their reports are (keys in the store)."""

    epoch: int
    attempt_id: str
    kind: str
    success: bool
    counts: dict[str, int]
    headline: str
    problems: list[str]  # one line per blocking failure and warning
    json_key: str
    html_key: str | None
    # every expectation that did not pass: {"name", "status" (failed | error | warned | skipped), "note"}
    not_passed: list[dict[str, Any]] = field(default_factory=list)


def check_view(epoch: int, attempt: str, data: Any, json_key: str, where: str,
               html_key: str | None = None) -> CheckView:
    """The data checks of attempt ``attempt`` of ``epoch`` from ``data``, its check result as
    stored (``<checks of the attempt>/validation.json``, read from ``where``); DamagedRecord
    naming ``where`` if it is not one."""
    report = data.get("report") if isinstance(data, dict) else None
    if not isinstance(report, dict) or not isinstance(report.get("counts", {}), dict) \
            or not isinstance(report.get("outcomes", []), list):
        raise DamagedRecord(f"{where} is not a data-check result: a JSON object with a report of counts and "
                            "outcomes is expected")
    problems = [_outcome_line(o) for o in report.get("outcomes", [])
                if isinstance(o, dict) and o.get("status") in ("failed", "error")]
    not_passed = [{"name": str(o.get("name")), "status": str(o.get("status")), "severity": str(o.get("severity")),
                   "note": str(o.get("note") or "") or None}
                  for o in report.get("outcomes", []) if isinstance(o, dict) and o.get("status") != "passed"]
    counts = report.get("counts", {})
    return CheckView(
        epoch=epoch, attempt_id=attempt, kind=report.get("kind", "epoch"),
        success=bool(report.get("success")), counts=counts,
        headline=(f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
                  f"{counts.get('warned', 0)} warning(s), {counts.get('skipped', 0)} skipped"),
        problems=problems, not_passed=not_passed, json_key=json_key, html_key=html_key)


def _outcome_line(o: dict[str, Any]) -> str:
    observed = ", ".join(f"{k}={v}" for k, v in (o.get("observed") or {}).items()) or "-"
    text = f"{str(o.get('status', '')).upper()} {o.get('name')} [{o.get('severity')}]: observed {observed}"
    if o.get("expected"):
        text += f"; expected {o['expected']}"
    return text
