"""What a DAG scheduled on outputs' Assets reads of the asset events that started it
(iterations.assets.describe_publications): an event's ``extra`` is untrusted, so only the fields a
finish writes, checked by shape, are taken (include.publication.arrivals.arrival), never any other value."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import networkx as nx
import pytest

from include.publication.outputs import output_uri
from tests.conftest import ROOT
from tests.helpers import publish_edges


@pytest.fixture(scope="module")
def describe_publications(tmp_path_factory):
    os.environ.setdefault("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    sys.path.insert(0, os.path.join(ROOT, "plugins"))
    from iterations.assets import describe_publications

    return describe_publications


def event(uri: str, extra, at: str = "2026-01-01T00:00:00+00:00"):
    return SimpleNamespace(asset=SimpleNamespace(uri=uri), extra=extra, source_dag_id="iterate_pagerank",
                           source_run_id="manual__1", source_task_id="finish", timestamp=at)


def test_an_events_extra_is_read_by_shape_only(describe_publications, tmp_path):
    """Issue 64: the extra was copied unfiltered (any value of any key a poster chose went into
    the task's result and its log). Now: the checked fields, the other keys by name only."""
    out = str(tmp_path / "out")
    manifest = publish_edges(out, nx.DiGraph([(0, 1), (1, 2)]), job="up", checkpoint=4)
    uri = output_uri(out, "edges")
    honest = {k: manifest[k] for k in ("job_id", "checkpoint_id", "version", "rows")}
    forged = {"job_id": "../other", "checkpoint_id": "4; drop", "version": {"$ne": None}, "rows": -1,
              "replaces": "<script>", "token": "s3cr3t", "note": "x" * 10_000}
    [first, second] = describe_publications({uri: [event(uri, {**honest, "replaces": None}),
                                                   event(uri, forged, at="2026-01-02T00:00:00+00:00")]},
                                            aws_conn_id=None)
    assert first == {"uri": uri, **honest, "replaces": None, "current": True,
                     "current_version": manifest["version"], "files": 2}
    assert second == {"uri": uri, "job_id": None, "checkpoint_id": None, "version": None, "rows": None,
                      "replaces": None, "ignored": sorted(forged), "current": False,
                      "current_version": manifest["version"], "files": 2}
    assert "s3cr3t" not in repr(second) and "x" * 100 not in repr(second)


def test_an_extra_that_is_not_a_mapping_is_read_as_empty(describe_publications, tmp_path):
    out = str(tmp_path / "out")
    manifest = publish_edges(out, nx.DiGraph([(0, 1)]), job="up", checkpoint=1, parts=1)
    uri = output_uri(out, "edges")
    [seen] = describe_publications({uri: [event(uri, ["not", "a", "mapping"])]}, aws_conn_id=None)
    assert seen["version"] is None and not seen["current"] and seen["current_version"] == manifest["version"]
    assert "ignored" not in seen
