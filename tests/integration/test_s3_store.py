"""The S3 store against moto_server over real HTTP."""

from __future__ import annotations

import http.client
import http.server
import threading

import pytest

from include.errors import ConfigError, ObjectNotFound, PermanentStoreError, TransientStoreError
from include.store import RetryPolicy, S3Store, open_store

pytestmark = pytest.mark.s3

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.02)
TRUST_CONDITIONAL_WRITES_ENV = "ITERATIONS_TRUST_CONDITIONAL_WRITES"  # the deployment's switch


def make(endpoint, bucket, **kw) -> S3Store:
    return S3Store(bucket, "jobs-root", endpoint_url=endpoint, region="us-east-1", retry=FAST, **kw)


def test_round_trip(moto_endpoint, bucket):
    store = make(moto_endpoint, bucket)
    store.check_reachable()
    store.put("a/one", b"1")
    store.put("a/two", b"22")
    assert store.get("a/two") == b"22"
    assert [(o.key, o.size) for o in store.list("a/")] == [("a/one", 1), ("a/two", 2)]
    assert store.info("a/one").size == 1 and store.info("a/none") is None
    store.delete(["a/one", "a/none"])
    assert [o.key for o in store.list("")] == ["a/two"]
    with pytest.raises(ObjectNotFound, match=f"s3://{bucket}/jobs-root/a/one"):
        store.get("a/one")


def test_list_pages_past_1000_keys(moto_endpoint, bucket):
    store = make(moto_endpoint, bucket)
    for i in range(1005):
        store.put(f"many/{i:05d}", b"")
    assert len(store.list("many/")) == 1005


def test_second_create_if_absent_gets_412(moto_endpoint, bucket):
    store = make(moto_endpoint, bucket)
    assert store.put_if_absent("ck/0001.json", b"winner") is True
    assert store.put_if_absent("ck/0001.json", b"loser") is False
    assert store.get("ck/0001.json") == b"winner"


def test_lost_response_retry_reads_as_exists(moto_endpoint, bucket):
    """S3 accepts the conditional PUT, the reply is lost: the retry gets 412 and the caller can
    read the object back and see its own write (the checkpoint log does exactly that)."""
    from botocore.exceptions import ConnectionClosedError

    store = make(moto_endpoint, bucket)
    calls = {"n": 0}

    def drop_first_reply(http_response, parsed, model, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionClosedError(endpoint_url=moto_endpoint)

    store.client.meta.events.register("after-call.s3.PutObject", drop_first_reply)
    assert store.put_if_absent("ck/0002.json", b"mine") is False
    assert calls["n"] == 2, "the write landed once and was retried once"
    assert store.get("ck/0002.json") == b"mine"


def test_transient_errors_are_retried(moto_endpoint, bucket):
    store = make(moto_endpoint, bucket)
    failures = {"left": 2}

    def throttle(request, **kwargs):
        if failures["left"]:
            failures["left"] -= 1
            from botocore.awsrequest import AWSResponse

            class Raw:
                def stream(self, **kw):
                    yield b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"

            return AWSResponse(request.url, 503, {}, Raw())
        return None

    store.client.meta.events.register("before-send.s3.PutObject", throttle)
    store.put("t/x", b"ok")
    assert failures["left"] == 0 and store.get("t/x") == b"ok"


def test_retries_are_bounded(moto_endpoint, bucket):
    store = make(moto_endpoint, bucket)

    def always_503(request, **kwargs):
        from botocore.awsrequest import AWSResponse

        class Raw:
            def stream(self, **kw):
                yield b"<Error><Code>ServiceUnavailable</Code><Message>down</Message></Error>"

        return AWSResponse(request.url, 503, {}, Raw())

    store.client.meta.events.register("before-send.s3.GetObject", always_503)
    with pytest.raises(TransientStoreError, match=r"GET s3://.*/jobs-root/t/y .*after 4 attempts"):
        store.get("t/y")


def test_missing_bucket_fails_at_once_naming_it(moto_endpoint):
    sleeps = []
    store = S3Store("no-such-bucket-here", "p", endpoint_url=moto_endpoint, region="us-east-1",
                    retry=FAST, sleep=sleeps.append)
    with pytest.raises(PermanentStoreError, match="no-such-bucket-here.*NoSuchBucket.*does not exist"):
        store.put("k", b"x")
    assert sleeps == [], "a permanent error is not retried"


def test_unreachable_endpoint_names_the_store():
    from tests.conftest import free_port

    store = S3Store("some-bucket", "p", endpoint_url=f"http://127.0.0.1:{free_port()}",
                    region="us-east-1", retry=FAST, connect_timeout=0.5)
    with pytest.raises(TransientStoreError, match=r"s3://some-bucket/p/k at http://127.0.0.1:\d+ still failing after 4 attempts"):
        store.get("k")


def test_checkpoint_commit_survives_a_lost_reply(moto_endpoint, bucket):
    """The manifest's conditional PUT lands on S3 but its reply is lost: the store retries, gets
    412, the log reads the manifest back, finds its own attempt and reports success; a rival
    attempt is superseded; the checkpoint verifies in full."""
    from botocore.exceptions import ReadTimeoutError

    from include.checkpoints.checkpoint_log import CheckpointLog
    from include.errors import CheckpointSuperseded
    from tests.unit.checkpoints.test_checkpoint_log import write_attempt

    store = make(moto_endpoint, bucket)
    log = CheckpointLog(store, "job-s3")
    mine, rival = write_attempt(log, 0, "mine", None), write_attempt(log, 0, "rival", None)
    lost = {"n": 0}

    def lose_manifest_reply(http_response, parsed, model, context=None, **kwargs):
        if context and "checkpoints/" in str(context.get("input_params", {}).get("Key", "")) and not lost["n"]:
            lost["n"] += 1
            raise ReadTimeoutError(endpoint_url=moto_endpoint)

    store.client.meta.events.register("after-call.s3.PutObject", lose_manifest_reply)
    outcome = log.commit(mine)
    assert lost["n"] == 1 and outcome.first_write is False
    assert log.load(0, verify="full").attempt_id == "mine"
    with pytest.raises(CheckpointSuperseded, match="committed by mine; attempt rival is superseded"):
        log.commit(rival)


# --- conditional-write probe -------------------------------------------------------------------


class _DropIfNoneMatch(http.server.BaseHTTPRequestHandler):
    """Forwards every request to moto_server without its If-None-Match header: an S3 endpoint
    that ignores conditional writes, seen over real HTTP."""

    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("if-none-match", "connection", "keep-alive", "expect")}
        self.server.stripped += "If-None-Match" in self.headers
        upstream = http.client.HTTPConnection(self.server.upstream, timeout=30)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            reply = upstream.getresponse()
            data = reply.read()
        finally:
            upstream.close()
        self.send_response(reply.status, reply.reason)
        for k, v in reply.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "keep-alive", "content-length"):
                self.send_header(k, v)
        length = reply.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def ignoring_endpoint(moto_endpoint):
    """An endpoint in front of moto_server that drops If-None-Match; its server counts them."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DropIfNoneMatch)
    server.daemon_threads = True
    server.upstream = moto_endpoint.removeprefix("http://")
    server.stripped = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url_of(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(autouse=True)
def probe_not_skipped(monkeypatch):
    monkeypatch.delenv(TRUST_CONDITIONAL_WRITES_ENV, raising=False)


def count_requests(store: S3Store) -> list[str]:
    sent: list[str] = []
    store.client.meta.events.register("before-send.s3", lambda request, **kw: sent.append(request.method))
    return sent


def test_conditional_write_probe_passes_where_if_none_match_is_honoured(moto_endpoint, bucket):
    store = make(moto_endpoint, bucket)
    sent = count_requests(store)
    store.check_conditional_writes()
    assert sent == ["PUT", "PUT", "POST"], "two creates of one scratch key, then its delete"
    assert store.list("") == [], "the scratch object is gone"
    sent.clear()
    again = make(moto_endpoint, bucket)
    again_sent = count_requests(again)
    store.check_conditional_writes()
    again.check_conditional_writes()
    assert sent == [] and again_sent == [], "once per process per endpoint and bucket"
    assert "probe" not in str(store.spec())


def test_a_probe_that_failed_transiently_is_not_taken_as_passed(moto_endpoint, bucket):
    from botocore.awsrequest import AWSResponse

    flaky = make(moto_endpoint, bucket, sleep=lambda s: None)

    def always_503(request, **kwargs):
        class Raw:
            def stream(self, **kw):
                yield b"<Error><Code>ServiceUnavailable</Code><Message>down</Message></Error>"

        return AWSResponse(request.url, 503, {}, Raw())

    flaky.client.meta.events.register("before-send.s3.PutObject", always_503)
    with pytest.raises(TransientStoreError, match=r"conditional PUT .*_iterations/probe/.* after 4 attempts"):
        flaky.check_conditional_writes()
    store = make(moto_endpoint, bucket)
    sent = count_requests(store)
    store.check_conditional_writes()
    assert sent == ["PUT", "PUT", "POST"], "probed again after the failure"


def test_endpoint_that_ignores_if_none_match_is_refused(ignoring_endpoint, moto_endpoint, bucket):
    endpoint = url_of(ignoring_endpoint)
    store = make(endpoint, bucket)
    # The hazard: through this endpoint a second create-if-absent also "wins".
    stripped = ignoring_endpoint.stripped
    assert store.put_if_absent("ck/0001.json", b"winner") is True
    assert store.put_if_absent("ck/0001.json", b"loser") is True
    assert store.get("ck/0001.json") == b"loser"
    assert ignoring_endpoint.stripped == stripped + 2, "the header was sent, and dropped on the way"

    message = (rf"the S3 endpoint {endpoint} ignores conditional writes \(If-None-Match: \*\) in bucket "
               rf"{bucket}: .*exactly-once checkpoint commits cannot be guaranteed there.*"
               rf"{TRUST_CONDITIONAL_WRITES_ENV}=1.*probe_conditional_writes=False")
    with pytest.raises(PermanentStoreError, match=message):
        store.check_conditional_writes()
    assert [o.key for o in store.list("")] == ["ck/0001.json"], "the scratch object is deleted"
    sent = count_requests(store)
    with pytest.raises(PermanentStoreError, match=message):
        store.check_conditional_writes()
    assert sent == [], "the verdict is kept: not probed twice"

    # The same bucket through moto directly honours If-None-Match.
    make(moto_endpoint, bucket).check_conditional_writes()


def test_the_probe_can_be_skipped_by_the_deployment(ignoring_endpoint, bucket, monkeypatch):
    endpoint = url_of(ignoring_endpoint)
    trusted = make(endpoint, bucket, probe_conditional_writes=False)
    sent = count_requests(trusted)
    trusted.check_conditional_writes()
    opened = open_store(f"s3://{bucket}/p", endpoint_url=endpoint, probe_conditional_writes=False)
    assert isinstance(opened, S3Store) and opened.probe_conditional_writes is False
    opened.check_conditional_writes()
    monkeypatch.setenv(TRUST_CONDITIONAL_WRITES_ENV, "1")
    store = make(endpoint, bucket)
    store_sent = count_requests(store)
    store.check_conditional_writes()
    assert sent == [] and store_sent == [], "nothing probed"
    monkeypatch.setenv(TRUST_CONDITIONAL_WRITES_ENV, "maybe")
    with pytest.raises(ConfigError, match=f"{TRUST_CONDITIONAL_WRITES_ENV} must be 1 .* got 'maybe'"):
        store.check_conditional_writes()
    monkeypatch.setenv(TRUST_CONDITIONAL_WRITES_ENV, "0")
    with pytest.raises(PermanentStoreError, match="ignores conditional writes"):
        store.check_conditional_writes()


# --- permanent errors: hints ---------------------------------------------------------------------


def error_reply(status: int, code: str, message: str):
    from botocore.awsrequest import AWSResponse

    def reply(request, **kwargs):
        class Raw:
            def stream(self, **kw):
                yield f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()

        return AWSResponse(request.url, status, {}, Raw())

    return reply


def test_skewed_clock_is_not_reported_as_bad_credentials(moto_endpoint, bucket):
    sleeps = []
    store = make(moto_endpoint, bucket, sleep=sleeps.append)
    store.client.meta.events.register("before-send.s3.GetObject", error_reply(
        403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large."))
    with pytest.raises(PermanentStoreError) as caught:
        store.get("a/b")
    message = str(caught.value)
    assert "failed with RequestTimeTooSkewed" in message and "clock" in message and "NTP" in message
    assert "credentials" not in message
    assert sleeps == [], "not retried"


def test_unknown_403_code_gets_the_status_hint_and_the_endpoints_message(moto_endpoint, bucket):
    store = make(moto_endpoint, bucket)
    store.client.meta.events.register("before-send.s3.GetObject", error_reply(
        403, "SomethingNew", "Why the endpoint refused."))
    with pytest.raises(PermanentStoreError, match=r"failed with SomethingNew \(access denied \(HTTP 403\): "
                                                  r"check the credentials\): Why the endpoint refused\."):
        store.get("a/b")


def test_a_job_on_an_endpoint_that_ignores_if_none_match_refuses_to_run(ignoring_endpoint, bucket, tmp_path):
    """The probe runs as every run starts (include.runs.boundary.start_run): on such an endpoint the
    job is refused before it writes anything (no store marker, owner or lease)."""
    from include.contract.config import JobConfig
    from include.epoch.job import IterationJob
    from include.runs.boundary import start_run
    from include.runs.leases import Holder

    endpoint = url_of(ignoring_endpoint)
    cfg = JobConfig(job_id="pr", body="pagerank", input=str(tmp_path / "edges.csv"),
                    checkpoint_root=f"s3://{bucket}/refused")
    job = IterationJob(cfg, store_options={"endpoint_url": endpoint})
    with pytest.raises(PermanentStoreError, match=f"the S3 endpoint {endpoint} ignores conditional writes"):
        start_run(job, Holder.this_process())
    assert job.store.list("") == [], "nothing written"
