"""The Iterations page's pictures and paging, on made-up overviews (no store, no Spark): a
metric that reaches 0 stays readable, 10,000 epochs are paged and their chart downsampled,
each epoch's phases are one bar, and a check that did not pass is named with why."""

from __future__ import annotations

import re

from include.runs.overview import AttemptView, CheckView, EpochView, JobOverview
from plugins.iterations.views.charts import MAX_CHART_POINTS, chart_svg, phases_svg
from plugins.iterations.views.page import PAGE_SIZE, job_page


def overview(epochs: list[EpochView]) -> JobOverview:
    return JobOverview(job_id="j", store="/s", status="RUNNING", body={"name": "pagerank", "params": {}},
                       metric="l1_delta", metric_names=["l1_delta"], latest_checkpoint=epochs[-1].epoch,
                       kept_checkpoints=[epochs[-1].epoch], retired_checkpoints=[e.epoch for e in epochs[:-1]],
                       savepoints=[], stop_request=None, epochs=epochs, batches=[], finish=None, rejected=[])


def epoch(i: int, value: float, **kw) -> EpochView:
    return EpochView(epoch=i, status="committed", metrics={"l1_delta": value}, attempt_id=f"a{i}-x",
                     attempts=[AttemptView(f"a{i}-x", "committed")], **kw)


def test_a_metric_that_reaches_zero_keeps_a_log_scale_with_a_line_for_zero():
    values = [10.0 ** -i for i in range(5)] + [0.0] * 45
    svg = chart_svg([epoch(i, v) for i, v in enumerate(values)], "l1_delta")
    assert 'data-scale="log"' in svg and ">0</text>" in svg
    ys = {int(m[2]): float(m[1]) for m in re.finditer(r'cy="([\d.]+)" r="3.5" data-epoch="(\d+)"', svg)}
    assert len(ys) == 50
    assert ys[0] < ys[1] < ys[2] < ys[3] < ys[4] < ys[5], "each decade lower, zero below them all"
    assert len({ys[i] for i in range(5, 50)}) == 1, "every zero on the zero line"
    assert ys[5] - ys[4] > 10, "the zero line is apart from the smallest value"


def test_ten_thousand_epochs_are_paged_and_their_chart_downsampled():
    values = [1.0 / (i + 1) for i in range(10_000)]
    values[7_777] = 5.0  # a spike: downsampling keeps it
    epochs = [epoch(i, v) for i, v in enumerate(values)]
    svg = chart_svg(epochs, "l1_delta")
    assert f'data-epochs="10000" data-drawn="{MAX_CHART_POINTS}"' in svg and "<circle" not in svg
    ys = sorted(float(y) for y in re.findall(r"[\d.]+,([\d.]+)", svg.split('points="')[1].split('"')[0]))
    assert ys[0] < ys[1] - 5, "the spike (5.0, above every other value) is kept, the highest point"
    html = job_page(overview(epochs), "/s", "/iterations/")
    rows = re.findall(r'<tr class="epoch[^"]*" data-epoch="(\d+)"', html)
    assert len(rows) == PAGE_SIZE and rows[-1] == "9999", "the newest page first"
    assert 'data-page="100" data-pages="100"' in html and "rows 9901-10000 of 10000 epochs" in html
    first = job_page(overview(epochs), "/s", "/iterations/", page=1)
    assert re.findall(r'<tr class="epoch[^"]*" data-epoch="(\d+)"', first)[:2] == ["0", "1"]
    assert 'rel="next"' in first and "page=2" in first
    assert "10000 epochs, drawn as 600 points" in html


def test_an_epochs_phases_are_one_bar_scaled_to_the_longest():
    bar = phases_svg({"restore": 1.0, "step": 2.0, "alignment": 0.5, "checks": 0.25, "commit": 0.25}, longest=8.0,
                     width=162)
    widths = {m[1]: float(m[2]) for m in re.finditer(r'data-phase="(\w+)" data-seconds="[\d.]+" x="[\d.]+" y="1" '
                                                     r'width="([\d.]+)"', bar)}
    assert widths == {"restore": 20.0, "step": 40.0, "alignment": 10.0, "checks": 5.0, "commit": 5.0}
    assert "step and tail 2.00 s" in bar and "4.00 s" in bar
    assert phases_svg({}, 1.0) == '<span class="muted">-</span>'


def test_checks_that_did_not_pass_are_named_with_why():
    check = CheckView(epoch=1, attempt_id="a1-x", kind="epoch", success=True,
                      counts={"passed": 5, "failed": 1, "skipped": 2, "warned": 0}, headline="h", problems=[],
                      json_key="k", html_key=None,
                      not_passed=[{"name": "mass", "status": "failed", "severity": "warning", "note": None},
                                  {"name": "keys", "status": "skipped", "severity": "critical",
                                   "note": "ranks has no key columns in this epoch checkpoint"}])
    e = epoch(1, 0.5)
    e.checks = [check]
    html = job_page(overview([epoch(0, 1.0), e]), "/s", "/iterations/")
    assert "5 of 8 passed" in html
    assert "warned <code>mass</code>" in html
    assert "skipped <code>keys</code>: ranks has no key columns in this epoch checkpoint" in html


def test_retention_is_worded_so_that_nobody_misreads_it():
    html = job_page(overview([epoch(i, 1.0 / (i + 1)) for i in range(15)]), "/s", "/iterations/")
    assert "checkpoints kept: 14" in html and "14 earlier checkpoints retired by retention" in html
    assert "have no metric" not in html


def test_a_damaged_checkpoint_is_shown_once_with_why():
    """Issue 64: a checkpoint whose manifest is refused is neither kept nor retired: the page
    names it as damaged, and its epoch row says why (not as an epoch whose metric was forgotten)."""
    why = "manifest /s/jobs/j/checkpoints/0000000001.json fails its own checksum: it was damaged"
    view = overview([epoch(0, 1.0), EpochView(epoch=1, status="damaged", damage=why), epoch(2, 0.5)])
    view.kept_checkpoints, view.retired_checkpoints, view.damaged_checkpoints = [2], [0], [1]
    html = job_page(view, "/s", "/iterations/")
    retention = html.split('id="retention">', 1)[1].split("</p>", 1)[0]
    assert "checkpoints kept: 2" in retention and "1 earlier checkpoint retired" in retention
    assert re.search(r'<b class="fail">damaged</b> \(its manifest is refused; the epoch says why\): 1\s', retention)
    row = re.search(r'<tr class="epoch" data-epoch="1" data-status="damaged".*?</tr>', html).group(0)
    assert 'class="badge s-damaged">damaged</span>' in row and f'<span class="fail damage">{why}</span>' in row
    assert "without a recorded" not in html
