"""Server-rendered HTML of the Iterations view: a job's epochs as a table and its convergence
metric as an inline SVG chart. No script, no external asset (the page works offline).

Everything shown comes from a checkpoint store, which the view does not trust (DESIGN.md
section 7): every value goes through one of the helpers below on its way into the page. ``_e``
for text and attribute values (every attribute value is double-quoted), ``_int``/``_float``/
``_num``/``_size`` for numbers, ``_cls`` for a fragment of a CSS class name. A value that
should be a number but is not is shown as it is, escaped."""

from __future__ import annotations

import math
import re
from html import escape
from typing import Any, Iterable
from urllib.parse import quote, urlencode

from include.overview import CheckView, EpochView, JobOverview

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1f2933;font-size:14px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:20px 0 6px}
.meta{color:#52606d;margin:2px 0} code{background:#f0f4f8;padding:0 3px;border-radius:3px}
table{border-collapse:collapse;margin:4px 0} th,td{border:1px solid #d9e2ec;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f4f8;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table#epochs{font-size:13px} td.nw{white-space:nowrap}
td.id{max-width:190px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;font-weight:600;color:#fff}
.s-committed{background:#2f855a}.s-restored{background:#2b6cb0}.s-running{background:#b7791f}.s-aborted{background:#c53030}
.s-TERMINATED{background:#2f855a}.s-RUNNING{background:#b7791f}.s-TERMINATING{background:#b7791f}
.s-SUSPENDED{background:#6b46c1}.s-NOT-STARTED{background:#718096}.s-PUBLISHED{background:#2f855a}
.s-FULLY_FINISHED{background:#b7791f}
.fail{color:#c53030}.ok{color:#2f855a}.muted{color:#7b8794}
svg text{font-size:11px;fill:#52606d} .grid{stroke:#e4e7eb} .line{fill:none;stroke:#2b6cb0;stroke-width:2}
.point{fill:#2b6cb0} .point.restored{fill:#fff;stroke:#2b6cb0;stroke-width:2}
form{margin:8px 0} input[type=text]{width:420px} tr.current td{background:#fff8e1}
"""


def _page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def _q(**params: Any) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


# --- every value from the store goes through one of these -------------------------------------


def _e(value: Any) -> str:
    """Any value as text, escaped for an element's text or a double-quoted attribute value."""
    return escape("" if value is None else str(value), quote=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any) -> str:
    """An integer (epoch, id, count); anything else shown as it is, escaped."""
    if value is None:
        return ""
    return str(value) if _is_int(value) else _e(value)


def _float(value: Any) -> str:
    """A metric value exactly (its ``repr``, for a data attribute or a title)."""
    if value is None:
        return ""
    return repr(float(value)) if _is_number(value) else _e(value)


def _num(value: Any) -> str:
    """A metric value to 4 significant digits."""
    if value is None:
        return ""
    if not _is_number(value):
        return _e(value)
    return f"{value:.4g}" if 1e-3 <= abs(value) < 1e5 or value == 0 or not math.isfinite(value) else f"{value:.3e}"


def _size(n: Any) -> str:
    if n is None:
        return ""
    if not _is_number(n):
        return _e(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return _e(n)


def _cls(value: Any) -> str:
    """A fragment of a CSS class name: letters, digits, '_' and '-' (others become '-')."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", "" if value is None else str(value))


def error_page(status: int, message: str) -> str:
    return _page("Iterations: error", f'<h1>Iterations</h1><p class="fail">{_int(status)}: {_e(message)}</p>'
                                      f'<p><a href="./">Back</a></p>')


def index_page(root: str, jobs: list[str] | None, problem: str | None, base: str) -> str:
    rows = "".join(f'<tr><td><a class="job" href="{_e(f"{base}jobs/{quote(j)}?{_q(root=root)}")}">{_e(j)}</a>'
                   f"</td></tr>" for j in jobs or [])
    listing = (f"<table><tr><th>Job</th></tr>{rows}</table>" if rows
               else f'<p class="muted">{_e(problem or "No job has a checkpoint log in this store yet.")}</p>')
    return _page("Iterations", f"""<h1>Iterations</h1>
<p class="meta">The jobs of a checkpoint store, read-only. Open a job to see its epochs.</p>
<form method="get" action="{_e(base)}"><label>Checkpoint root <input type="text" name="root" value="{_e(root)}"></label>
<button type="submit">Open</button></form>{listing}""")


def chart_svg(epochs: list[EpochView], metric: str | None, width: int = 760, height: int = 260) -> str:
    """The metric per epoch: a line through the epochs that have it (retired epochs have none)."""
    points = [(e.epoch, e.metrics[metric], e.status) for e in epochs
              if metric and _is_int(e.epoch) and _is_number(e.metrics.get(metric))
              and math.isfinite(e.metrics[metric])]
    left, right, top, bottom = 70, 16, 14, 34
    w, h = width - left - right, height - top - bottom
    if not points:
        return (f'<svg id="metric-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" '
                f'data-metric="{_e(metric or "")}"><text x="4" y="20">no {_e(metric or "metric")} '
                f"value kept for any epoch</text></svg>")
    xs = [e.epoch for e in epochs if _is_int(e.epoch)] or [0]
    x0, x1 = min(xs), max(xs)
    log = all(v > 0 for _, v, _ in points) and max(v for _, v, _ in points) / min(v for _, v, _ in points) > 50
    ys = [math.log10(v) if log else v for _, v, _ in points]
    y0, y1 = min(ys), max(ys)
    if log:
        y0, y1 = math.floor(y0), math.ceil(y1)
    if y1 == y0:
        y0, y1 = y0 - 1, y1 + 1

    def px(x: float) -> float:
        return left + (0 if x1 == x0 else (x - x0) / (x1 - x0) * w)

    def py(y: float) -> float:
        return top + h - (y - y0) / (y1 - y0) * h

    parts = [f'<svg id="metric-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'data-metric="{_e(metric)}" data-scale="{"log" if log else "linear"}" role="img" '
             f'aria-label="{_e(metric)} per epoch">']
    if log:
        ticks = list(range(int(y0), int(y1) + 1))
        step = max(1, len(ticks) // 6)
        for t in ticks[::step]:
            parts.append(f'<line class="grid" x1="{left}" x2="{left + w}" y1="{py(t):.1f}" y2="{py(t):.1f}" />'
                         f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">1e{t}</text>')
    else:
        for i in range(5):
            t = y0 + (y1 - y0) * i / 4
            parts.append(f'<line class="grid" x1="{left}" x2="{left + w}" y1="{py(t):.1f}" y2="{py(t):.1f}" />'
                         f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{_num(t)}</text>')
    step = max(1, math.ceil((x1 - x0 + 1) / 12))
    for x in range(x0, x1 + 1, step):
        parts.append(f'<text x="{px(x):.1f}" y="{top + h + 16}" text-anchor="middle">{x}</text>')
    parts.append(f'<text x="{left + w / 2:.1f}" y="{height - 2}" text-anchor="middle">epoch</text>')
    parts.append(f'<text x="12" y="{top + h / 2:.1f}" transform="rotate(-90 12 {top + h / 2:.1f})" '
                 f'text-anchor="middle">{_e(metric)}{" (log)" if log else ""}</text>')
    coords = [(px(x), py(y)) for (x, _, _), y in zip(points, ys)]
    parts.append('<polyline class="line" points="' + " ".join(f"{a:.1f},{b:.1f}" for a, b in coords) + '" />')
    for (epoch, value, status), (a, b) in zip(points, coords):
        parts.append(f'<circle class="point {_cls(status)}" cx="{a:.1f}" cy="{b:.1f}" r="3.5" '
                     f'data-epoch="{_int(epoch)}" data-value="{_float(value)}"><title>epoch {_int(epoch)}: '
                     f"{_e(metric)}={value:.6g}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def _check_cell(checks: Iterable[CheckView], link) -> str:
    out = []
    for c in checks:
        mark = "ok" if c.success else "fail"
        label = "passed" if c.success else "failed"
        title = "\n".join(map(str, [c.headline, *(c.problems or [])]))
        counts = c.counts if isinstance(c.counts, dict) else {}
        values = list(counts.values())
        total = _int(sum(values)) if all(_is_int(v) for v in values) else _e(" + ".join(map(str, values)))
        out.append(f'<a class="check {mark}" href="{_e(link(c))}" title="{_e(title)}">{label}</a> '
                   f'<span class="muted">{_int(counts.get("passed", 0))}/{total}</span>')
    return "<br>".join(out)


def _generations(view: JobOverview, base: str, q: str) -> str:
    """The job's generations (include.generations), each linked (not a retired one: its log is
    gone), the newest marked."""
    if not view.generations:
        return ""
    items = []
    for g in view.generations:
        name = _e(g.job_id) if g.job_id == view.job_id or g.retired else \
            f'<a href="{_e(f"{base}jobs/{quote(g.job_id)}?{q}")}">{_e(g.job_id)}</a>'
        src = g.rewound_from
        how = f" from epoch {_int(src['epoch'])} of {_e(src['job_id'])}" if src else ""
        state = " · <b>newest</b>" if g.newest else " · retired (its log deleted)" if g.retired else " · superseded"
        items.append(f"<li><code>{name}</code>{how}{state}</li>")
    return f'<p class="meta">generations (a rewind recomputes the job as a new one):</p><ul id="generations">{"".join(items)}</ul>'


def job_page(view: JobOverview, root: str, base: str, batch: str | None = None) -> str:
    """``batch``: the batch (DAG run) the page was opened for; its rows are highlighted."""
    q = _q(root=root)

    def link(c: CheckView) -> str:
        return f"{base}jobs/{quote(view.job_id)}/checks/{_int(c.epoch)}/{quote(str(c.attempt_id))}?{q}"

    metric = view.metric
    body = view.body if isinstance(view.body, dict) else {}
    params = body.get("params") if isinstance(body.get("params"), dict) else {}
    head = f"""<p class="meta"><a href="{_e(f'{base}?{q}')}">All jobs</a></p>
<h1>Job <code id="job-id">{_e(view.job_id)}</code> <span id="job-status" class="badge s-{_cls(view.status)}">{_e(view.status)}</span></h1>
<p class="meta">store <code>{_e(view.store)}</code> · body <code>{_e(body.get('name', ''))}</code>
{_e(' '.join(f'{k}={v}' for k, v in sorted(params.items(), key=lambda kv: str(kv[0]))))}
· latest checkpoint {_int(view.latest_checkpoint) if view.latest_checkpoint is not None else '-'}
{f'· stop requested: <b>{_e(view.stop_request)}</b>' if view.stop_request else ''}</p>
<p class="meta">retention: kept checkpoints {_e(', '.join(map(str, view.kept_checkpoints)) or '-')};
retired {len(view.retired_checkpoints)}{f'; savepoints {_e(view.savepoints)}' if view.savepoints else ''}
{f'; rejected by a rewind {_e(view.rejected)}' if view.rejected else ''}</p>{_generations(view, base, q)}"""
    others = [m for m in view.metric_names if m != metric]
    switch = " ".join(f'<a href="{_e(f"{base}jobs/{quote(view.job_id)}?{_q(root=root, metric=m)}")}">{_e(m)}</a>'
                      for m in others)
    chart = (f"<h2>Convergence: {_e(metric or '-')}</h2>{chart_svg(view.epochs, metric)}"
             + (f'<p class="meta">other metrics: {switch}</p>' if switch else "")
             + ('<p class="meta">Epochs whose checkpoint retention retired have no metric any more.</p>'
                if any(e.retention == 'retired' for e in view.epochs) else ""))

    current_row = ' class="current"'
    batch_rows = "".join(
        f'<tr data-batch="{_e(b.batch_id)}"{current_row if b.batch_id == batch else ""}>'
        f"<td>{_e(b.batch_id)}</td>"
        f'<td class="num">{_int(b.start_epoch)}</td>'
        f'<td class="num">{_int(b.restored_from)}</td>'
        f'<td>{_ranges(b.epochs)}</td><td class="num">{_int(b.final_checkpoint)}</td></tr>'
        for b in view.batches)
    batches = ('<h2>Batches (DAG runs)</h2><table id="batches"><tr><th>Batch</th><th>First epoch</th>'
               "<th>Resumed from checkpoint</th><th>Epochs committed</th><th>Final checkpoint</th></tr>"
               f"{batch_rows}</table>") if view.batches else ""

    rows = []
    for e in view.epochs:
        value = e.metrics.get(metric) if metric and isinstance(e.metrics, dict) else None
        attempts = "<br>".join(  # the committed attempt by its id alone; the others say what became of them
            f'<span title="{_e(a.reason or a.status)}" class="attempt a-{_cls(a.status)}">{_e(a.attempt_id)}'
            + ("" if a.status == "committed" else f' <span class="muted">{_e(a.status)}</span>') + "</span>"
            for a in e.attempts)
        events = "<br>".join(
            f"{_e(ev.coordinator)}: {_int(ev.count)}"
            + (f' <span class="muted">(seq {_int(ev.first_seq)}-{_int(ev.end_seq - 1)})</span>' if ev.count else "")
            for ev in e.events)
        restored = (f'<br><span class="muted">by {_e(", ".join(map(str, e.restored_by)))}</span>'
                    if e.restored_by else "")
        current = " current" if batch is not None and e.batch_id == batch else ""
        rows.append(
            f'<tr class="epoch{current}" data-epoch="{_int(e.epoch)}" data-status="{_e(e.status)}" '
            f'data-metric="{_float(value)}" data-feedback="{_int(e.feedback)}">'
            f'<td class="num">{_int(e.epoch)}</td><td><span class="badge s-{_cls(e.status)}">{_e(e.status)}</span>'
            f"{restored}</td>"
            f'<td class="id" title="{_e(e.batch_id)}">{_e(e.batch_id)}</td><td class="nw">{attempts}</td>'
            f'<td class="num" title="{_float(value)}">{_num(value)}</td>'
            f'<td class="num">{_int(e.feedback)}</td>'
            f'<td class="num">{_size(e.size_bytes)}</td><td>{_e(e.retention)}</td>'
            f'<td class="nw">{_check_cell(e.checks, link)}</td><td class="nw">{events}</td>'
            f"<td>{_e(e.reason)}</td>"
            f'<td class="muted nw" title="{_e(e.committed_at)}">{_e(_clock(e.committed_at))}</td></tr>')
    table = ('<h2>Epochs</h2><table id="epochs"><tr><th>Epoch</th><th>Status</th><th>Batch</th><th>Attempts</th>'
             f"<th>{_e(metric or 'metric')}</th><th>Feedback records</th><th>Checkpoint size</th><th>Retention</th>"
             f"<th>Data checks</th><th>Events released</th><th>Termination</th><th>Committed (UTC)</th></tr>"
             f"{''.join(rows)}</table>")

    finish = '<h2>Finish</h2><p class="muted">Not finished: no final checkpoint yet.</p>'
    if view.finish is not None:
        f = view.finish
        outs = "".join(
            f'<tr class="output" data-output="{_e(o.name)}" data-state="{_e(o.state)}"><td>{_e(o.name)}</td>'
            f'<td><span class="badge s-{_cls(o.state)}">{_e(o.state)}</span></td><td class="num">{_int(o.rows)}</td>'
            f'<td class="num">{_size(o.size_bytes)}</td><td><code>{_e(o.location)}</code></td>'
            f'<td>{_e(o.format)}</td><td class="muted">{_e(o.published_at)}</td></tr>'
            for o in f.outputs)
        finish = (f'<h2>Finish</h2><p class="meta" id="finish">final checkpoint {_int(f.checkpoint_id)} '
                  f"(from epoch {_int(f.epoch)}{', drained' if f.drained else ''}), attempt <code>{_e(f.attempt_id)}</code>, "
                  f"{_size(f.size_bytes)}, committed {_e(f.committed_at)}; data checks: "
                  f"{_check_cell(f.checks, link) or '-'}</p>"
                  '<table id="outputs"><tr><th>Output</th><th>State</th><th>Rows</th><th>Size</th><th>Published to</th>'
                  f"<th>Format</th><th>Published at</th></tr>{outs}</table>"
                  f'<p class="meta">operators: {_e(", ".join(f"{k} {v}" for k, v in sorted(f.lifecycle.items())))}</p>')
    return _page(f"Iterations: {view.job_id}", head + chart + batches + table + finish)


def _clock(timestamp: Any) -> str:
    """``2026-11-22T12:51:53.123+00:00`` -> ``12:51:53`` (the full time is the cell's title)."""
    if not isinstance(timestamp, str) or "T" not in timestamp:
        return "" if timestamp is None else str(timestamp)
    return timestamp.split("T", 1)[1][:8]


def _ranges(epochs: list[Any]) -> str:
    """``0-2, 5`` for epochs 0, 1, 2 and 5 (HTML: escaped)."""
    if not epochs:
        return ""
    if not all(_is_int(e) for e in epochs):
        return _e(", ".join(map(str, epochs)))
    out, start, prev = [], epochs[0], epochs[0]
    for e in epochs[1:] + [None]:
        if e is not None and e == prev + 1:
            prev = e
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if e is not None:
            start = prev = e
    return ", ".join(out)
