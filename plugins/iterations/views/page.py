"""Server-rendered HTML of the Iterations view: a job's epochs as a table and its convergence
metric as an inline SVG chart. No script, no external asset (the page works offline).

Everything shown comes from a checkpoint store, which the view does not trust (docs/design.md,
trust boundaries): every value goes through one of the helpers of ``escaping`` on its way into
the page; the SVG pictures are ``charts``."""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import quote, urlencode

from include.checks import CheckView
from include.runs import EpochView, JobOverview
from iterations.views.charts import chart_svg, phase_legend, phases_svg
from iterations.views.escaping import css_name, esc, float_text, int_text, is_int, is_number, num_text, size_text

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
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def _q(**params: Any) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def error_page(status: int, message: str) -> str:
    return _page("Iterations: error", f'<h1>Iterations</h1><p class="fail">{int_text(status)}: {esc(message)}</p>'
                                      f'<p><a href="./">Back</a></p>')


def index_page(root: str, jobs: list[str] | None, problem: str | None, base: str,
               stores: list[tuple[str, str]] = ()) -> str:
    """The jobs of the store at ``root``; ``stores``: (dag_id, checkpoint root) of the DAGs the
    user may read, offered as links."""
    picks = "".join(f'<li><a class="store" href="{esc(f"{base}?{_q(root=r)}")}">{esc(dag_id)}</a> '
                    f'<span class="muted">{esc(r)}</span></li>' for dag_id, r in stores)
    picker = f'<p class="meta">Your DAGs\' stores:</p><ul class="stores">{picks}</ul>' if picks else ""
    rows = "".join(f'<tr><td><a class="job" href="{esc(f"{base}jobs/{quote(j)}?{_q(root=root)}")}">{esc(j)}</a>'
                   f"</td></tr>" for j in jobs or [])
    listing = (f"<table><tr><th>Job</th></tr>{rows}</table>" if rows
               else f'<p class="muted">{esc(problem or "No job has a checkpoint log in this store yet.")}</p>')
    return _page("Iterations", f"""<h1>Iterations</h1>
<p class="meta">The jobs of a checkpoint store, read-only. Open a job to see its epochs.</p>
<form method="get" action="{esc(base)}"><label>Checkpoint root <input type="text" name="root" value="{esc(root)}"></label>
<button type="submit">Open</button></form>{picker}{listing}""")


#: epochs per page of the epoch table
PAGE_SIZE = 100


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
        total = int_text(sum(values)) if all(is_int(v) for v in values) else esc(" + ".join(map(str, values)))
        lines = []
        for o in c.not_passed if isinstance(c.not_passed, list) else []:
            if not isinstance(o, dict):
                continue
            status = str(o.get("status"))
            if status == "failed" and o.get("severity") not in (None, "None", "critical"):
                status = "warned"
            note = f": {esc(o.get('note'))}" if o.get("note") else ""
            lines.append(f'<div class="check-other s-{css_name(status)}">{esc(status)} <code>{esc(o.get("name"))}</code>'
                         f"{note}</div>")
        out.append(f'<a class="check {mark}" href="{esc(link(c))}" title="{esc(title)}">{label}</a> '
                   f'<span class="muted">{int_text(counts.get("passed", 0))} of {total} passed</span>' + "".join(lines))
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
        by = f' <span class="muted">by {esc(who)}</span>' if who else ""
        if a.status == "committed":
            out.append(f'<div class="attempt a-committed" data-attempt="{esc(a.attempt_id)}" data-status="committed" '
                       f'title="{esc(a.ran_by or "")}"><code>{esc(a.attempt_id)}</code>{by}</div>')
            continue
        instead = f' · superseded by <code>{esc(a.superseded_by)}</code>' if a.superseded_by else ""
        why = f": {esc(a.why)}" if a.why else ""
        out.append(f'<div class="attempt a-{css_name(a.status)}" data-attempt="{esc(a.attempt_id)}" '
                   f'data-status="{esc(a.status)}" title="{esc(a.reason or a.ran_by or a.status)}">'
                   f'<code>{esc(a.attempt_id)}</code> <b class="a-status">{esc(a.status)}</b>{why}{by}{instead}</div>')
    return "".join(out)


def _run_link(airflow: str, dag_id: Any, run_id: Any, text: Any) -> str:
    """A link to a DAG run's page in the Airflow UI (the whole window, not the view's frame)."""
    if not dag_id or not run_id:
        return esc(text)
    href = f"{airflow}dags/{quote(str(dag_id), safe='')}/runs/{quote(str(run_id), safe='')}"
    return f'<a class="run" href="{esc(href)}" target="_top">{esc(text)}</a>'


def _pages(count: int, page: int, url) -> str:
    if count <= PAGE_SIZE:
        return ""
    last = (count + PAGE_SIZE - 1) // PAGE_SIZE
    first_epoch, last_epoch = (page - 1) * PAGE_SIZE + 1, min(count, page * PAGE_SIZE)
    links = [(1, "first"), (page - 1, "previous"), (page + 1, "next"), (last, "last")]
    nav = " · ".join(f'<a href="{esc(url(p))}" rel="{name}">{name}</a>' if 1 <= p <= last and p != page
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
        name = esc(g.job_id) if g.job_id == view.job_id or g.retired else \
            f'<a href="{esc(f"{base}jobs/{quote(g.job_id)}?{q}")}">{esc(g.job_id)}</a>'
        src = g.rewound_from
        how = f" from epoch {int_text(src['epoch'])} of {esc(src['job_id'])}" if src else ""
        if g.restarted:  # on_input_change=restart
            how += f" · restarted: {esc(g.restarted)}"
        state = " · <b>newest</b>" if g.newest else " · retired (its log deleted)" if g.retired else " · superseded"
        items.append(f"<li><code>{name}</code>{how}{state}</li>")
    return f'<p class="meta">generations (a rewind recomputes the job as a new one):</p><ul id="generations">{"".join(items)}</ul>'


def _family(view: JobOverview, base: str, q: str) -> str:
    """The job's parent, when it is a fork, and its forks (include.runs.forks), each linked."""
    def job(job_id: Any) -> str:
        if job_id is None:
            return "a job you may not see"
        return f'<a href="{esc(f"{base}jobs/{quote(str(job_id))}?{q}")}"><code>{esc(job_id)}</code></a>'

    parts = []
    src = view.forked_from
    if isinstance(src, dict):
        parts.append(f'<p class="meta" id="forked-from">a fork of {job(src.get("job_id"))} at epoch '
                     f'{int_text(src.get("epoch"))} (checkpoint {int_text(src.get("checkpoint_id"))}): its epochs '
                     f'before {int_text((src.get("epoch") or 0) + 1)} are its parent\'s</p>')
    forks = [f for f in (view.forks or []) if isinstance(f, dict)]
    if forks:
        items = "".join(f"<li>{job(f.get('job_id'))} from epoch {int_text(f.get('epoch'))}</li>" for f in forks)
        parts.append(f'<p class="meta">forks (new jobs started from a checkpoint of this one):</p>'
                     f'<ul id="forks">{items}</ul>')
    return "".join(parts)


def job_page(view: JobOverview, root: str, base: str, batch: str | None = None, page: int | None = None) -> str:
    """``batch``: the batch (DAG run) the page was opened for; its rows are highlighted.
    ``page``: the page of the epoch table (``PAGE_SIZE`` epochs; default: the one with the
    batch's first epoch, else the newest)."""
    q = _q(root=root)
    airflow = base[:-len("iterations/")] if base.endswith("iterations/") else "/"

    def link(c: CheckView) -> str:
        return f"{base}jobs/{quote(view.job_id)}/checks/{int_text(c.epoch)}/{quote(str(c.attempt_id))}?{q}"

    metric = view.metric
    body = view.body if isinstance(view.body, dict) else {}
    params = body.get("params") if isinstance(body.get("params"), dict) else {}
    kept, retired = view.kept_checkpoints, view.retired_checkpoints
    damaged = view.damaged_checkpoints if isinstance(view.damaged_checkpoints, list) else []
    head = f"""<p class="meta"><a href="{esc(f'{base}?{q}')}">All jobs</a></p>
<h1>Job <code id="job-id">{esc(view.job_id)}</code> <span id="job-status" class="badge s-{css_name(view.status)}">{esc(view.status)}</span></h1>
<p class="meta">store <code>{esc(view.store)}</code> · body <code>{esc(body.get('name', ''))}</code>
{esc(' '.join(f'{k}={v}' for k, v in sorted(params.items(), key=lambda kv: str(kv[0]))))}
· latest checkpoint {int_text(view.latest_checkpoint) if view.latest_checkpoint is not None else '-'}
{f'· stop requested: <b>{esc(view.stop_request)}</b>' if view.stop_request else ''}</p>
<p class="meta" id="retention">checkpoints kept: {esc(', '.join(map(str, kept)) or 'none')}
· {esc(_count(len(retired), 'earlier checkpoint'))} retired by retention (their data deleted; their metrics and history kept)
{f'· savepoints: {esc(", ".join(map(str, view.savepoints)))}' if view.savepoints else ''}
{f'· <b class="fail">damaged</b> (its manifest is refused; the epoch says why): {esc(", ".join(map(str, damaged)))}' if damaged else ''}
{f'· rejected by a rewind: {esc(", ".join(map(str, view.rejected)))}' if view.rejected else ''}</p>{_generations(view, base, q)}{_family(view, base, q)}"""
    others = [m for m in view.metric_names if m != metric]
    switch = " ".join(f'<a href="{esc(f"{base}jobs/{quote(view.job_id)}?{_q(root=root, metric=m)}")}">{esc(m)}</a>'
                      for m in others)
    missing = [e for e in view.epochs if metric and isinstance(e.metrics, dict) and metric not in e.metrics
               and e.status not in ("running", "aborted", "damaged")]
    chart = (f"<h2>Convergence: {esc(metric or '-')}</h2>{chart_svg(view.epochs, metric)}"
             + (f'<p class="meta">other metrics: {switch}</p>' if switch else "")
             + (f'<p class="meta">{esc(_count(len(missing), "committed epoch"))} without a recorded {esc(metric)} '
                "(their history was forgotten: the job's retain_history setting).</p>" if missing else ""))

    run_of = {b.batch_id: b for b in view.batches}
    current_row = ' class="current"'
    batch_rows = "".join(
        f'<tr data-batch="{esc(b.batch_id)}" data-run-id="{esc(b.run_id or "")}"{current_row if b.batch_id == batch else ""}>'
        f"<td>{_run_link(airflow, b.dag_id, b.run_id, b.run_id or b.batch_id)}</td>"
        f'<td class="num">{int_text(b.start_epoch)}</td>'
        f'<td class="num">{int_text(b.restored_from)}</td>'
        f'<td>{_ranges(b.epochs)}</td><td class="num">{int_text(b.final_checkpoint)}</td></tr>'
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
    longest = max((sum(v for v in e.phases.values() if is_number(v)) for e in shown
                   if isinstance(e.phases, dict)), default=0.0)

    def url(p: int) -> str:
        return f"{base}jobs/{quote(view.job_id)}?{_q(root=root, metric=view.metric, batch=batch, page=p)}"

    with_events = any(e.events for e in shown)  # columns nobody needs are left out
    with_reasons = any(e.reason for e in shown)
    rows = []
    for e in shown:
        value = e.metrics.get(metric) if metric and isinstance(e.metrics, dict) else None
        events = "<br>".join(
            f"{esc(ev.coordinator)}: {int_text(ev.count)}"
            + (f' <span class="muted">(seq {int_text(ev.first_seq)}-{int_text(ev.end_seq - 1)})</span>' if ev.count else "")
            for ev in e.events)
        restored = (f'<br><span class="muted">resumed by {esc(", ".join(_run_name(run_of, b) for b in e.restored_by))}'
                    "</span>" if e.restored_by else "")
        if e.damage:  # its manifest is refused: why, as the checkpoint log said
            restored += f'<br><span class="fail damage">{esc(e.damage)}</span>'
        current = " current" if batch is not None and e.batch_id == batch else ""
        b = run_of.get(e.batch_id) if e.batch_id is not None else None
        batch_cell = _run_link(airflow, b.dag_id, b.run_id, b.run_id) if b is not None and b.run_id else esc(e.batch_id)
        rows.append(
            f'<tr class="epoch{current}" data-epoch="{int_text(e.epoch)}" data-status="{esc(e.status)}" '
            f'data-metric="{float_text(value)}" data-feedback="{int_text(e.feedback)}">'
            f'<td class="num">{int_text(e.epoch)}</td><td class="status"><span class="badge s-{css_name(e.status)}">{esc(e.status)}</span>'
            f"{restored}</td>"
            f'<td class="run-id" title="{esc(b.run_id if b is not None and b.run_id else e.batch_id)}">{batch_cell}</td>'
            f'<td class="attempts">{_attempt_cell(e)}</td>'
            f'<td class="nw time">{phases_svg(e.phases if isinstance(e.phases, dict) else {}, longest)}</td>'
            f'<td class="num" title="{float_text(value)}">{num_text(value)}</td>'
            f'<td class="num">{int_text(e.feedback)}</td>'
            f'<td class="num">{size_text(e.size_bytes)}</td><td>{esc(_retention(e.retention))}</td>'
            f'<td class="checks">{_check_cell(e.checks, link)}</td>'
            + (f'<td class="events">{events}</td>' if with_events else "")
            + (f"<td>{esc(e.reason)}</td>" if with_reasons else "") +
            f'<td class="muted nw" title="{esc(e.committed_at)}">{esc(_clock(e.committed_at))}</td></tr>')
    nav = _pages(len(epochs), page, url)
    table = ('<h2>Epochs</h2>' + phase_legend() + nav + '<div class="wide" id="epochs-frame"><table id="epochs"><tr><th>Epoch</th><th>Status</th><th>DAG run</th>'
             f"<th>Attempts</th><th>Time</th><th>{esc(metric or 'metric')}</th><th>Feedback records</th><th>Checkpoint size</th>"
             "<th>Retention</th><th>Data checks</th>" + ("<th>Events released</th>" if with_events else "")
             + ("<th>Termination</th>" if with_reasons else "")
             + f"<th>Committed (UTC)</th></tr>{''.join(rows)}</table></div>" + nav)

    finish = '<h2>Finish</h2><p class="muted">Not finished: no final checkpoint yet.</p>'
    if view.finish is not None:
        f = view.finish
        outs = "".join(
            f'<tr class="output" data-output="{esc(o.name)}" data-state="{esc(o.state)}"><td>{esc(o.name)}</td>'
            f'<td><span class="badge s-{css_name(o.state)}">{esc(o.state)}</span></td><td class="num">{int_text(o.rows)}</td>'
            f'<td class="num">{size_text(o.size_bytes)}</td><td><code>{esc(o.location)}</code></td>'
            f'<td>{esc(o.format)}</td><td class="muted">{esc(o.published_at)}</td></tr>'
            for o in f.outputs)
        finish = (f'<h2>Finish</h2><p class="meta" id="finish">final checkpoint {int_text(f.checkpoint_id)} '
                  f"(from epoch {int_text(f.epoch)}{', drained' if f.drained else ''}), attempt <code>{esc(f.attempt_id)}</code>, "
                  f"{size_text(f.size_bytes)}, committed {esc(f.committed_at)}; data checks: "
                  f"{_check_cell(f.checks, link) or '-'}</p>"
                  '<table id="outputs"><tr><th>Output</th><th>State</th><th>Rows</th><th>Size</th><th>Published to</th>'
                  f"<th>Format</th><th>Published at</th></tr>{outs}</table>"
                  f'<p class="meta">operators: {esc(", ".join(f"{k} {v}" for k, v in sorted(f.lifecycle.items())))}</p>')
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
    if not all(is_int(e) for e in epochs):
        return esc(", ".join(map(str, epochs)))
    out, start, prev = [], epochs[0], epochs[0]
    for e in epochs[1:] + [None]:
        if e is not None and e == prev + 1:
            prev = e
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if e is not None:
            start = prev = e
    return ", ".join(out)
