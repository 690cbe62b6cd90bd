"""The approval request of a publication (include.publication.approval): what a person reads before they
approve, with everything a run or the store supplies shown as text, never as Markdown."""

from __future__ import annotations

import json
import types

from include.checkpoints.layout import JobLayout
from include.publication.approval import asked_about, check_lines, publication_request
from include.store import LocalStore


def _job(tmp_path, report=None):
    store = LocalStore(tmp_path / "ckpt")
    layout = JobLayout("j1")
    if report is not None:
        store.put(f"{layout.checks(3, 'a3-x')}/validation.json", json.dumps({"report": report}).encode())
    config = types.SimpleNamespace(job_id="j1", output_path="/data/out")
    return types.SimpleNamespace(config=config, store=store, log=types.SimpleNamespace(layout=layout))


def _state(metrics):
    decision = types.SimpleNamespace(epoch=3, reason="converged (l1_delta < 1e-8)", feedback_count=0, metrics=metrics)
    manifest = types.SimpleNamespace(checkpoint_id=3, attempt_id="a3-x", decision=decision)
    return types.SimpleNamespace(latest=manifest)


def test_the_request_shows_how_the_job_ended_its_metrics_and_its_checks(tmp_path):
    job = _job(tmp_path, {"counts": {"passed": 2, "failed": 0, "warned": 1, "skipped": 0}, "outcomes": [
        {"name": "ranks_sum_to_one", "status": "passed", "severity": "critical"},
        {"name": "no_dominant_node", "status": "warned", "severity": "warning", "note": "max rank 0.4"}]})
    subject, body = publication_request(job, _state({"l1_delta": 3.2e-9}))
    assert subject == "Publish the outputs of job j1?"
    assert "Job **j1** terminated: converged \\(l1\\_delta \\< 1e\\-8\\) at epoch 3 (checkpoint 3)" in body
    assert "| l1\\_delta | 3\\.2e\\-09 |" in body
    assert "Data checks of checkpoint 3: 2 of 3 passed." in body
    assert "- warned no\\_dominant\\_node (warning): max rank 0\\.4" in body
    assert "**Reject**: nothing is published; the job is suspended at checkpoint 3" in body
    assert asked_about(job, _state({})) == {"job_id": "j1", "checkpoint_id": 3}


def test_what_a_run_or_the_store_supplies_is_never_markdown(tmp_path):
    """A check name from a run conf, a metric name, a note: links, images, HTML and table
    breaks come out as literal text."""
    hostile = "[approve me](http://evil.example) ![x](http://evil.example/i.png) <script>x</script> | cell\nline"
    job = _job(tmp_path, {"counts": {"passed": 0, "failed": 1}, "outcomes": [
        {"name": hostile, "status": "failed", "severity": "critical", "note": hostile}]})
    _, body = publication_request(job, _state({hostile: 1.0}))
    import re

    for fragment in (r"(?<!\\)\]\(", r"(?<!\\)!\[", r"(?<!\\)<script", r"(?<!\\)\| cell"):
        assert not re.search(fragment, body), fragment
    assert "\\[approve me\\]\\(http://evil\\.example\\)" in body
    assert all(line.count("\n") == 0 for line in body.splitlines())


def test_without_checks_or_with_a_damaged_result_it_says_so(tmp_path):
    job = _job(tmp_path)
    assert check_lines(job, _state({}).latest) == ["Data checks: none ran on this checkpoint."]
    job.store.put(f"{job.log.layout.checks(3, 'a3-x')}/validation.json", b"not json")
    [line] = check_lines(job, _state({}).latest)
    assert line.startswith("Data checks: their result at ") and line.endswith("cannot be read.")
