"""The Iterations view's endpoints, served by a real ``airflow api-server`` (the plugin mounted
under /iterations), over stores filled by real PageRank runs: what they return equals the
checkpoints, nothing is written, unauthenticated requests are refused, and bad values are
refused naming them."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser
from urllib.parse import quote, urlencode

import pytest

from include.checkpoint import CheckpointLog
from include.store import LocalStore
from tests.helpers import FINISHED_JOB, REFUSED_JOB, tree

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def q(root: str, **extra: str) -> str:
    return urlencode({"root": root, **extra})


def endpoints(stores) -> list[str]:
    r = q(stores.root)
    return [f"/iterations/?{r}", f"/iterations/jobs/{FINISHED_JOB}?{r}",
            f"/iterations/jobs/{REFUSED_JOB}/checks/{stores.refused_epoch}/{stores.refused_attempt}?{r}",
            f"/iterations/api/jobs?{r}", f"/iterations/api/jobs/{FINISHED_JOB}?{r}"]


def test_the_plugin_is_registered_in_the_ui(api_server):
    plugins = api_server.get("/api/v2/plugins")["plugins"]
    [ours] = [p for p in plugins if p["name"] == "iterations"]
    assert [(a["name"], a["url_prefix"]) for a in ours["fastapi_apps"]] == [("Iterations view", "/iterations")]
    assert [(v["name"], v["href"], v["url_route"], v["destination"]) for v in ours["external_views"]] == [
        ("Iterations", "/iterations/", "iterations", "nav"),
        ("Iterations", "/iterations/runs/{DAG_ID}/{RUN_ID}", "iterations-run", "dag_run")]


def test_requests_without_valid_credentials_are_refused(api_server, view_stores):
    for path in endpoints(view_stores):
        status, _, body = api_server.fetch(path)
        assert status == 401 and b"Not authenticated" in body and b"l1_delta" not in body, (path, status, body)
        status, _, body = api_server.fetch(path, token="not.a.jwt")
        assert status == 403 and b"l1_delta" not in body, (path, status, body)
        status, _, body = api_server.fetch(path, cookie="forged")
        assert status == 403, (path, status, body)
    for path in ("/iterations/docs", "/iterations/openapi.json"):
        assert api_server.fetch(path)[0] in (401, 404), path


def test_api_returns_what_the_checkpoints_say_and_writes_nothing(api_server, view_stores):
    token = api_server.login("viewer")
    before = tree(view_stores.root)
    status, _, body = api_server.fetch(f"/iterations/api/jobs?{q(view_stores.root)}", token)
    assert status == 200 and json.loads(body) == {"root": view_stores.root, "jobs": sorted([FINISHED_JOB, REFUSED_JOB])}

    status, ctype, body = api_server.fetch(f"/iterations/api/jobs/{FINISHED_JOB}?{q(view_stores.root)}", token)
    assert status == 200 and ctype == "application/json"
    got = json.loads(body)
    log = CheckpointLog(LocalStore(view_stores.root), FINISHED_JOB)
    final = log.latest()
    manifests = [log.load(i) for i in log.checkpoint_ids() if i != final.checkpoint_id]
    assert (got["job_id"], got["status"], got["metric"], got["latest_checkpoint"]) == (
        FINISHED_JOB, "TERMINATED", "l1_delta", final.checkpoint_id)
    assert [e["epoch"] for e in got["epochs"]] == [m.epoch for m in manifests]
    for e, m in zip(got["epochs"], manifests):
        assert e["metrics"] == m.decision.metrics and e["feedback"] == m.decision.feedback_count
        assert e["attempt_id"] == m.attempt_id and e["batch_id"] == m.batch_id
        assert e["status"] in ("committed", "restored") and e["checks"][0]["success"] is True
        assert e["events"][0]["coordinator"] == "alignment"
    assert [e["epoch"] for e in got["epochs"] if e["status"] == "restored"] == [
        view_stores.batches["b1"].checkpoint_id]
    assert [(b["batch_id"], b["final_checkpoint"]) for b in got["batches"]] == [
        ("b1", view_stores.batches["b1"].checkpoint_id), ("b2", final.checkpoint_id)]
    [ranks] = got["finish"]["outputs"]
    assert (ranks["name"], ranks["state"], ranks["rows"], ranks["location"]) == (
        "ranks", "PUBLISHED", 62, os.path.join(view_stores.output_path, "ranks"))

    status, _, body = api_server.fetch(f"/iterations/api/jobs/{REFUSED_JOB}?{q(view_stores.root)}", token)
    refused = json.loads(body)["epochs"][view_stores.refused_epoch]
    assert refused["status"] == "aborted" and refused["checks"][0]["success"] is False
    assert [a["status"] for a in refused["attempts"]] == ["aborted"]

    # the report a refused epoch links to: Great Expectations' page, as the store keeps it
    status, ctype, body = api_server.fetch(endpoints(view_stores)[2], token)
    html_key = refused["checks"][0]["html_key"]
    assert status == 200 and ctype.startswith("text/html") and body == LocalStore(view_stores.root).get(html_key)
    assert tree(view_stores.root) == before, "the view wrote to the store"


class _Rows(HTMLParser):
    """The epoch rows and chart points of the job page, by their data attributes."""

    def __init__(self):
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.points: list[dict[str, str]] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "epoch" in (a.get("class") or "").split():
            self.rows.append(a)
        if tag == "circle":
            self.points.append(a)
        if tag == "a" and "check" in (a.get("class") or "").split():
            self.links.append(a["href"])


def test_the_page_through_the_ui_session_cookie(api_server, view_stores):
    cookie = api_server.login("viewer")  # the UI keeps the same JWT in its ``_token`` cookie
    status, ctype, body = api_server.fetch(f"/iterations/jobs/{FINISHED_JOB}?{q(view_stores.root)}", cookie=cookie)
    assert status == 200 and ctype.startswith("text/html")
    page = _Rows()
    page.feed(body.decode())
    decisions = view_stores.batches["b1"].decisions + view_stores.batches["b2"].decisions
    assert [(int(r["data-epoch"]), float(r["data-metric"]), int(r["data-feedback"])) for r in page.rows] == [
        (d.epoch, d.metrics["l1_delta"], d.feedback_count) for d in decisions]
    assert [(int(p["data-epoch"]), float(p["data-value"])) for p in page.points] == [
        (d.epoch, d.metrics["l1_delta"]) for d in decisions]
    assert len(page.links) == len(decisions) + 1  # one report per epoch, one for the finish
    for link in page.links[:2] + page.links[-1:]:
        assert api_server.fetch(link, cookie=cookie)[0] == 200, link


def test_bad_values_are_refused_naming_them(api_server, view_stores, tmp_path):
    token = api_server.login("viewer")

    def get(path):
        status, _, body = api_server.fetch(path, token)
        return status, body.decode()

    status, body = get(f"/iterations/api/jobs/no-such-job?{q(view_stores.root)}")
    assert status == 404 and "job 'no-such-job' has no checkpoint log" in body
    status, body = get(f"/iterations/jobs/no-such-job?{q(view_stores.root)}")
    assert status == 404 and "job &#x27;no-such-job&#x27; has no checkpoint log" in body
    status, body = get(f"/iterations/api/jobs?{q('/etc')}")
    assert status == 403 and "root '/etc'" in body and "outside the allowed roots" in body
    status, body = get(f"/iterations/api/jobs?{q(view_stores.root + '/..' * 12 + '/etc')}")
    assert status == 403 and "outside the allowed roots" in body
    status, body = get(f"/iterations/api/jobs?{q('relative/store')}")
    assert status == 403 and "must be an absolute path" in body
    missing = str(tmp_path / "no-store")
    status, body = get(f"/iterations/api/jobs?{q(missing)}")
    assert status == 404 and f"no checkpoint store at root '{missing}'" in body and not os.path.exists(missing)
    status, body = get(f"/iterations/api/jobs/{FINISHED_JOB}?{q(view_stores.root, metric='rmse')}")
    assert status == 400 and "metric 'rmse' is not reported by job pr-view" in body
    status, body = get(f"/iterations/jobs/{FINISHED_JOB}/checks/0/{quote('no-such-attempt')}?{q(view_stores.root)}")
    assert status == 404 and "no data-check report of epoch 0 attempt no-such-attempt" in body


@pytest.mark.s3
def test_an_s3_root_is_read_through_the_aws_connection(api_server, view_stores, moto_endpoint, bucket):
    """The same store copied to S3 (moto_server), reached with the API server's ``aws_default``
    connection alone, reads as the local one, and nothing in the bucket changes."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    for dirpath, _, filenames in os.walk(view_stores.root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            key = "ckpt/" + os.path.relpath(path, view_stores.root)
            s3.put_object(Bucket=bucket, Key=key, Body=open(path, "rb").read())

    def listing():
        got = s3.list_objects_v2(Bucket=bucket)
        return sorted((o["Key"], o["ETag"], o["LastModified"]) for o in got.get("Contents", []))

    before = listing()
    token = api_server.login("viewer")
    root = f"s3://{bucket}/ckpt"

    def job(where):
        status, _, body = api_server.fetch(f"/iterations/api/jobs/{FINISHED_JOB}?{q(where)}", token)
        assert status == 200, body
        got = json.loads(body)
        return {k: v for k, v in got.items() if k not in ("root", "store")}, got["store"]

    remote, location = job(root)
    local, _ = job(view_stores.root)
    assert location == f"{root} at {moto_endpoint}" and remote == local  # the endpoint of the connection
    status, _, body = api_server.fetch(f"/iterations/api/jobs?{q(f's3://{bucket}/elsewhere')}", token)
    assert status == 200 and json.loads(body)["jobs"] == []
    status, _, body = api_server.fetch(f"/iterations/api/jobs?{q('s3://Bad_Bucket/x')}", token)
    assert status == 403 and "'Bad_Bucket' is not a valid bucket name" in body.decode()
    assert listing() == before, "the view wrote to the bucket"


def test_a_dag_run_leads_to_its_job_and_batch(api_server, view_stores, view_dag_runs):
    token = api_server.login("viewer")
    assert api_server.fetch("/iterations/runs/iterate_pagerank/b2")[0] == 401
    status, _, location = api_server.fetch("/iterations/runs/iterate_pagerank/b2", token)
    assert status == 307 and location.decode() == f"/iterations/jobs/{FINISHED_JOB}?{q(view_stores.root, batch='b2')}"
    status, _, body = api_server.fetch(location.decode(), token)
    page = _Rows()
    page.feed(body.decode())
    current = [int(r["data-epoch"]) for r in page.rows if "current" in r["class"].split()]
    assert current == view_stores.batches["b2"].epochs_computed and current[0] == view_stores.batches["b1"].checkpoint_id + 1
    status, _, body = api_server.fetch("/iterations/runs/iterate_pagerank/no-such-run", token)
    assert status == 404 and "no run &#x27;no-such-run&#x27; of DAG &#x27;iterate_pagerank&#x27;" in body.decode()
