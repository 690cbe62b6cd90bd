"""What a person is asked before a job's outputs are published (the approval gate of an
Airflow DAG's finish: iterations.operators.finish), read from the job's latest checkpoint: how
the job ended, its final metrics, its last data checks. Everything shown comes from the store
and from run confs (check names): it is escaped, never read as Markdown."""

from __future__ import annotations

import json
import re
from typing import Any

from include.checkpoints.record_schemas import DamagedRecord
from include.checks.report_view import check_view
from include.errors import ObjectNotFound

APPROVE, REJECT = "Approve", "Reject"
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~])")


def _md(value: Any, limit: int = 200) -> str:
    """``value`` as literal text in Markdown: one line, special characters escaped, cut at ``limit``."""
    text = " ".join(str(value).split())
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return _MARKDOWN.sub(r"\\\1", text)


def asked_about(job, state) -> dict[str, Any]:
    """What an answer is about: the job and its checkpoint a finish would publish from. An
    answer to another question (the job moved since) is not an answer to this one."""
    return {"job_id": job.config.job_id, "checkpoint_id": state.latest.checkpoint_id if state.latest else None}


def publication_request(job, state, *, drain: bool = False) -> tuple[str, str]:
    """(subject, Markdown body) of the request to publish job ``job``'s outputs at ``state``."""
    job_id, m = job.config.job_id, state.latest
    subject = f"Publish the outputs of job {job_id}?"
    if m is None:
        return subject, f"Job {_md(job_id)} has no checkpoint yet: there is nothing to publish."
    d = m.decision
    ended = "is drained (stopped on request)" if drain else f"terminated: {_md(d.reason or 'terminated')}"
    lines = [f"Job **{_md(job_id)}** {ended} at epoch {d.epoch} (checkpoint {m.checkpoint_id}). "
             f"Its outputs go to {_md(job.config.output_path or '(no output path)', 400)}.", ""]
    lines += ["| final metric | value |", "|---|---|", f"| feedback records | {d.feedback_count} |"]
    lines += [f"| {_md(name, 80)} | {_md(f'{value:.6g}' if isinstance(value, float) else value, 40)} |"
              for name, value in sorted(d.metrics.items())]
    lines += ["", *check_lines(job, m), "",
              f"**{APPROVE}**: the final checkpoint is taken and the outputs are published, once. "
              f"**{REJECT}**: nothing is published; the job is suspended at checkpoint {m.checkpoint_id} "
              f"and asks again when its DAG is triggered with job_id {_md(job_id)}."]
    return subject, "\n".join(lines)


def check_lines(job, manifest) -> list[str]:
    """The data checks of ``manifest``'s attempt, as Markdown lines: counts and what did not pass
    (read as the Iterations view reads them: include.checks.report_view.check_view)."""
    key = f"{job.log.layout.checks(manifest.checkpoint_id, manifest.attempt_id)}/validation.json"
    try:
        view = check_view(manifest.checkpoint_id, manifest.attempt_id, json.loads(job.store.get(key)), key,
                          job.store.location(key))
    except ObjectNotFound:
        return ["Data checks: none ran on this checkpoint."]
    except (ValueError, DamagedRecord):
        return [f"Data checks: their result at {_md(job.store.location(key), 400)} cannot be read."]
    counts = view.counts
    total = sum(v for v in counts.values() if isinstance(v, int)) or len(view.not_passed)
    lines = [f"Data checks of checkpoint {manifest.checkpoint_id}: {counts.get('passed', 0)} of {total} passed."]
    for o in view.not_passed:
        note = f": {_md(o['note'])}" if o["note"] else ""
        lines.append(f"- {_md(o['status'], 20)} {_md(o['name'], 120)} ({_md(o['severity'], 20)}){note}")
    return lines
