"""The S3 fault injector (tests only): its settings, and that a client it is installed on fails
the way S3 does, before anything is sent (no endpoint is contacted here)."""

from __future__ import annotations

import pytest

from include.errors import TransientStoreError
from include.process import failpoints
from include.store import RetryPolicy, S3Store


@pytest.fixture(autouse=True)
def no_faults_afterwards():
    yield
    failpoints.configure_s3("")


@pytest.mark.parametrize("text, message", [
    ("rate", "expected rate=, seed=, kinds= or lose_reply="),
    ("speed=3", "expected rate="),
    ("kinds=500|418", r"unknown fault kind\(s\) \['418'\]"),
])
def test_bad_settings_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        failpoints.configure_s3(text)


@pytest.mark.parametrize("kind, seen", [("500", "InternalError"), ("503", "ServiceUnavailable"),
                                        ("throttle", "SlowDown"), ("timeout", "ReadTimeoutError")])
def test_every_call_fails_as_configured_and_is_logged(tmp_path, monkeypatch, kind, seen):
    log = tmp_path / "faults.log"
    monkeypatch.setenv(failpoints.S3_LOG_ENV, str(log))
    failpoints.configure_s3(f"rate=1.0,seed=1,kinds={kind}")
    store = S3Store("bucket-x", "p", endpoint_url="http://127.0.0.1:9", access_key_id="k", secret_access_key="s",
                    retry=RetryPolicy(max_attempts=3, base_delay=0.0), sleep=lambda s: None)
    with pytest.raises(TransientStoreError, match=f"after 3 attempts: .*{seen}"):
        store.get("a/b")
    assert [line.split()[1:] for line in log.read_text().splitlines()] == [[kind, "GET"]] * 3


def test_off_means_nothing_is_installed():
    failpoints.configure_s3("")
    failpoints.install_s3_faults(object())  # would fail on .meta.events if it did anything
