"""The S3 store against moto_server over real HTTP."""

from __future__ import annotations

import pytest

from include.errors import ObjectNotFound, PermanentStoreError, TransientStoreError
from include.store import RetryPolicy, S3Store

pytestmark = pytest.mark.s3

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.02)


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

    from include.checkpoint import CheckpointLog
    from include.errors import CheckpointSuperseded
    from tests.unit.test_checkpoint_log import write_attempt

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
