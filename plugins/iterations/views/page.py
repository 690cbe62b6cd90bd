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

from include.checks import CheckView
from include.runs import EpochView, JobOverview

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1f2933;font-size:14px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:20px 0 6px}
.meta{color:#52606d;margin:2px 0} code{background:#f0f4f8;padding:0 3px;border-radius:3px}
table{border-collapse:collapse;margin:4px 0} th,td{border:1px solid #d9e2ec;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f4f8;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table#epochs{font-size:12px} td.nw{white-space:nowrap}
td.id{max-width:190px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
td.run-id{width:120px;min-width:120px;max-width:120px;overflow-wrap:anywhere}
td.attempts{min-width:210px;max-width:300px}
div.wide{max-width:100%;overflow-x:auto}
td.status{width:110px;overflow-wrap:anywhere} td.checks{min-width:150px;max-width:230px}
td.checks code{overflow-wrap:anywhere} td.events{max-width:140px}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;font-weight:600;color:#fff}
.s-committed{background:#2f855a}.s-restored{background:#2b6cb0}.s-running{background:#b7791f}.s-aborted{background:#c53030}
.s-damaged{background:#742a2a}
.s-TERMINATED{background:#2f855a}.s-RUNNING{background:#b7791f}.s-TERMINATING{background:#b7791f}
.s-SUSPENDED{background:#6b46c1}.s-NOT-STARTED{background:#718096}.s-PUBLISHED{background:#2f855a}
.s-FULLY_FINISHED{background:#b7791f}
.fail{color:#c53030}.ok{color:#2f855a}.muted{color:#7b8794}
svg text{font-size:11px;fill:#52606d} .grid{stroke:#e4e7eb} .line{fill:none;stroke:#2b6cb0;stroke-width:2}
.point{fill:#2b6cb0} .point.restored{fill:#fff;stroke:#2b6cb0;stroke-width:2}
form{margin:8px 0} input[type=text]{width:420px} tr.current td{background:#fff8e1}
.attempt+.attempt{margin-top:3px} .a-aborted .a-status{color:#c53030}
.a-superseded .a-status{color:#b7791f} .check-other{font-size:12px;color:#52606d}
.check-other.s-failed,.check-other.s-error{color:#c53030} .swatch{display:inline-block;width:10px;height:10px;margin:0 3px 0 8px;border-radius:2px}
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


def index_page(root: str, jobs: list[str] | None, problem: str | None, base: str,
               stores: list[tuple[str, str]] = ()) -> str:
    """The jobs of the store at ``root``; ``stores``: (dag_id, checkpoint root) of the DAGs the
    user may read, offered as links."""
    picks = "".join(f'<li><a class="store" href="{_e(f"{base}?{_q(root=r)}")}">{_e(dag_id)}</a> '
                    f'<span class="muted">{_e(r)}</span></li>' for dag_id, r in stores)
    picker = f'<p class="meta">Your DAGs\' stores:</p><ul class="stores">{picks}</ul>' if picks else ""
    rows = "".join(f'<tr><td><a class="job" href="{_e(f"{base}jobs/{quote(j)}?{_q(root=root)}")}">{_e(j)}</a>'
                   f"</td></tr>" for j in jobs or [])
    listing = (f"<table><tr><th>Job</th></tr>{rows}</table>" if rows
               else f'<p class="muted">{_e(problem or "No job has a checkpoint log in this store yet.")}</p>')
    return _page("Iterations", f"""<h1>Iterations</h1>
<p class="meta">The jobs of a checkpoint store, read-only. Open a job to see its epochs.</p>
<form method="get" action="{_e(base)}"><label>Checkpoint root <input type="text" name="root" value="{_e(root)}"></label>
<button type="submit">Open</button></form>{picker}{listing}""")


#: at most this many points are drawn; a longer job's chart keeps each group's smallest and largest
MAX_CHART_POINTS = 600
#: epochs per page of the epoch table
PAGE_SIZE = 100


def _downsample(points: list[tuple[Any, float, str]], limit: int) -> list[tuple[Any, float, str]]:
    """At most ``limit`` of ``points`` (in epoch order): each of ``limit // 2`` runs of
    consecutive epochs keeps its smallest and largest value, so no spike is lost."""
    if len(points) <= limit:
        return points
    groups = max(1, limit // 2)
    out = []
    for g in range(groups):
        chunk = points[g * len(points) // groups:(g + 1) * len(points) // groups]
        if not chunk:
            continue
        low, high = min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])
        out += sorted({id(low): low, id(high): high}.values(), key=lambda p: p[0])
    return out


def chart_svg(epochs: list[EpochView], metric: str | None, width: int = 760, height: int = 260) -> str:
    """The metric per epoch: a line through the epochs that have it. On a log scale when the
    values span more than 50x, or some reach 0 (a metric that converges to 0): zeros are then
    drawn on a line of their own, labelled 0, below the smallest decade. More than
    ``MAX_CHART_POINTS`` epochs are downsampled (each group's smallest and largest)."""
    every = [(e.epoch, e.metrics[metric], e.status) for e in epochs
             if metric and _is_int(e.epoch) and _is_number(e.metrics.get(metric))
             and math.isfinite(e.metrics[metric])]
    points = _downsample(every, MAX_CHART_POINTS)
    left, right, top, bottom = 70, 16, 14, 34
    w, h = width - left - right, height - top - bottom
    if not points:
        return (f'<svg id="metric-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" '
                f'data-metric="{_e(metric or "")}"><text x="4" y="20">no {_e(metric or "metric")} '
                f"value kept for any epoch</text></svg>")
    xs = [e.epoch for e in epochs if _is_int(e.epoch)] or [0]
    x0, x1 = min(xs), max(xs)
    positive = [v for _, v, _ in points if v > 0]
    zeros = any(v == 0 for _, v, _ in points)
    log = bool(positive) and all(v >= 0 for _, v, _ in points) and (zeros or max(positive) / min(positive) > 50)
    if log:
        floor = math.floor(math.log10(min(positive)))
        zero_at = floor - 1  # the line of zeros: one decade below the smallest value
        ys = [math.log10(v) if v > 0 else zero_at for _, v, _ in points]
        y0, y1 = (zero_at if zeros else floor), math.ceil(max(math.log10(v) for v in positive))
    else:
        ys = [v for _, v, _ in points]
        y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 1, y1 + 1

    def px(x: float) -> float:
        return left + (0 if x1 == x0 else (x - x0) / (x1 - x0) * w)

    def py(y: float) -> float:
        return top + h - (y - y0) / (y1 - y0) * h

    sampled = len(points) < len(every)
    parts = [f'<svg id="metric-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'data-metric="{_e(metric)}" data-scale="{"log" if log else "linear"}" data-epochs="{len(every)}" '
             f'data-drawn="{len(points)}" role="img" aria-label="{_e(metric)} per epoch">']
    if log:
        ticks = list(range(int(y0) + (1 if zeros else 0), int(y1) + 1))
        step = max(1, len(ticks) // 6)
        for t in ticks[::step]:
            parts.append(f'<line class="grid" x1="{left}" x2="{left + w}" y1="{py(t):.1f}" y2="{py(t):.1f}" />'
                         f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">1e{t}</text>')
        if zeros:
            parts.append(f'<line class="grid zero" x1="{left}" x2="{left + w}" y1="{py(y0):.1f}" y2="{py(y0):.1f}" '
                         f'stroke-dasharray="4 3" /><text x="{left - 6}" y="{py(y0) + 4:.1f}" '
                         f'text-anchor="end">0</text>')
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
    if not sampled:  # one mark per epoch; a downsampled line has none (they would cover it)
        for (epoch, value, status), (a, b) in zip(points, coords):
            parts.append(f'<circle class="point {_cls(status)}{" zero" if log and value == 0 else ""}" '
                         f'cx="{a:.1f}" cy="{b:.1f}" r="3.5" data-epoch="{_int(epoch)}" data-value="{_float(value)}">'
                         f"<title>epoch {_int(epoch)}: {_e(metric)}={value:.6g}</title></circle>")
    parts.append("</svg>")
    if sampled:
        parts.append(f'<p class="meta" id="chart-sampled">{len(every)} epochs, drawn as {len(points)} points: '
                     "the smallest and the largest value of each run of consecutive epochs.</p>")
    return "".join(parts)


#: an epoch's phases, in order, with their colour in the picture
PHASES = (("restore", "restore", "#805ad5"), ("step", "step and tail", "#3182ce"),
          ("alignment", "alignment", "#a0aec0"), ("checks", "data checks", "#d69e2e"),
          ("commit", "commit", "#38a169"))


def phases_svg(phases: dict[str, float], longest: float, width: int = 110) -> str:
    """An epoch's time as one bar, a segment per phase, its length relative to ``longest``
    (the longest epoch on the page); each segment's title says the phase and its seconds."""
    known = [(k, label, colour, phases[k]) for k, label, colour in PHASES if _is_number(phases.get(k))]
    if not known:
        return '<span class="muted">-</span>'
    total = sum(v for *_, v in known)
    scale = (width - 2) / longest if longest > 0 else 0
    x, parts = 1.0, []
    for key, label, colour, seconds in known:
        length = seconds * scale
        parts.append(f'<rect class="phase" data-phase="{key}" data-seconds="{seconds:.3f}" x="{x:.1f}" y="1" '
                     f'width="{max(length, 0.5 if seconds > 0 else 0):.1f}" height="12" fill="{colour}">'
                     f"<title>{label}: {seconds:.2f} s</title></rect>")
        x += length
    words = " · ".join(f"{label} {seconds:.2f} s" for _, label, _, seconds in known)
    return (f'<svg class="phases" xmlns="http://www.w3.org/2000/svg" width="{width}" height="14" role="img" '
            f'aria-label="{_e(words)}"><title>{_e(words)}</title>{"".join(parts)}</svg>'
            f'<br><span class="muted">{total:.2f} s</span>')


def _legend() -> str:
    return ('<p class="meta" id="phase-legend">time per epoch: ' + " ".join(
        f'<span class="swatch" style="background:{colour}"></span>{label}' for _, label, colour in PHASES)
        + " (the bar\'s length is relative to the longest epoch of the page; hover a segment for its seconds)</p>")


def _check_cell(checks: Iterable[CheckView], link) -> str:
    """Each checked attempt: passed/failed (linked to its report), how many of how many passed,
    then every expectation that did not pass, by name, with why for a skipped one."""
    out = []
    for c in checks:
        mark = "ok" if c.success else "fail"
        label = "passed" if c.success else "failed"
        title = "\n".join(map(str, [c.headline, *(c.problems or [])]))
        counts = c.counts if isinstance(c.counts, dict) else {}
        values = list(counts.values())
        total = _int(sum(values)) if all(_is_int(v) for v in values) else _e(" + ".join(map(str, values)))
        lines = []
        for o in c.not_passed if isinstance(c.not_passed, list) else []:
            if not isinstance(o, dict):
                continue
            status = str(o.get("status"))
            if status == "failed" and o.get("severity") not in (None, "None", "critical"):
                status = "warned"
            note = f": {_e(o.get('note'))}" if o.get("note") else ""
            lines.append(f'<div class="check-other s-{_cls(status)}">{_e(status)} <code>{_e(o.get("name"))}</code>'
                         f"{note}</div>")
        out.append(f'<a class="check {mark}" href="{_e(link(c))}" title="{_e(title)}">{label}</a> '
                   f'<span class="muted">{_int(counts.get("passed", 0))} of {total} passed</span>' + "".join(lines))
    return "<br>".join(out)


def _who(run: Any) -> str:
    """The runner of an attempt in a few words: ``epoch_1.run try 2``, ``library runner``."""
    if not isinstance(run, dict):
        return ""
    if run.get("runner") == "library":
        return "library runner"
    return f"{run.get('task_id')} try {run.get('try_number')}"


def _attempt_cell(e: EpochView) -> str:
    """Every attempt of the epoch: the committed one, and each other with what became of it,
    who ran it (task and try) and the attempt that committed instead."""
    out = []
    for a in e.attempts:
        who = _who(a.run)
        by = f' <span class="muted">by {_e(who)}</span>' if who else ""
        if a.status == "committed":
            out.append(f'<div class="attempt a-committed" data-attempt="{_e(a.attempt_id)}" data-status="committed" '
                       f'title="{_e(a.ran_by or "")}"><code>{_e(a.attempt_id)}</code>{by}</div>')
            continue
        instead = f' · superseded by <code>{_e(a.superseded_by)}</code>' if a.superseded_by else ""
        why = f": {_e(a.why)}" if a.why else ""
        out.append(f'<div class="attempt a-{_cls(a.status)}" data-attempt="{_e(a.attempt_id)}" '
                   f'data-status="{_e(a.status)}" title="{_e(a.reason or a.ran_by or a.status)}">'
                   f'<code>{_e(a.attempt_id)}</code> <b class="a-status">{_e(a.status)}</b>{why}{by}{instead}</div>')
    return "".join(out)


def _run_link(airflow: str, dag_id: Any, run_id: Any, text: Any) -> str:
    """A link to a DAG run's page in the Airflow UI (the whole window, not the view's frame)."""
    if not dag_id or not run_id:
        return _e(text)
    href = f"{airflow}dags/{quote(str(dag_id), safe='')}/runs/{quote(str(run_id), safe='')}"
    return f'<a class="run" href="{_e(href)}" target="_top">{_e(text)}</a>'


def _pages(count: int, page: int, url) -> str:
    if count <= PAGE_SIZE:
        return ""
    last = (count + PAGE_SIZE - 1) // PAGE_SIZE
    first_epoch, last_epoch = (page - 1) * PAGE_SIZE + 1, min(count, page * PAGE_SIZE)
    links = [(1, "first"), (page - 1, "previous"), (page + 1, "next"), (last, "last")]
    nav = " · ".join(f'<a href="{_e(url(p))}" rel="{name}">{name}</a>' if 1 <= p <= last and p != page
                     else f'<span class="muted">{name}</span>' for p, name in links)
    return (f'<p class="meta pages" data-page="{page}" data-pages="{last}">rows {first_epoch}-{last_epoch} '
            f"of {count} epochs (page {page} of {last}) · {nav}</p>")


def _generations(view: JobOverview, base: str, q: str) -> str:
    """The job's generations (include.runs.generations), each linked (not a retired one: its log is
    gone), the newest marked."""
    if not view.generations:
        return ""
    items = []
    for g in view.generations:
        name = _e(g.job_id) if g.job_id == view.job_id or g.retired else \
            f'<a href="{_e(f"{base}jobs/{quote(g.job_id)}?{q}")}">{_e(g.job_id)}</a>'
        src = g.rewound_from
        how = f" from epoch {_int(src['epoch'])} of {_e(src['job_id'])}" if src else ""
        if g.restarted:  # on_input_change=restart
            how += f" · restarted: {_e(g.restarted)}"
        state = " · <b>newest</b>" if g.newest else " · retired (its log deleted)" if g.retired else " · superseded"
        items.append(f"<li><code>{name}</code>{how}{state}</li>")
    return f'<p class="meta">generations (a rewind recomputes the job as a new one):</p><ul id="generations">{"".join(items)}</ul>'


def job_page(view: JobOverview, root: str, base: str, batch: str | None = None, page: int | None = None) -> str:
    """``batch``: the batch (DAG run) the page was opened for; its rows are highlighted.
    ``page``: the page of the epoch table (``PAGE_SIZE`` epochs; default: the one with the
    batch's first epoch, else the newest)."""
    q = _q(root=root)
    airflow = base[:-len("iterations/")] if base.endswith("iterations/") else "/"

    def link(c: CheckView) -> str:
        return f"{base}jobs/{quote(view.job_id)}/checks/{_int(c.epoch)}/{quote(str(c.attempt_id))}?{q}"

    metric = view.metric
    body = view.body if isinstance(view.body, dict) else {}
    params = body.get("params") if isinstance(body.get("params"), dict) else {}
    kept, retired = view.kept_checkpoints, view.retired_checkpoints
    damaged = view.damaged_checkpoints if isinstance(view.damaged_checkpoints, list) else []
    head = f"""<p class="meta"><a href="{_e(f'{base}?{q}')}">All jobs</a></p>
<h1>Job <code id="job-id">{_e(view.job_id)}</code> <span id="job-status" class="badge s-{_cls(view.status)}">{_e(view.status)}</span></h1>
<p class="meta">store <code>{_e(view.store)}</code> · body <code>{_e(body.get('name', ''))}</code>
{_e(' '.join(f'{k}={v}' for k, v in sorted(params.items(), key=lambda kv: str(kv[0]))))}
· latest checkpoint {_int(view.latest_checkpoint) if view.latest_checkpoint is not None else '-'}
{f'· stop requested: <b>{_e(view.stop_request)}</b>' if view.stop_request else ''}</p>
<p class="meta" id="retention">checkpoints kept: {_e(', '.join(map(str, kept)) or 'none')}
· {_e(_count(len(retired), 'earlier checkpoint'))} retired by retention (their data deleted; their metrics and history kept)
{f'· savepoints: {_e(", ".join(map(str, view.savepoints)))}' if view.savepoints else ''}
{f'· <b class="fail">damaged</b> (its manifest is refused; the epoch says why): {_e(", ".join(map(str, damaged)))}' if damaged else ''}
{f'· rejected by a rewind: {_e(", ".join(map(str, view.rejected)))}' if view.rejected else ''}</p>{_generations(view, base, q)}"""
    others = [m for m in view.metric_names if m != metric]
    switch = " ".join(f'<a href="{_e(f"{base}jobs/{quote(view.job_id)}?{_q(root=root, metric=m)}")}">{_e(m)}</a>'
                      for m in others)
    missing = [e for e in view.epochs if metric and isinstance(e.metrics, dict) and metric not in e.metrics
               and e.status not in ("running", "aborted", "damaged")]
    chart = (f"<h2>Convergence: {_e(metric or '-')}</h2>{chart_svg(view.epochs, metric)}"
             + (f'<p class="meta">other metrics: {switch}</p>' if switch else "")
             + (f'<p class="meta">{_e(_count(len(missing), "committed epoch"))} without a recorded {_e(metric)} '
                "(their history was forgotten: the job's retain_history setting).</p>" if missing else ""))

    run_of = {b.batch_id: b for b in view.batches}
    current_row = ' class="current"'
    batch_rows = "".join(
        f'<tr data-batch="{_e(b.batch_id)}" data-run-id="{_e(b.run_id or "")}"{current_row if b.batch_id == batch else ""}>'
        f"<td>{_run_link(airflow, b.dag_id, b.run_id, b.run_id or b.batch_id)}</td>"
        f'<td class="num">{_int(b.start_epoch)}</td>'
        f'<td class="num">{_int(b.restored_from)}</td>'
        f'<td>{_ranges(b.epochs)}</td><td class="num">{_int(b.final_checkpoint)}</td></tr>'
        for b in view.batches)
    batches = ('<h2>Batches (DAG runs)</h2><table id="batches"><tr><th>DAG run</th><th>First epoch</th>'
               "<th>Resumed from checkpoint</th><th>Epochs committed</th><th>Final checkpoint</th></tr>"
               f"{batch_rows}</table>") if view.batches else ""

    epochs = view.epochs
    last_page = max(1, (len(epochs) + PAGE_SIZE - 1) // PAGE_SIZE)
    if page is None:
        first = next((i for i, e in enumerate(epochs) if batch is not None and e.batch_id == batch), None)
        page = first // PAGE_SIZE + 1 if first is not None else last_page
    page = min(max(1, page), last_page)
    shown = epochs[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
    longest = max((sum(v for v in e.phases.values() if _is_number(v)) for e in shown
                   if isinstance(e.phases, dict)), default=0.0)

    def url(p: int) -> str:
        return f"{base}jobs/{quote(view.job_id)}?{_q(root=root, metric=view.metric, batch=batch, page=p)}"

    with_events = any(e.events for e in shown)  # columns nobody needs are left out
    with_reasons = any(e.reason for e in shown)
    rows = []
    for e in shown:
        value = e.metrics.get(metric) if metric and isinstance(e.metrics, dict) else None
        events = "<br>".join(
            f"{_e(ev.coordinator)}: {_int(ev.count)}"
            + (f' <span class="muted">(seq {_int(ev.first_seq)}-{_int(ev.end_seq - 1)})</span>' if ev.count else "")
            for ev in e.events)
        restored = (f'<br><span class="muted">resumed by {_e(", ".join(_run_name(run_of, b) for b in e.restored_by))}'
                    "</span>" if e.restored_by else "")
        if e.damage:  # its manifest is refused: why, as the checkpoint log said
            restored += f'<br><span class="fail damage">{_e(e.damage)}</span>'
        current = " current" if batch is not None and e.batch_id == batch else ""
        b = run_of.get(e.batch_id) if e.batch_id is not None else None
        batch_cell = _run_link(airflow, b.dag_id, b.run_id, b.run_id) if b is not None and b.run_id else _e(e.batch_id)
        rows.append(
            f'<tr class="epoch{current}" data-epoch="{_int(e.epoch)}" data-status="{_e(e.status)}" '
            f'data-metric="{_float(value)}" data-feedback="{_int(e.feedback)}">'
            f'<td class="num">{_int(e.epoch)}</td><td class="status"><span class="badge s-{_cls(e.status)}">{_e(e.status)}</span>'
            f"{restored}</td>"
            f'<td class="run-id" title="{_e(b.run_id if b is not None and b.run_id else e.batch_id)}">{batch_cell}</td>'
            f'<td class="attempts">{_attempt_cell(e)}</td>'
            f'<td class="nw time">{phases_svg(e.phases if isinstance(e.phases, dict) else {}, longest)}</td>'
            f'<td class="num" title="{_float(value)}">{_num(value)}</td>'
            f'<td class="num">{_int(e.feedback)}</td>'
            f'<td class="num">{_size(e.size_bytes)}</td><td>{_e(_retention(e.retention))}</td>'
            f'<td class="checks">{_check_cell(e.checks, link)}</td>'
            + (f'<td class="events">{events}</td>' if with_events else "")
            + (f"<td>{_e(e.reason)}</td>" if with_reasons else "") +
            f'<td class="muted nw" title="{_e(e.committed_at)}">{_e(_clock(e.committed_at))}</td></tr>')
    nav = _pages(len(epochs), page, url)
    table = ('<h2>Epochs</h2>' + _legend() + nav + '<div class="wide" id="epochs-frame"><table id="epochs"><tr><th>Epoch</th><th>Status</th><th>DAG run</th>'
             f"<th>Attempts</th><th>Time</th><th>{_e(metric or 'metric')}</th><th>Feedback records</th><th>Checkpoint size</th>"
             "<th>Retention</th><th>Data checks</th>" + ("<th>Events released</th>" if with_events else "")
             + ("<th>Termination</th>" if with_reasons else "")
             + f"<th>Committed (UTC)</th></tr>{''.join(rows)}</table></div>" + nav)

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


def _run_name(runs: dict[str, Any], batch_id: Any) -> str:
    """A batch by its DAG run's id when the store recorded it, else by the batch id."""
    b = runs.get(batch_id) if isinstance(batch_id, str) else None
    return str(b.run_id) if b is not None and b.run_id else str(batch_id)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _retention(value: Any) -> Any:
    """``retired`` -> ``retired (data deleted)``: nobody reads it as the metric being gone."""
    return "retired (data deleted)" if value == "retired" else value


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
