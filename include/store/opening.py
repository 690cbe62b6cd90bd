"""Opening a store from its URL (``open_store``) or its spec (``store_from_spec``)."""

from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import urlparse

from include.errors import ConfigError, StoreError
from include.store.base import ObjectStore
from include.store.local import LocalStore
from include.store.s3 import S3Store


def open_store(url: str, **options: Any) -> ObjectStore:
    """Open a store from a URL: ``s3://bucket/prefix`` or a local path / ``file://`` URL.

    S3 options: endpoint_url, region, access_key_id, secret_access_key, session_token, retry,
    connect_timeout, read_timeout, sleep, probe_conditional_writes (False: never probe the
    endpoint in ``check_conditional_writes``). Unset endpoint and region fall back to boto3's
    environment (AWS_ENDPOINT_URL_S3, AWS_REGION).
    Local options: fsync, create (False: the root must exist already; nothing is created).
    Each kind accepts and ignores the other's options, so one set of settings serves both.
    Opening a store never writes to it (``create`` aside) nor probes it.
    """
    if not url or not isinstance(url, str):
        raise ConfigError(f"store URL must be a non-empty string, got {url!r}")
    parsed = urlparse(url)
    if parsed.scheme in ("s3", "s3a"):
        if not parsed.netloc:
            raise ConfigError(f"S3 URL {url!r} has no bucket: use s3://bucket/prefix")
        allowed = {"endpoint_url", "region", "access_key_id", "secret_access_key",
                   "session_token", "retry", "connect_timeout", "read_timeout", "sleep",
                   "probe_conditional_writes"}
        unknown = set(options) - allowed - _LOCAL_OPTIONS
        if unknown:
            raise ConfigError(f"unknown S3 store options {sorted(unknown)}; accepted: {sorted(allowed)}")
        s3_options = {k: v for k, v in options.items() if k in allowed}
        return S3Store(bucket=parsed.netloc, prefix=parsed.path.strip("/"), **s3_options)
    if parsed.scheme == "file":
        return LocalStore(parsed.path, **_local_options(options))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return LocalStore(url, **_local_options(options))
    raise ConfigError(f"unsupported store URL {url!r}: use s3://bucket/prefix or a local path")


_LOCAL_OPTIONS = frozenset({"fsync", "create"})


def _local_options(options: Mapping[str, Any]) -> dict[str, Any]:
    # S3-only options are ignored for local paths so one set of settings serves both.
    return {k: v for k, v in options.items() if k in _LOCAL_OPTIONS}


def store_from_spec(spec: Mapping[str, Any], **secrets: Any) -> ObjectStore:
    kind = spec.get("kind")
    if kind == "local":
        return LocalStore(spec["root"])
    if kind == "s3":
        return S3Store(
            bucket=spec["bucket"],
            prefix=spec.get("prefix", ""),
            endpoint_url=spec.get("endpoint_url"),
            region=spec.get("region"),
            **secrets,
        )
    raise StoreError(f"unknown store kind {kind!r} in spec {dict(spec)}")
