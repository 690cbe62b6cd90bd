"""The Iterations view's pictures, as inline SVG: a job's metric per epoch and each epoch's time
by phase. Every value from the store goes through ``escaping``."""

from __future__ import annotations

import math
from typing import Any

from include.runs import EpochView
from iterations.views.escaping import css_name, esc, float_text, int_text, is_int, is_number, num_text

#: at most this many points are drawn; a longer job's chart keeps each group's smallest and largest
MAX_CHART_POINTS = 600


def downsample(points: list[tuple[Any, float, str]], limit: int) -> list[tuple[Any, float, str]]:
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
             if metric and is_int(e.epoch) and is_number(e.metrics.get(metric))
             and math.isfinite(e.metrics[metric])]
    points = downsample(every, MAX_CHART_POINTS)
    left, right, top, bottom = 70, 16, 14, 34
    w, h = width - left - right, height - top - bottom
    if not points:
        return (f'<svg id="metric-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" '
                f'data-metric="{esc(metric or "")}"><text x="4" y="20">no {esc(metric or "metric")} '
                f"value kept for any epoch</text></svg>")
    xs = [e.epoch for e in epochs if is_int(e.epoch)] or [0]
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
             f'data-metric="{esc(metric)}" data-scale="{"log" if log else "linear"}" data-epochs="{len(every)}" '
             f'data-drawn="{len(points)}" role="img" aria-label="{esc(metric)} per epoch">']
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
                         f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{num_text(t)}</text>')
    step = max(1, math.ceil((x1 - x0 + 1) / 12))
    for x in range(x0, x1 + 1, step):
        parts.append(f'<text x="{px(x):.1f}" y="{top + h + 16}" text-anchor="middle">{x}</text>')
    parts.append(f'<text x="{left + w / 2:.1f}" y="{height - 2}" text-anchor="middle">epoch</text>')
    parts.append(f'<text x="12" y="{top + h / 2:.1f}" transform="rotate(-90 12 {top + h / 2:.1f})" '
                 f'text-anchor="middle">{esc(metric)}{" (log)" if log else ""}</text>')
    coords = [(px(x), py(y)) for (x, _, _), y in zip(points, ys)]
    parts.append('<polyline class="line" points="' + " ".join(f"{a:.1f},{b:.1f}" for a, b in coords) + '" />')
    if not sampled:  # one mark per epoch; a downsampled line has none (they would cover it)
        for (epoch, value, status), (a, b) in zip(points, coords):
            parts.append(f'<circle class="point {css_name(status)}{" zero" if log and value == 0 else ""}" '
                         f'cx="{a:.1f}" cy="{b:.1f}" r="3.5" data-epoch="{int_text(epoch)}" data-value="{float_text(value)}">'
                         f"<title>epoch {int_text(epoch)}: {esc(metric)}={value:.6g}</title></circle>")
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
    known = [(k, label, colour, phases[k]) for k, label, colour in PHASES if is_number(phases.get(k))]
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
            f'aria-label="{esc(words)}"><title>{esc(words)}</title>{"".join(parts)}</svg>'
            f'<br><span class="muted">{total:.2f} s</span>')


def phase_legend() -> str:
    return ('<p class="meta" id="phase-legend">time per epoch: ' + " ".join(
        f'<span class="swatch" style="background:{colour}"></span>{label}' for _, label, colour in PHASES)
        + " (the bar\'s length is relative to the longest epoch of the page; hover a segment for its seconds)</p>")
