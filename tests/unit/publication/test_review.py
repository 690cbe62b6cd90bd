"""What a person reviews of a staged publication (include.publication.review): the comparison with
the published version, computed by hand here, and its text, in which everything a run or the
store supplies is shown as text, never as Markdown."""

from __future__ import annotations

import math
import re

import pandas as pd

from include.publication.review import compare, review_markdown


def test_rows_added_removed_and_changed_by_key():
    was = pd.DataFrame({"node": [1, 2, 3, 4], "rank": [0.4, 0.3, 0.2, 0.1]})
    now = pd.DataFrame({"node": [2, 3, 4, 5], "rank": [0.35, 0.2, 0.15, 0.3]})
    c = compare(now, was, ["node"], {"ranked_by": "rank", "top": 3})
    assert (c["rows"], c["current_rows"], c["keys"]) == (4, 4, ["node"])
    assert (c["added"], c["removed"], c["changed"], c["unchanged"]) == (1, 1, 2, 1)
    assert math.isclose(c["largest_change"]["rank"], 0.05)
    # now, by rank: 2 (0.35), 5 (0.3), 3 (0.2); before: 1, 2, 3, 4
    assert [(r["key"], r["place"], r["was_place"], r["moved"]) for r in c["top"]["rows"]] == \
        [([2], 1, 2, 1), ([5], 2, None, None), ([3], 3, 3, 0)]
    assert math.isclose(c["top"]["rows"][0]["change"], 0.05)
    assert c["top"]["left"] == [{"key": [1], "was_place": 1}], "node 1 left the top 3"


def test_without_unique_keys_rows_are_compared_whole():
    was = pd.DataFrame({"a": [1, 1, 2], "b": ["x", "x", "y"]})
    now = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    c = compare(now, was, ["a"], {})  # "a" repeats in the published version: no key
    assert c["keys"] == [] and (c["added"], c["removed"], c["changed"]) == (1, 1, None)
    assert compare(now, None, ["a"], {})["current_rows"] is None, "nothing published: nothing to compare"


def test_shift_is_the_distance_of_each_rows_numbers_arrays_flattened():
    was = pd.DataFrame({"cluster_id": [0, 1], "center": [[0.0, 0.0], [1.0, 1.0]]})
    now = pd.DataFrame({"cluster_id": [0, 1], "center": [[3.0, 4.0], [1.0, 1.0]]})
    shift = compare(now, was, ["cluster_id"], {"shift": True})["shift"]
    assert shift["rows"] == [{"key": [0], "shift": 5.0}, {"key": [1], "shift": 0.0}]
    assert (shift["max"], shift["mean"]) == (5.0, 2.5)


def _review(**changes):
    review = {"job_id": "j1", "checkpoint_id": 4, "epoch": 3, "drained": False, "reason": "converged: l1 < 1e-8",
              "metrics": {"l1_delta": 3.2e-9}, "staged_in": "/data/out", "outputs": [
                  {"name": "ranks", "version": "v-j1-4", "rows": 2, "schema": "node bigint, rank double", "files": 1,
                   "bytes": 100, "replaces": "v-j1-2",
                   "comparison": {"rows": 2, "current_rows": 2, "keys": ["node"], "added": 0, "removed": 0,
                                  "changed": 2, "unchanged": 0, "largest_change": {"rank": 0.01}}}],
              "increments": {}, "checks": {"counts": {"passed": 2, "warned": 1},
                                           "not_passed": [{"name": "no_dominant_node", "status": "warned",
                                                           "severity": "warning", "note": "max rank 0.4"}]}}
    return {**review, **changes}


def test_the_request_shows_the_staged_version_its_difference_and_its_checks():
    subject, body = review_markdown(_review())
    assert subject == "Publish the outputs of job j1?"
    assert "Job **j1** terminated: converged: l1 \\< 1e\\-8 at epoch 3 (final checkpoint 4)" in body
    assert "staged in /data/out, not published" in body
    assert "| l1\\_delta | 3\\.2e\\-09 |" in body
    assert "**ranks** → v\\-j1\\-4: 2 rows" in body and "`node bigint, rank double`" in body
    assert "| 0 | 0 | 2 | 0 |" in body and "largest change of rank: 0\\.01" in body
    assert "2 of 3 passed" in body and "- warned no\\_dominant\\_node (warning): max rank 0\\.4" in body
    assert "**Reject** (or no answer in time): the staged versions are deleted" in body


def test_what_a_run_or_the_store_supplies_is_never_markdown():
    """A check name from a run conf, a metric name, an output value: links, images, HTML and
    table breaks come out as literal text."""
    hostile = "[approve me](http://evil.example) ![x](http://evil.example/i.png) <script>x</script> | cell\nline"
    review = _review(job_id=hostile, metrics={hostile: 1.0}, checks={"counts": {"failed": 1}, "not_passed": [
        {"name": hostile, "status": "failed", "severity": "critical", "note": hostile}]})
    review["outputs"][0]["comparison"]["top"] = {"by": hostile, "k": 1, "left": [], "rows": [
        {"place": 1, "key": [hostile], "value": 1.0, "was_place": None, "moved": None, "change": None}]}
    _, body = review_markdown(review)
    assert "](http" not in body and "<script>" not in body
    assert not re.search(r"(?<!\\)\[", body), "every [ is escaped"
    for line in body.splitlines():
        if line.startswith("|"):
            assert line.count("|") - line.count("\\|") in (3, 5, 7), line  # no cell is split
