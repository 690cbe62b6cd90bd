"""The Iterations view's endpoints, served by a real ``airflow api-server`` (the plugin mounted
under /iterations), over stores filled by real PageRank runs: what they return equals the
checkpoints, nothing is written, unauthenticated requests are refused, and bad values are
refused naming them. A job is shown only to users who may read the DAG that owns it
(docs/design.md, "Who may do what"; users granted single DAGs: tests.dags.dag_auth), and nothing a store holds
can run as script in the page."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from html import escape
from html.parser import HTMLParser
from urllib.parse import quote, urlencode

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.layout import JobLayout
from include.runs.ownership import JobOwner, claim
from include.store import LocalStore
from tests.dags.airflow_server import _NoRedirect
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
    assert status == 403 and "has a '..' segment" in body
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
    assert status == 403 and "'Bad_Bucket' is not an S3 bucket name" in body.decode()
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


# --- who may see which job (docs/design.md, "Who may do what") -------------------------------------------------

NO_RECORD, DAMAGED = "no owner record", "a damaged owner record"
#: the jobs of ``owned_store`` and who owns each (None: the library runner, no DAG)
OWNERS = {FINISHED_JOB: "dag_a", REFUSED_JOB: "dag_b", "lib-job": None, "old-job": NO_RECORD,
          "damaged-job": DAMAGED, "sched.20260101T000000Z": "dag_a", "sched.20260102T000000Z": "dag_b"}
#: what ``reader_a`` (granted DAG ``dag_a`` only: tests.dags.airflow_server.ApiServer) may see
READER_A_JOBS = sorted(j for j, dag in OWNERS.items() if dag == "dag_a")
NOT_A_JOB_ID = "-not-a-job-id"


@pytest.fixture(scope="module")
def owned_store(view_stores, tmp_path_factory) -> str:
    """A copy of the view's store whose jobs belong to DAG ``dag_a``, DAG ``dag_b``, the library
    runner, nobody (made before owners were recorded) or to a damaged record (``OWNERS``),
    beside a directory under ``jobs/`` that is not a valid job id."""
    root = str(tmp_path_factory.mktemp("owned") / "store")
    shutil.copytree(view_stores.root, root)
    store = LocalStore(root)
    for job_id, dag_id in OWNERS.items():
        if dag_id == NO_RECORD:
            store.delete([JobLayout(job_id).owner()])
            CheckpointLog(store, job_id).control.request_stop("drain")  # some object of its own
        elif dag_id == DAMAGED:
            store.put(JobLayout(job_id).owner(), b'{"format": "iterations.owner/1", "owner": ')
        else:
            claim(store, job_id, JobOwner(dag_id, "spark_jobs.bodies.pagerank:PageRank", {"path": "/data/edges.csv"},
                                          None), take_over=True, claimed_by="tests")
    store.put(f"jobs/{NOT_A_JOB_ID}/owner.json", b"{}")
    return root


class _Links(HTMLParser):
    """The jobs an index page links to."""

    def __init__(self):
        super().__init__()
        self.jobs: list[str] = []
        self._in_job = False

    def handle_starttag(self, tag, attrs):
        self._in_job = tag == "a" and dict(attrs).get("class") == "job"

    def handle_data(self, data):
        if self._in_job:
            self.jobs.append(data)
            self._in_job = False


def same_as_missing(got, missing, name: str, missing_name: str = "no-such-job") -> bool:
    """``got`` is the answer ``missing`` (a 404 for something that does not exist) word for word,
    with ``name`` in place of ``missing_name``."""
    return missing[0] == 404 and got == (404, missing[1], missing[2].replace(missing_name.encode(), name.encode()))


def test_a_job_is_shown_only_to_users_who_may_read_the_dag_that_owns_it(api_server, owned_store):
    reader, viewer = api_server.login("reader_a"), api_server.login("viewer")
    for extra in ({}, {"dag_id": "dag_b"}):  # no request parameter widens what the user sees
        status, _, body = api_server.fetch(f"/iterations/api/jobs?{q(owned_store, **extra)}", reader)
        assert status == 200 and json.loads(body)["jobs"] == READER_A_JOBS, (extra, status, body)
        status, _, body = api_server.fetch(f"/iterations/?{q(owned_store, **extra)}", reader)
        index = _Links()
        index.feed(body.decode())
        assert status == 200 and index.jobs == READER_A_JOBS, (extra, status, body)
    # a user who may read every DAG sees every job (not what is not a job id)
    status, _, body = api_server.fetch(f"/iterations/api/jobs?{q(owned_store)}", viewer)
    assert status == 200 and json.loads(body)["jobs"] == sorted(OWNERS)

    for job in sorted(OWNERS):
        for extra in ({}, {"dag_id": "dag_b"}, {"dag_id": "dag_a"}, {"dag_id": "~"}):
            for path in (f"/iterations/api/jobs/{{}}?{q(owned_store, **extra)}",
                         f"/iterations/jobs/{{}}?{q(owned_store, **extra)}"):
                got = api_server.fetch(path.format(job), reader)
                if job in READER_A_JOBS:
                    assert got[0] == 200, (job, path, got)
                else:  # answered word for word as a job that does not exist
                    missing = api_server.fetch(path.format("no-such-job"), reader)
                    assert b"has no checkpoint log" in missing[2], missing
                    assert same_as_missing(got, missing, job), (job, path, got, missing)
        for path in (f"/iterations/api/jobs/{job}?{q(owned_store)}", f"/iterations/jobs/{job}?{q(owned_store)}"):
            assert api_server.fetch(path, viewer)[0] == 200, (job, path)


class _Stores(HTMLParser):
    """The stores an index page offers: (DAG, root)."""

    def __init__(self):
        super().__init__()
        self.stores: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._href = a.get("href") if tag == "a" and a.get("class") == "store" else None

    def handle_data(self, data):
        if self._href is not None:
            self.stores.append((data, urllib.parse.parse_qs(urllib.parse.urlsplit(self._href).query)["root"][0]))
            self._href = None


def test_the_index_opens_on_the_users_dags_own_stores(api_server, view_dag_runs):
    """Without a root, the index offers the own store of each DAG the user may read (each DAG's
    directory under the local directory, ``dags/<dag_id>/store``) and opens on one of them; a
    store of a DAG the user may not read is neither offered nor readable."""
    local = api_server.env["ITERATIONS_LOCAL_DIR"]
    reader_pr, viewer = api_server.login("reader_pr"), api_server.login("viewer")
    own = os.path.join(local, "dags", "iterate_pagerank", "store")
    status, _, body = api_server.fetch("/iterations/", reader_pr)
    offered = _Stores()
    offered.feed(body.decode())
    assert offered.stores == [("iterate_pagerank", own)], body.decode()[-2000:]
    assert status in (200, 404) and f'value="{own}"' in body.decode(), (status, body[-2000:])
    status, _, body = api_server.fetch("/iterations/", viewer)
    offered = _Stores()
    offered.feed(body.decode())
    assert {d for d, _ in offered.stores} >= {"iterate_pagerank", "iterate_kmeans", "iterate_components"}, offered.stores
    assert all(r == os.path.join(local, "dags", d, "store") for d, r in offered.stores), offered.stores
    kmeans = os.path.join(local, "dags", "iterate_kmeans", "store")
    status, _, body = api_server.fetch(f"/iterations/api/jobs?{q(kmeans)}", reader_pr)
    assert status == 403 and ("outside the allowed roots" in body.decode() or "own directory" in body.decode()), body


def test_a_check_report_is_shown_only_to_users_who_may_see_its_job(api_server, view_stores, owned_store):
    reader, viewer = api_server.login("reader_a"), api_server.login("viewer")
    refused = f"checks/{view_stores.refused_epoch}/{view_stores.refused_attempt}?{q(owned_store)}"
    missing = api_server.fetch(f"/iterations/jobs/no-such-job/{refused}", reader)
    assert missing[0] == 404 and b"job &#x27;no-such-job&#x27; has no checkpoint log" in missing[2], missing
    assert same_as_missing(api_server.fetch(f"/iterations/jobs/{REFUSED_JOB}/{refused}", reader), missing, REFUSED_JOB)
    # to a user who may see every job, a job that does not exist is answered in the same words
    assert api_server.fetch(f"/iterations/jobs/no-such-job/{refused}", viewer) == missing
    assert api_server.fetch(f"/iterations/jobs/{REFUSED_JOB}/{refused}", viewer)[0] == 200

    prefix = f"jobs/{FINISHED_JOB}/checks/"
    epoch, attempt = LocalStore(owned_store).list(prefix)[0].key[len(prefix):].split("/")[:2]
    status, _, body = api_server.fetch(f"/iterations/jobs/{FINISHED_JOB}/checks/{int(epoch)}/{attempt}?"
                                       f"{q(owned_store)}", reader)
    assert status == 200, body


def test_a_dag_run_leads_to_its_job_only_for_users_who_may_see_both(api_server, view_stores, view_dag_runs):
    reader_a, reader_pr, viewer = (api_server.login(u) for u in ("reader_a", "reader_pr", "viewer"))
    run, no_run = "/iterations/runs/iterate_pagerank/b2", "/iterations/runs/iterate_pagerank/no-such-run"
    # reader_a may not read iterate_pagerank's runs: its run is answered as a run that does not exist
    missing = api_server.fetch(no_run, reader_a)
    assert b"no run &#x27;no-such-run&#x27; of DAG &#x27;iterate_pagerank&#x27;" in missing[2], missing
    assert same_as_missing(api_server.fetch(run, reader_a), missing, "b2", "no-such-run")
    # reader_pr may read the DAG's runs, but the run's job was run by the library runner: no DAG
    # owns it, so only a user who may read every DAG sees it
    missing_job = api_server.fetch(f"/iterations/jobs/no-such-job?{q(view_stores.root)}", reader_pr)
    assert same_as_missing(api_server.fetch(run, reader_pr), missing_job, FINISHED_JOB)
    status, _, location = api_server.fetch(run, viewer)
    assert status == 307 and location.decode() == f"/iterations/jobs/{FINISHED_JOB}?{q(view_stores.root, batch='b2')}"


# --- nothing from a store runs as script --------------------------------------------------------

CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
       "frame-ancestors 'self'; base-uri 'none'")
HOSTILE = "\"'><script>alert(1)</script>"


def fetch_headers(api_server, path: str, token: str):
    """(status, headers, body) of a GET with a Bearer token; a redirect is not followed."""
    req = urllib.request.Request(api_server.url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=60) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_html_responses_let_no_script_run(api_server, view_stores):
    token = api_server.login("viewer")
    r = q(view_stores.root)
    pages = {f"/iterations/?{r}": 200, f"/iterations/jobs/{FINISHED_JOB}?{r}": 200,
             f"/iterations/jobs/no-such-job?{r}": 404, f"/iterations/?{q('/etc')}": 403,
             f"/iterations/jobs/{FINISHED_JOB}/checks/0/no-such-attempt?{r}": 404,
             "/iterations/runs/iterate_pagerank/no-such-run": 404}
    for path, expected in pages.items():
        status, headers, _ = fetch_headers(api_server, path, token)
        assert (status, headers.get_content_type()) == (expected, "text/html"), (path, status)
        assert headers.get_all("Content-Security-Policy") == [CSP], (path, headers.items())
        assert headers.get_all("X-Content-Type-Options") == ["nosniff"], (path, headers.items())
    # Great Expectations' page, as the store keeps it: sandboxed
    status, headers, _ = fetch_headers(api_server, endpoints(view_stores)[2], token)
    assert (status, headers.get_content_type()) == (200, "text/html")
    assert headers.get_all("Content-Security-Policy") == ["sandbox"]
    assert headers.get_all("X-Content-Type-Options") == ["nosniff"]
    for path in (f"/iterations/api/jobs?{r}", f"/iterations/api/jobs/{FINISHED_JOB}?{r}",
                 f"/iterations/api/jobs/no-such-job?{r}"):
        status, headers, _ = fetch_headers(api_server, path, token)
        assert headers.get_content_type() == "application/json", (path, status)
        assert headers.get_all("X-Content-Type-Options") == ["nosniff"], (path, headers.items())


def _rewrite_manifest(store: LocalStore, job_id: str, checkpoint_id: int, change) -> None:
    """Change a committed manifest and give it its checksum again (as a writer of the store
    could: the checksum finds damage, not intent)."""
    key = JobLayout(job_id).checkpoint(checkpoint_id)
    d = json.loads(store.get(key))
    d.pop("manifest_sha256")
    change(d)
    canonical = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
    d["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    store.put(key, json.dumps(d, sort_keys=True, indent=1).encode())
    CheckpointLog(store, job_id).load(checkpoint_id, verify="none")  # still a valid manifest


@pytest.fixture(scope="module")
def hostile_store(view_stores, tmp_path_factory) -> str:
    """A copy of the view's store with ``HOSTILE`` in every kind of record the view shows: two
    manifests (checksums recomputed), a publication record, a data-check report, an abort
    record and a retired checkpoint's summary; where a number belongs, too."""
    root = str(tmp_path_factory.mktemp("hostile") / "store")
    shutil.copytree(view_stores.root, root)
    store = LocalStore(root)
    final = CheckpointLog(store, FINISHED_JOB).latest(verify="none")

    def epoch(d):  # batch b2's first checkpoint: its parent is what b2 resumed from
        d.update(parent_id=HOSTILE, committed_at=HOSTILE)
        d["decision"]["reason"] = HOSTILE
        d["decision"]["metrics"][HOSTILE] = 1.0
        d["coordinators"][HOSTILE] = {"seq": 0}
        run = {"dag_id": HOSTILE, "run_id": HOSTILE, "task_id": HOSTILE, "try_number": HOSTILE, "map_index": 1}
        d["history"] = {"run": run, "phases": {"step": HOSTILE, "restore": 1.5, "commit": -1, HOSTILE: 2.0},
                        "attempts": [{"attempt_id": "a1-hostile", "reason": HOSTILE, "run": run, "batch_id": HOSTILE,
                                      "at": HOSTILE}, {"attempt_id": HOSTILE, "reason": None}, HOSTILE]}

    def finish(d):
        d["attempt_id"] = HOSTILE
        d["body"]["params"] = {**(d["body"].get("params") or {}), HOSTILE: HOSTILE}

    _rewrite_manifest(store, FINISHED_JOB, view_stores.batches["b1"].checkpoint_id + 1, epoch)
    _rewrite_manifest(store, FINISHED_JOB, final.checkpoint_id, finish)
    [published] = store.list(f"jobs/{FINISHED_JOB}/published/{final.checkpoint_id:010d}/")
    record = json.loads(store.get(published.key))
    store.put(published.key, json.dumps({**record, "location": HOSTILE, "format": HOSTILE, "at": HOSTILE}).encode())

    refused, epoch_id, attempt = JobLayout(REFUSED_JOB), view_stores.refused_epoch, view_stores.refused_attempt
    key = f"{refused.checks(epoch_id, attempt)}/validation.json"
    result = json.loads(store.get(key))
    result["report"]["counts"] = {"passed": HOSTILE, "failed": 1}
    result["report"]["outcomes"] = [*result["report"].get("outcomes", []), {
        "status": "failed", "name": HOSTILE, "severity": HOSTILE, "observed": {HOSTILE: HOSTILE}, "expected": HOSTILE}]
    store.put(key, json.dumps(result).encode())
    store.put(refused.aborted(epoch_id, attempt), json.dumps(
        {"reason": HOSTILE, "at": HOSTILE, "run": {"runner": "library", "pid": HOSTILE, "host": HOSTILE},
         "batch_id": HOSTILE}).encode())
    summary = json.loads(store.get(refused.retired(0)))
    assert summary["metrics"], summary
    summary["metrics"] = {name: HOSTILE for name in summary["metrics"]}
    summary["history"] = {"attempts": 7, "phases": [HOSTILE], "run": HOSTILE}
    store.put(refused.retired(0), json.dumps(summary).encode())
    return root


class _Parsed(HTMLParser):
    """Every element, text and attribute value of a page, as a browser reads them."""

    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.texts: list[str] = []
        self.attributes: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes += [v for _, v in attrs if v is not None]

    def handle_data(self, data):
        self.texts.append(data)


def test_html_from_the_store_is_shown_as_text(api_server, hostile_store):
    token = api_server.login("viewer")
    for job in (FINISHED_JOB, REFUSED_JOB):
        status, ctype, body = api_server.fetch(f"/iterations/jobs/{job}?{q(hostile_store)}", token)
        assert status == 200 and ctype.startswith("text/html"), (job, status, body[-3000:])
        html = body.decode()
        assert "<script" not in html.lower(), job
        page = _Parsed()
        page.feed(html)
        assert "script" not in page.tags, job
        assert escape(HOSTILE) in html, job
        # what the store holds is what a reader sees, exactly: as text and as attribute values
        assert HOSTILE in page.texts and HOSTILE in page.attributes, (job, page.texts)


# --- locations and records (issue 45) -------------------------------------------------------------


def test_a_damaged_record_is_a_page_naming_it_never_a_traceback(api_server, view_stores, tmp_path):
    """A batch record without its batch id, a data-check result that is not one: the page and
    the JSON say which record, with a 5xx status; nothing is computed on them."""
    root = str(tmp_path / "store")
    shutil.copytree(view_stores.root, root)
    store = LocalStore(root)
    [batch] = [o.key for o in store.list(f"jobs/{FINISHED_JOB}/batches/") if o.key.endswith("b1.json")]
    store.put(batch, json.dumps({"final_checkpoint_id": 2}).encode())
    token = api_server.login("viewer")
    status, ctype, body = api_server.fetch(f"/iterations/jobs/{FINISHED_JOB}?{q(root)}", token)
    assert status == 502 and ctype.startswith("text/html"), (status, body[-2000:])
    assert "is not a batch record: it has no &#x27;batch_id&#x27;" in body.decode() and "b1.json" in body.decode()
    assert "Traceback" not in body.decode()
    status, _, body = api_server.fetch(f"/iterations/api/jobs/{FINISHED_JOB}?{q(root)}", token)
    assert status == 502 and "is not a batch record" in json.loads(body)["detail"], body
    store.put(batch, json.dumps({"batch_id": "b1", "final_checkpoint_id": 2}).encode())
    refused, epoch_id, attempt = JobLayout(REFUSED_JOB), view_stores.refused_epoch, view_stores.refused_attempt
    store.put(f"{refused.checks(epoch_id, attempt)}/validation.json", b"[1, 2]")
    status, _, body = api_server.fetch(f"/iterations/jobs/{REFUSED_JOB}?{q(root)}", token)
    assert status == 502 and "is not a data-check result" in body.decode(), (status, body[-2000:])


def test_the_view_reads_the_roots_a_dags_runs_may_use(api_server, view_stores, view_dag_runs, tmp_path):
    """A DAG whose default checkpoint root lies outside the view's own local directory and the
    deployment's roots: its runs may use it, so the view reads it too (one rule for both); a
    place no readable DAG allows stays refused."""
    elsewhere = f"/var/tmp/iterations-view-{os.getpid()}"
    store_root = f"{elsewhere}/dags/iterate_pagerank/store"  # its default checkpoint root, parsed as below
    shutil.rmtree(elsewhere, ignore_errors=True)
    shutil.copytree(view_stores.root, store_root)  # (the parents made too)
    token = api_server.login("viewer")
    # written now, not skipped for its last write's age (min_serialized_dag_update_interval)
    fresh = {**api_server.env, "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0"}
    try:
        status, _, body = api_server.fetch(f"/iterations/api/jobs?{q(store_root)}", token)
        assert status == 403 and "outside the allowed roots" in body.decode(), body
        done = api_server.cli("dags", "reserialize", env={**fresh, "ITERATIONS_LOCAL_DIR": elsewhere})
        assert done.returncode == 0, done.stderr[-3000:]
        status, _, body = api_server.fetch(f"/iterations/api/jobs?{q(store_root)}", token)
        assert status == 200 and FINISHED_JOB in json.loads(body)["jobs"], body
        status, _, body = api_server.fetch(f"/iterations/api/jobs?{q('/var/tmp')}", token)
        assert status == 403, body
    finally:
        assert api_server.cli("dags", "reserialize", env=fresh).returncode == 0
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_a_run_conf_key_the_dag_has_no_param_for_is_refused_when_triggered(api_server, view_dag_runs):
    """The trigger form and the REST API: the API server answers 400 naming the key and the
    nearest param; nothing is created. A conf of known keys is accepted as before."""
    import urllib.error

    before = len(api_server.runs("iterate_pagerank"))
    for path, body in (("/api/v2/dags/iterate_pagerank/dagRuns", {"logical_date": None, "conf": {"tolerence": 0.1}}),
                       ("/api/v2/backfills", {"dag_id": "iterate_pagerank", "from_date": "2026-01-01T00:00:00Z",
                                              "to_date": "2026-01-02T00:00:00Z", "dag_run_conf": {"tolerence": 1}})):
        with pytest.raises(urllib.error.HTTPError) as e:
            api_server.post(path, body)
        detail = json.loads(e.value.read())["detail"]
        assert e.value.code == 400 and "'tolerence' (did you mean 'tolerance'?)" in detail, detail
    assert len(api_server.runs("iterate_pagerank")) == before, "no run was created"
    run_id = api_server.trigger("iterate_pagerank", {"tolerance": 0.1, "continuation": False})
    assert run_id and len(api_server.runs("iterate_pagerank")) == before + 1


def test_the_view_of_a_store_a_real_dag_run_wrote(api_server, airflow_env, tmp_path):
    """Not a library run's store with runs patched to success: ``airflow dags test`` of the
    PageRank DAG records its run in the API server's database and writes its job to the store
    (on the DAG tests' Spark Connect server); the run's link leads to its job and batch, and
    the job's epochs, batch, checks and published output are what the run did."""
    import re

    from tests.helpers import graph_with_dangling, write_edges

    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(20, 0.15, seed=8))
    root, out = str(tmp_path / "store"), str(tmp_path / "out")
    conf = {"job_id": "pr-real", "input_path": edges, "checkpoint_root": root, "output_path": out, "max_epochs": 3,
            "tolerance": 0, "num_partitions": 2, "continuation": False, "retain_last": 10}  # nothing retired
    env = {**api_server.env, **{k: airflow_env[k] for k in ("ITERATIONS_SPARK_CONNECT_PORT",
                                                            "ITERATIONS_SPARK_CONNECT_DIR")}}
    done = api_server.cli("dags", "test", "iterate_pagerank", "--conf", json.dumps(conf), env=env, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "state=success" in log, log[-5000:]
    [run] = [r for r in api_server.runs("iterate_pagerank") if (r.get("conf") or {}).get("job_id") == "pr-real"]
    run_id = run["dag_run_id"]
    assert run["state"] == "success"

    token = api_server.login("viewer")
    status, _, body = api_server.fetch(f"/iterations/api/jobs/pr-real?{q(root)}", token)
    assert status == 200, body
    got = json.loads(body)
    assert (got["job_id"], got["status"]) == ("pr-real", "TERMINATED")
    assert [(e["epoch"], e["status"]) for e in got["epochs"]] == [(0, "committed"), (1, "committed"), (2, "committed")]
    committed = {int(m[1]): float(m[2]) for m in re.finditer(r"epoch (\d+) committed: feedback=\d+ l1_delta=(\S+)", log)}
    assert sorted(committed) == [0, 1, 2]
    for e in got["epochs"]:
        assert e["metrics"]["l1_delta"] == pytest.approx(committed[e["epoch"]], rel=1e-3)
        assert e["checks"] and all(c["success"] for c in e["checks"]), e["checks"]
    [batch] = got["batches"]
    [ranks] = got["finish"]["outputs"]
    assert (ranks["name"], ranks["state"], ranks["location"]) == ("ranks", "PUBLISHED", os.path.join(out, "ranks"))

    status, _, location = api_server.fetch(f"/iterations/runs/iterate_pagerank/{quote(run_id, safe='')}", token)
    assert status == 307 and location.decode() == f"/iterations/jobs/pr-real?{q(root, batch=batch['batch_id'])}", \
        (status, location)
    status, _, body = api_server.fetch(location.decode(), token)
    page = _Rows()
    page.feed(body.decode())
    assert [int(r["data-epoch"]) for r in page.rows if "current" in r["class"].split()] == [0, 1, 2]
