"""Server-rendered HTML of the Iterations view: a job's epochs as a table and its convergence
metric as an inline SVG chart. No script, no external asset (the page works offline)."""

from __future__ import annotations

import math
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
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def _q(**params: Any) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def _size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _num(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:.4g}" if 1e-3 <= abs(v) < 1e5 or v == 0 else f"{v:.3e}"


def error_page(status: int, message: str) -> str:
    return _page("Iterations: error", f"<h1>Iterations</h1><p class=fail>{status}: {escape(message)}</p>"
                                      f"<p><a href='./'>Back</a></p>")


def index_page(root: str, jobs: list[str] | None, problem: str | None, base: str) -> str:
    rows = "".join(f"<tr><td><a class=job href='{base}jobs/{quote(j)}?{_q(root=root)}'>{escape(j)}</a></td></tr>"
                   for j in jobs or [])
    listing = (f"<table><tr><th>Job</th></tr>{rows}</table>" if rows
               else f"<p class=muted>{escape(problem or 'No job has a checkpoint log in this store yet.')}</p>")
    return _page("Iterations", f"""<h1>Iterations</h1>
<p class=meta>The jobs of a checkpoint store, read-only. Open a job to see its epochs.</p>
<form method=get action='{base}'><label>Checkpoint root <input type=text name=root value="{escape(root)}"></label>
<button type=submit>Open</button></form>{listing}""")


def chart_svg(epochs: list[EpochView], metric: str | None, width: int = 760, height: int = 260) -> str:
    """The metric per epoch: a line through the epochs that have it (retired epochs have none)."""
    points = [(e.epoch, e.metrics[metric], e.status) for e in epochs if metric and metric in e.metrics
              and e.metrics[metric] is not None and math.isfinite(e.metrics[metric])]
    left, right, top, bottom = 70, 16, 14, 34
    w, h = width - left - right, height - top - bottom
    if not points:
        return (f"<svg id=metric-chart xmlns='http://www.w3.org/2000/svg' width={width} height=40 "
                f"data-metric='{escape(metric or '')}'><text x=4 y=20>no {escape(metric or 'metric')} "
                f"value kept for any epoch</text></svg>")
    xs = [e.epoch for e in epochs] or [0]
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

    parts = [f"<svg id=metric-chart xmlns='http://www.w3.org/2000/svg' width={width} height={height} "
             f"data-metric='{escape(metric)}' data-scale='{'log' if log else 'linear'}' role=img "
             f"aria-label='{escape(metric)} per epoch'>"]
    if log:
        ticks = list(range(int(y0), int(y1) + 1))
        step = max(1, len(ticks) // 6)
        for t in ticks[::step]:
            parts.append(f"<line class=grid x1={left} x2={left + w} y1={py(t):.1f} y2={py(t):.1f} />"
                         f"<text x={left - 6} y={py(t) + 4:.1f} text-anchor=end>1e{t}</text>")
    else:
        for i in range(5):
            t = y0 + (y1 - y0) * i / 4
            parts.append(f"<line class=grid x1={left} x2={left + w} y1={py(t):.1f} y2={py(t):.1f} />"
                         f"<text x={left - 6} y={py(t) + 4:.1f} text-anchor=end>{_num(t)}</text>")
    step = max(1, math.ceil((x1 - x0 + 1) / 12))
    for x in range(x0, x1 + 1, step):
        parts.append(f"<text x={px(x):.1f} y={top + h + 16} text-anchor=middle>{x}</text>")
    parts.append(f"<text x={left + w / 2:.1f} y={height - 2} text-anchor=middle>epoch</text>")
    parts.append(f"<text x=12 y={top + h / 2:.1f} transform='rotate(-90 12 {top + h / 2:.1f})' "
                 f"text-anchor=middle>{escape(metric)}{' (log)' if log else ''}</text>")
    coords = [(px(x), py(y)) for (x, _, _), y in zip(points, ys)]
    parts.append("<polyline class=line points='" + " ".join(f"{a:.1f},{b:.1f}" for a, b in coords) + "' />")
    for (epoch, value, status), (a, b) in zip(points, coords):
        parts.append(f"<circle class='point {status}' cx={a:.1f} cy={b:.1f} r=3.5 data-epoch={epoch} "
                     f"data-value='{value!r}'><title>epoch {epoch}: {escape(metric)}={value:.6g}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def _check_cell(checks: Iterable[CheckView], link) -> str:
    out = []
    for c in checks:
        mark = "ok" if c.success else "fail"
        label = "passed" if c.success else "failed"
        title = escape(c.headline + ("\n" + "\n".join(c.problems) if c.problems else ""))
        out.append(f"<a class='check {mark}' href='{link(c)}' title='{title}'>{label}</a> "
                   f"<span class=muted>{c.counts.get('passed', 0)}/{sum(c.counts.values())}</span>")
    return "<br>".join(out)


def job_page(view: JobOverview, root: str, base: str, batch: str | None = None) -> str:
    """``batch``: the batch (DAG run) the page was opened for; its rows are highlighted."""
    q = _q(root=root)

    def link(c: CheckView) -> str:
        return f"{base}jobs/{quote(view.job_id)}/checks/{c.epoch}/{quote(c.attempt_id)}?{q}"

    metric = view.metric
    head = f"""<p class=meta><a href='{base}?{q}'>All jobs</a></p>
<h1>Job <code id=job-id>{escape(view.job_id)}</code> <span id=job-status class='badge s-{escape(view.status.replace(' ', '-'))}'>{escape(view.status)}</span></h1>
<p class=meta>store <code>{escape(view.store)}</code> · body <code>{escape(str(view.body.get('name', '')))}</code>
{escape(' '.join(f'{k}={v}' for k, v in sorted((view.body.get('params') or {}).items())))}
· latest checkpoint {view.latest_checkpoint if view.latest_checkpoint is not None else '-'}
{f'· stop requested: <b>{escape(view.stop_request)}</b>' if view.stop_request else ''}</p>
<p class=meta>retention: kept checkpoints {escape(', '.join(map(str, view.kept_checkpoints)) or '-')};
retired {len(view.retired_checkpoints)}{f'; savepoints {escape(str(view.savepoints))}' if view.savepoints else ''}
{f'; rejected by a rewind {escape(str(view.rejected))}' if view.rejected else ''}</p>"""
    others = [m for m in view.metric_names if m != metric]
    switch = " ".join(f"<a href='{base}jobs/{quote(view.job_id)}?{_q(root=root, metric=m)}'>{escape(m)}</a>"
                      for m in others)
    chart = (f"<h2>Convergence: {escape(metric or '-')}</h2>{chart_svg(view.epochs, metric)}"
             + (f"<p class=meta>other metrics: {switch}</p>" if switch else "")
             + ("<p class=meta>Epochs whose checkpoint retention retired have no metric any more.</p>"
                if any(e.retention == 'retired' for e in view.epochs) else ""))

    batch_rows = "".join(
        f"<tr data-batch='{escape(b.batch_id)}'{' class=current' if b.batch_id == batch else ''}>"
        f"<td>{escape(b.batch_id)}</td>"
        f"<td class=num>{'' if b.start_epoch is None else b.start_epoch}</td>"
        f"<td class=num>{'' if b.restored_from is None else b.restored_from}</td>"
        f"<td>{_ranges(b.epochs)}</td><td class=num>{'' if b.final_checkpoint is None else b.final_checkpoint}</td></tr>"
        for b in view.batches)
    batches = ("<h2>Batches (DAG runs)</h2><table id=batches><tr><th>Batch</th><th>First epoch</th>"
               "<th>Resumed from checkpoint</th><th>Epochs committed</th><th>Final checkpoint</th></tr>"
               f"{batch_rows}</table>") if view.batches else ""

    rows = []
    for e in view.epochs:
        value = e.metrics.get(metric) if metric else None
        attempts = "<br>".join(  # the committed attempt by its id alone; the others say what became of them
            f"<span title='{escape(a.reason or a.status)}' class='attempt a-{a.status}'>{escape(a.attempt_id)}"
            + ("" if a.status == "committed" else f" <span class=muted>{a.status}</span>") + "</span>"
            for a in e.attempts)
        events = "<br>".join(
            f"{escape(ev.coordinator)}: {ev.count}" + (f" <span class=muted>(seq {ev.first_seq}-{ev.end_seq - 1})</span>"
                                                        if ev.count else "")
            for ev in e.events)
        restored = f"<br><span class=muted>by {escape(', '.join(e.restored_by))}</span>" if e.restored_by else ""
        rows.append(
            f"<tr class='epoch{' current' if batch is not None and e.batch_id == batch else ''}' "
            f"data-epoch={e.epoch} data-status={e.status} "
            f"data-metric='{'' if value is None else repr(value)}' data-feedback='{'' if e.feedback is None else e.feedback}'>"
            f"<td class=num>{e.epoch}</td><td><span class='badge s-{e.status}'>{e.status}</span>{restored}</td>"
            f"<td class=id title='{escape(e.batch_id or '')}'>{escape(e.batch_id or '')}</td><td class=nw>{attempts}</td>"
            f"<td class=num title='{'' if value is None else repr(value)}'>{_num(value)}</td>"
            f"<td class=num>{'' if e.feedback is None else e.feedback}</td>"
            f"<td class=num>{_size(e.size_bytes)}</td><td>{escape(e.retention or '')}</td>"
            f"<td class=nw>{_check_cell(e.checks, link)}</td><td class=nw>{events}</td>"
            f"<td>{escape(e.reason or '')}</td>"
            f"<td class='muted nw' title='{escape(e.committed_at or '')}'>{escape(_clock(e.committed_at))}</td></tr>")
    table = (f"<h2>Epochs</h2><table id=epochs><tr><th>Epoch</th><th>Status</th><th>Batch</th><th>Attempts</th>"
             f"<th>{escape(metric or 'metric')}</th><th>Feedback records</th><th>Checkpoint size</th><th>Retention</th>"
             f"<th>Data checks</th><th>Events released</th><th>Termination</th><th>Committed (UTC)</th></tr>"
             f"{''.join(rows)}</table>")

    finish = "<h2>Finish</h2><p class=muted>Not finished: no final checkpoint yet.</p>"
    if view.finish is not None:
        f = view.finish
        outs = "".join(
            f"<tr class=output data-output='{escape(o.name)}' data-state={o.state}><td>{escape(o.name)}</td>"
            f"<td><span class='badge s-{o.state}'>{o.state}</span></td><td class=num>{o.rows}</td>"
            f"<td class=num>{_size(o.size_bytes)}</td><td><code>{escape(o.location or '')}</code></td>"
            f"<td>{escape(o.format or '')}</td><td class=muted>{escape(o.published_at or '')}</td></tr>"
            for o in f.outputs)
        finish = (f"<h2>Finish</h2><p class=meta id=finish>final checkpoint {f.checkpoint_id} (from epoch {f.epoch}"
                  f"{', drained' if f.drained else ''}), attempt <code>{escape(f.attempt_id)}</code>, "
                  f"{_size(f.size_bytes)}, committed {escape(f.committed_at)}; data checks: "
                  f"{_check_cell(f.checks, link) or '-'}</p>"
                  f"<table id=outputs><tr><th>Output</th><th>State</th><th>Rows</th><th>Size</th><th>Published to</th>"
                  f"<th>Format</th><th>Published at</th></tr>{outs}</table>"
                  f"<p class=meta>operators: {escape(', '.join(f'{k} {v}' for k, v in sorted(f.lifecycle.items())))}</p>")
    return _page(f"Iterations: {view.job_id}", head + chart + batches + table + finish)


def _clock(timestamp: str | None) -> str:
    """``2026-11-22T12:51:53.123+00:00`` -> ``12:51:53`` (the full time is the cell's title)."""
    if not timestamp or "T" not in timestamp:
        return timestamp or ""
    return timestamp.split("T", 1)[1][:8]


def _ranges(epochs: list[int]) -> str:
    if not epochs:
        return ""
    out, start, prev = [], epochs[0], epochs[0]
    for e in epochs[1:] + [None]:
        if e is not None and e == prev + 1:
            prev = e
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if e is not None:
            start = prev = e
    return ", ".join(out)
