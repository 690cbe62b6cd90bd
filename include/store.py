"""Object stores behind one small interface: a local directory (the embedded default) and S3.

Keys are relative, '/'-separated paths. ``put_if_absent`` is the one atomic primitive the
checkpoint protocol needs: exactly one of several concurrent writers of a key wins.

* LocalStore: write to a temporary file, fsync, then ``os.link`` it to the final name
  (link fails if the name exists, so the visible object is always complete and unique).
* S3Store: ``PutObject`` with ``If-None-Match: *`` (HTTP 412 when the key exists).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlparse

from include.errors import (
    ConfigError,
    ObjectNotFound,
    PermanentStoreError,
    StoreError,
    TransientStoreError,
)

log = logging.getLogger(__name__)

_TMP_MARK = ".tmp-"
_BAD_KEY = re.compile(r"(^/)|(^|/)\.\.?(/|$)|//|\\|\x00")
# A checkpoint store marks its root with this object (include.protocol.mark_store): no output
# is ever published inside a store (include.outputs.check_not_in_store).
STORE_MARKER = "_iterations/store.json"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_key(key: str) -> str:
    """Refuse keys that could escape the store's root (``..``, absolute paths, empty parts)."""
    if not isinstance(key, str) or not key or _BAD_KEY.search(key) or key.endswith("/"):
        raise PermanentStoreError(
            f"invalid object key {key!r}: keys are relative '/'-separated paths without "
            "'.' or '..' segments, empty segments or backslashes"
        )
    return key


def join_key(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter for transient store errors."""

    max_attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ConfigError(
                f"retry delays must be >= 0, got base={self.base_delay} max={self.max_delay}"
            )

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))


class ObjectStore(ABC):
    """What the checkpoint log needs from a store. Implementations must be picklable
    (Spark executors receive them inside the tail's closure)."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write (or replace) an object; readers see either the old or the whole new object."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object only if the key is free. True if this call created it."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """Read an object; ObjectNotFound if absent."""

    @abstractmethod
    def info(self, key: str) -> ObjectInfo | None:
        """Size of an object, or None if absent."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; absent keys are ignored."""

    @abstractmethod
    def location(self, key: str = "") -> str:
        """A human-readable address of a key, for messages."""

    def url(self, key: str) -> str:
        """The address other tools open a key by: a local path or s3://bucket/key."""
        return self.location(key)

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """JSON-able description without secrets, enough to reopen the store elsewhere."""

    def exists(self, key: str) -> bool:
        return self.info(key) is not None

    def local_path(self, key: str) -> str | None:
        """Filesystem path of a key when the store is a local directory."""
        return None

    def marker_above(self, key: str, marker: str) -> str | None:
        """Where ``marker`` lies in the directory of ``key`` or in one of its ancestors, up to
        the top of the filesystem or the bucket (beyond this store's own root): the location of
        the first such directory, None if there is none."""
        parts = [p for p in key.split("/") if p]
        for n in range(len(parts), -1, -1):
            prefix = "/".join(parts[:n])
            if self.exists(f"{prefix}/{marker}" if prefix else marker):
                return self.location(prefix)
        return None

    def check_reachable(self) -> None:
        """Fail fast, naming the store, if it cannot be used at all."""
        self.list("__probe__/")

    def check_conditional_writes(self) -> None:
        """Fail with PermanentStoreError, naming the store, if ``put_if_absent`` is not really
        exclusive here (a second create of a key also "wins"), so that a job does not start
        committing checkpoints on a store where two attempts could both believe they committed.
        Writes (a scratch object, removed again) where a check is needed: call it from code
        that is about to write anyway, never from read-only users. Idempotent and cheap when
        repeated. Default: nothing to check (a store whose exclusive create is atomic by
        construction, or one that cannot write at all)."""


class LocalStore(ObjectStore):
    """A directory on the local filesystem."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True, create: bool = True):
        """``create=False``: open an existing root only; a missing one is a PermanentStoreError
        naming it, and nothing is created."""
        self.root = os.path.abspath(os.fspath(root))
        self.fsync = fsync
        if not create:
            if not os.path.isdir(self.root):
                what = "is not a directory" if os.path.exists(self.root) else "does not exist"
                raise PermanentStoreError(
                    f"local store root {self.root} {what} (opened without creating it)"
                )
            return
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as e:
            raise PermanentStoreError(f"cannot create local store root {self.root}: {e}") from e

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def local_path(self, key: str) -> str:
        return self._path(key)

    def location(self, key: str = "") -> str:
        return self._path(key) if key else self.root

    def spec(self) -> dict[str, Any]:
        return {"kind": "local", "root": self.root}

    def _write_tmp(self, path: str, data: bytes) -> str:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}{_TMP_MARK}{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        return tmp

    def _fsync_dir(self, path: str) -> None:
        if not self.fsync:
            return
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)
        self._fsync_dir(path)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, path)  # atomic, fails with EEXIST if the name is taken
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        self._fsync_dir(path)
        return True

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise ObjectNotFound(path) from None

    def info(self, key: str) -> ObjectInfo | None:
        try:
            return ObjectInfo(key, os.stat(self._path(key)).st_size)
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        if prefix.rstrip("/"):
            check_key(prefix.rstrip("/"))
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(self.root, *base.split("/")) if base else self.root
        out: list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(start):
            rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel = "" if rel == "." else rel + "/"
            for name in files:
                key = rel + name
                if _TMP_MARK in name or not key.startswith(prefix):
                    continue
                try:
                    size = os.stat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    continue  # deleted while listing
                out.append(ObjectInfo(key, size))
        out.sort(key=lambda o: o.key)
        return out

    def delete(self, keys: Iterable[str]) -> None:
        dirs: set[str] = set()
        for key in keys:
            path = self._path(key)
            try:
                os.unlink(path)
                dirs.add(os.path.dirname(path))
            except FileNotFoundError:
                pass
        # Remove directories left empty, deepest first, never the root.
        for d in sorted(dirs, key=len, reverse=True):
            while d.startswith(self.root + os.sep):
                try:
                    os.rmdir(d)
                except OSError:
                    break
                d = os.path.dirname(d)

    def check_reachable(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise PermanentStoreError(f"local store root {self.root} is not writable")

    def check_conditional_writes(self) -> None:
        """Nothing to check: ``put_if_absent`` links a complete file to its name, and linking
        to a taken name fails with EEXIST: exactly one creator wins, by construction."""

    def marker_above(self, key: str, marker: str) -> str | None:
        path = self._path(key) if key else self.root
        while True:
            if os.path.isfile(os.path.join(path, *marker.split("/"))):
                return path
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent


# --- S3 --------------------------------------------------------------------------------------

_TRANSIENT_CODES = {
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeoutException",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "ConditionalRequestConflict",
    "OperationAborted",
    "500",
    "502",
    "503",
    "504",
}

_PERMANENT_HINTS = {
    "NoSuchBucket": "the bucket does not exist",
    "AccessDenied": "access denied: check the credentials and the bucket policy",
    "InvalidAccessKeyId": "the access key id is not known to the endpoint",
    "SignatureDoesNotMatch": "the secret key does not match the access key id",
    "InvalidBucketName": "the bucket name is not valid",
    "AllAccessDisabled": "all access to this object has been disabled",
    "RequestTimeTooSkewed": "the clocks differ too much: this machine's clock and the endpoint's "
    "are further apart than the endpoint allows (15 minutes on AWS); fix this machine's clock, "
    "e.g. enable NTP time synchronisation",
    # By status, only for codes without a hint of their own (a code's hint always wins).
    "403": "access denied (HTTP 403): check the credentials",
}

TRUST_CONDITIONAL_WRITES_ENV = "ITERATIONS_TRUST_CONDITIONAL_WRITES"
PROBE_PREFIX = "_iterations/probe/"


class _ProbeSlot:
    """The conditional-write verdict of one (endpoint, bucket) in this process: None while
    undecided, "" when the endpoint refused the second create, else the refusal message."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.verdict: str | None = None


_PROBES: dict[tuple[str, str], _ProbeSlot] = {}
_PROBES_LOCK = threading.Lock()


def conditional_writes_trusted_by_environment() -> bool:
    """True when the deployment sets ITERATIONS_TRUST_CONDITIONAL_WRITES=1 (or true/yes):
    every store is taken to honour If-None-Match and never probed."""
    value = os.environ.get(TRUST_CONDITIONAL_WRITES_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ConfigError(
        f"{TRUST_CONDITIONAL_WRITES_ENV} must be 1 (skip the conditional-write probe) or 0/unset "
        f"(probe), got {value!r}"
    )


@dataclass
class S3Store(ObjectStore):
    """A bucket and key prefix on S3 or an S3-compatible endpoint (MinIO, moto_server).

    Credentials are taken from the arguments, else from boto3's usual chain (environment,
    shared config, instance role). They are never part of ``spec()``.
    """

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    # False: check_conditional_writes() trusts the endpoint without probing it. Deliberately not
    # part of spec(): trusting an endpoint is the deployment's decision for the process that
    # commits, not a property of the data that travels in plans and manifests.
    probe_conditional_writes: bool = True

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", self.bucket or ""):
            raise ConfigError(
                f"invalid S3 bucket name {self.bucket!r}: 3-63 characters of lowercase "
                "letters, digits, '.' and '-'"
            )
        self.prefix = self.prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["sleep"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.sleep is None:
            self.sleep = time.sleep

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            session = boto3.session.Session(
                aws_access_key_id=self.access_key_id,
                aws_secret_access_key=self.secret_access_key,
                aws_session_token=self.session_token,
                region_name=self.region,
            )
            config = Config(
                # Retries are ours (see _call), so that every transient error is counted,
                # logged and bounded in one place.
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=self.connect_timeout,
                read_timeout=self.read_timeout,
                s3={"addressing_style": "path"} if self.endpoint_url else None,
                region_name=self.region or session.region_name or "us-east-1",
            )
            client = session.client("s3", endpoint_url=self.endpoint_url, config=config)
            from include.failpoints import install_s3_faults

            install_s3_faults(client, self.endpoint_url)  # tests only: nothing unless configured
            self._client = client
        return self._client

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def location(self, key: str = "") -> str:
        full = "/".join(p for p in (self.prefix, key) if p)
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{full}{where}"

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def spec(self) -> dict[str, Any]:
        return {
            "kind": "s3",
            "bucket": self.bucket,
            "prefix": self.prefix,
            "endpoint_url": self.endpoint_url,
            "region": self.region,
        }

    def _call(self, what: str, key: str, fn: Callable[[], Any]) -> Any:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionError as BotoConnectionError,
            HTTPClientError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        where = self.location(key)
        for attempt in range(self.retry.max_attempts):
            try:
                return fn()
            except ClientError as e:
                err = e.response.get("Error", {})
                code = str(err.get("Code", ""))
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in _TRANSIENT_CODES or (status and status >= 500) or status == 429:
                    failure = f"{code or status}: {err.get('Message', '')}".strip()
                else:
                    raise PermanentStoreError(
                        f"{what} {where} failed with {code or status}"
                        + _permanent_hint(code, status, str(err.get("Message", "")))
                    ) from e
            except (NoCredentialsError, PartialCredentialsError) as e:
                raise PermanentStoreError(
                    f"{what} {where}: no usable S3 credentials ({e}); set them on the store, "
                    "in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or in an Airflow aws connection"
                ) from e
            except (BotoConnectionError, HTTPClientError, OSError) as e:
                failure = f"{type(e).__name__}: {e}"
            except BotoCoreError as e:
                raise PermanentStoreError(f"{what} {where} failed: {e}") from e
            if attempt + 1 < self.retry.max_attempts:
                delay = self.retry.delay(attempt)
                log.warning(
                    "%s %s: transient error (%s), retry %d/%d in %.2fs",
                    what, where, failure, attempt + 1, self.retry.max_attempts - 1, delay,
                )
                self.sleep(delay)
        raise TransientStoreError(
            f"{what} {where} still failing after {self.retry.max_attempts} attempts: {failure}"
        )

    def put(self, key: str, data: bytes) -> None:
        k = self._key(key)
        self._call("PUT", key, lambda: self.client.put_object(Bucket=self.bucket, Key=k, Body=data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        k = self._key(key)

        def put():
            try:
                self.client.put_object(Bucket=self.bucket, Key=k, Body=data, IfNoneMatch="*")
                return True
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code")
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if code == "PreconditionFailed" or status == 412:
                    return False
                raise

        return self._call("conditional PUT", key, put)

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        k = self._key(key)

        def get():
            try:
                return self.client.get_object(Bucket=self.bucket, Key=k)["Body"].read()
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    raise ObjectNotFound(self.location(key)) from None
                raise

        return self._call("GET", key, get)

    def info(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        k = self._key(key)

        def head():
            try:
                return ObjectInfo(
                    key, self.client.head_object(Bucket=self.bucket, Key=k)["ContentLength"]
                )
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code")
                if code in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise

        return self._call("HEAD", key, head)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        if prefix.rstrip("/"):
            check_key(prefix.rstrip("/"))
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0

        def list_all():
            out = []
            token = None
            while True:
                kwargs = {"Bucket": self.bucket, "Prefix": full}
                if token:
                    kwargs["ContinuationToken"] = token
                page = self.client.list_objects_v2(**kwargs)
                out.extend(ObjectInfo(o["Key"][strip:], o["Size"]) for o in page.get("Contents", []))
                if not page.get("IsTruncated"):
                    return out
                token = page["NextContinuationToken"]

        return sorted(self._call("LIST", prefix or "", list_all), key=lambda o: o.key)

    def delete(self, keys: Iterable[str]) -> None:
        rel = list(keys)
        batch = [self._key(k) for k in rel]
        for i in range(0, len(batch), 1000):
            chunk = [{"Key": k} for k in batch[i : i + 1000]]

            def delete(chunk=chunk):
                resp = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True}
                )
                errors = resp.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise PermanentStoreError(
                        f"DELETE s3://{self.bucket}/{first.get('Key')} failed with "
                        f"{first.get('Code')}: {first.get('Message')} ({len(errors)} keys failed)"
                    )

            self._call("DELETE", rel[i], delete)

    def check_reachable(self) -> None:
        self._call("HEAD bucket", "", lambda: self.client.head_bucket(Bucket=self.bucket))

    def marker_above(self, key: str, marker: str) -> str | None:
        from botocore.exceptions import ClientError

        full = self._key(key) if key else self.prefix
        parts = [p for p in full.split("/") if p]
        for n in range(len(parts), -1, -1):
            prefix = "/".join(parts[:n])
            k = f"{prefix}/{marker}" if prefix else marker

            def head(k=k) -> bool:
                try:
                    self.client.head_object(Bucket=self.bucket, Key=k)
                    return True
                except ClientError as e:
                    if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                        return False
                    raise

            if self._call("HEAD", key, head):
                return f"s3://{self.bucket}/{prefix}"
        return None

    def check_conditional_writes(self) -> None:
        """Make sure the endpoint refuses a second create-if-absent of a key (HTTP 412), as
        the single-winner commit needs: an endpoint that ignores If-None-Match lets every
        writer "win". Creates a scratch object under ``_iterations/probe/`` twice and deletes
        it. At most once per process per (endpoint, bucket): the verdict, either way, is kept;
        an error on the way (transient or not) is raised and nothing is kept. Skipped when
        the store was opened with ``probe_conditional_writes=False`` or the environment sets
        ITERATIONS_TRUST_CONDITIONAL_WRITES=1."""
        if not self.probe_conditional_writes:
            log.debug("%s: conditional-write probe skipped (probe_conditional_writes=False)", self.location())
            return
        if conditional_writes_trusted_by_environment():
            log.debug("%s: conditional-write probe skipped (%s)", self.location(), TRUST_CONDITIONAL_WRITES_ENV)
            return
        endpoint = self.endpoint_url or self.client.meta.endpoint_url
        with _PROBES_LOCK:
            slot = _PROBES.setdefault((endpoint, self.bucket), _ProbeSlot())
        with slot.lock:
            if slot.verdict is None:
                slot.verdict = self._probe_conditional_writes(endpoint)
            verdict = slot.verdict
        if verdict:
            raise PermanentStoreError(verdict)

    def _probe_conditional_writes(self, endpoint: str) -> str:
        key = f"{PROBE_PREFIX}{uuid.uuid4()}"
        payload = b"conditional-write probe of include.store; safe to delete\n"
        try:
            # False here too is possible: the create landed, its reply was lost and the
            # retry was refused. Either way the object exists now.
            self.put_if_absent(key, payload)
            second = self.put_if_absent(key, payload)
        finally:
            try:
                self.delete([key])
            except StoreError as e:
                log.warning("conditional-write probe: could not delete %s: %s", self.location(key), e)
        if not second:
            log.info("S3 endpoint %s refuses a second create-if-absent in bucket %s: conditional "
                     "writes honoured", endpoint, self.bucket)
            return ""
        return (
            f"the S3 endpoint {endpoint} ignores conditional writes (If-None-Match: *) in bucket "
            f"{self.bucket}: a second create-if-absent of the scratch object {self.url(key)} was "
            "accepted instead of refused with 412 Precondition Failed, so exactly-once checkpoint "
            "commits cannot be guaranteed there (two attempts could both commit the same "
            "checkpoint). Use an endpoint that supports conditional writes; if this one is known "
            f"to honour them, skip the probe: set {TRUST_CONDITIONAL_WRITES_ENV}=1 in the "
            "deployment's environment, or open the store with probe_conditional_writes=False"
        )


def _permanent_hint(code: str, status: int, message: str) -> str:
    """The explanation of a permanent S3 error for its message: the code's own hint if it has
    one; else the status's hint with the endpoint's message (the code is not one we know, so
    the hint may not tell the whole story); else the endpoint's message."""
    if code in _PERMANENT_HINTS:
        return f" ({_PERMANENT_HINTS[code]})"
    hint = _PERMANENT_HINTS.get(str(status))
    if hint:
        return f" ({hint}): {message}" if message else f" ({hint})"
    return f": {message}"


# --- opening stores --------------------------------------------------------------------------


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
