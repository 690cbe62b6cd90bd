"""A store in an S3 bucket (AWS, MinIO...): conditional writes, streamed and copied transfers.
Its requests go through ``s3_calls`` (retries, error classification); the conditional-write
probe is ``s3_probe``."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from include.errors import ConfigError, InputChanged, ObjectNotFound, PermanentStoreError
from include.process.failpoints import install_s3_faults
from include.store import s3_probe
from include.store.base import ObjectInfo, ObjectStore, RetryPolicy, check_key
from include.store.s3_calls import call_s3

log = logging.getLogger(__name__)

#: a multipart upload's part (one in memory at a time; S3's minimum is 5 MiB)
PART_SIZE = 8 << 20
#: the largest object one CopyObject copies (S3's limit); larger ones are copied part by part
COPY_LIMIT = 5 << 30

_loader: Any = None


def service_descriptions() -> Any:
    """botocore's loader of the service descriptions, one per process. A client made from a new
    session reads and parses S3's description and the endpoint rules again (tens of ms, in every
    Spark task that opens a store); made from a session given this loader, it finds them parsed.
    The loader holds only that data (no connection, no credential): sharing it changes nothing
    of what a client does. No lock (a lock held by another thread when a process forks stays
    held in the child): two threads that ask at once may each make one, and either serves."""
    global _loader
    if _loader is None:
        import botocore.session

        _loader = botocore.session.Session().get_component("data_loader")
    return _loader


def parse_service_descriptions() -> None:
    """Parse what an S3 client is made of into ``service_descriptions()`` now: a process that
    forks task processes does (include.process.preloading), so that none of them reads it. Makes
    a client and drops it: no request, no connection, no credential looked up."""
    S3Store("preloaded", endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="-",
            secret_access_key="-").client


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
            import botocore.session
            from botocore.config import Config

            # a session of its own (credentials resolved for this store, as a new boto3 session
            # would), with the process's parsed service descriptions
            session = botocore.session.Session()
            session.register_component("data_loader", service_descriptions())
            if self.region:
                session.set_config_variable("region", self.region)
            config = Config(
                # Retries are ours (see _call), so that every transient error is counted,
                # logged and bounded in one place.
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=self.connect_timeout,
                read_timeout=self.read_timeout,
                s3={"addressing_style": "path"} if self.endpoint_url else None,
                region_name=self.region or session.get_config_variable("region") or "us-east-1",
            )
            client = session.create_client(
                "s3", endpoint_url=self.endpoint_url, config=config, aws_access_key_id=self.access_key_id,
                aws_secret_access_key=self.secret_access_key, aws_session_token=self.session_token)

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
        return call_s3(what, self.location(key), fn, self.retry, self.sleep)

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

    def get_matching(self, key: str, etag: str) -> bytes:
        """The object's bytes, provided it still has entity tag ``etag`` (a conditional GET,
        ``If-Match``): InputChanged naming the object when it was rewritten since."""
        from botocore.exceptions import ClientError

        k = self._key(key)

        def get():
            try:
                return self.client.get_object(Bucket=self.bucket, Key=k, IfMatch=etag)["Body"].read()
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code")
                if code in ("NoSuchKey", "404"):
                    raise ObjectNotFound(self.location(key)) from None
                if code in ("PreconditionFailed", "412"):
                    raise InputChanged(f"{self.location(key)} was rewritten since it was pinned (its ETag is no "
                                       f"longer {etag})") from None
                raise

        return self._call("GET", key, get)

    def open_read(self, key: str):
        """The object's body as a stream (opening it is retried as every call is; an error
        while reading it is the reader's to retry)."""
        from botocore.exceptions import ClientError

        k = self._key(key)

        def open_body():
            try:
                return self.client.get_object(Bucket=self.bucket, Key=k)["Body"]
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    raise ObjectNotFound(self.location(key)) from None
                raise

        return self._call("GET", key, open_body)

    def write_stream(self, key: str, chunks, *, verify) -> None:
        """A multipart upload of parts of about ``PART_SIZE`` (one part in memory at a time),
        completed only once ``verify()`` returned, aborted otherwise; an object smaller than
        one part is one PUT."""
        k = self._key(key)
        pending, size, parts, upload = [], 0, [], None

        def send(part: bytes) -> None:
            nonlocal upload
            if upload is None:
                upload = self._call("CREATE MULTIPART UPLOAD", key, lambda: self.client.create_multipart_upload(
                    Bucket=self.bucket, Key=k)["UploadId"])
            n = len(parts) + 1
            etag = self._call(f"UPLOAD PART {n}", key, lambda: self.client.upload_part(
                Bucket=self.bucket, Key=k, UploadId=upload, PartNumber=n, Body=part)["ETag"])
            parts.append({"ETag": etag, "PartNumber": n})

        try:
            for chunk in chunks:
                pending.append(chunk)
                size += len(chunk)
                if size >= PART_SIZE:  # a part of PART_SIZE and at most one chunk more
                    part, pending, size = b"".join(pending), [], 0
                    send(part)
                    del part
            verify()
            rest = b"".join(pending)
            if upload is None:
                self.put(key, rest)
                return
            if rest:
                send(rest)
            self._call("COMPLETE MULTIPART UPLOAD", key, lambda: self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=k, UploadId=upload, MultipartUpload={"Parts": parts}))
        except BaseException:
            if upload is not None:
                try:
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=upload)
                except Exception as e:  # noqa: BLE001 - the first error is the one to raise
                    log.warning("aborting the upload of %s failed (%s): the bucket's lifecycle rule for "
                                "incomplete uploads removes its parts", self.location(key), e)
            raise

    def reads_with(self, other: "S3Store") -> bool:
        """Whether this store's client may read ``other``'s objects: the same endpoint and the
        same credentials (a server-side copy between them needs nothing else)."""
        return isinstance(other, S3Store) and (self.endpoint_url, self.access_key_id, self.secret_access_key,
                                               self.session_token) == (other.endpoint_url, other.access_key_id,
                                                                       other.secret_access_key, other.session_token)

    def copy_from(self, source: "S3Store", source_key: str, key: str, size: int) -> str | None:
        """Copy ``source``'s object to ``key`` inside the S3 service (no byte through this
        process), asking it for the copy's SHA-256; that checksum (hex), or None when the
        service gives none. ``size``: the object's (its checkpoint's record of it); objects over
        ``COPY_LIMIT`` are copied part by part (UploadPartCopy)."""
        import base64

        src = {"Bucket": source.bucket, "Key": source._key(source_key)}
        k = self._key(key)
        if size <= COPY_LIMIT:
            from botocore.exceptions import ClientError

            def copy():
                try:
                    return self.client.copy_object(Bucket=self.bucket, Key=k, CopySource=src,
                                                   ChecksumAlgorithm="SHA256")
                except ClientError as e:  # the source is gone: as a get of it says
                    if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                        raise ObjectNotFound(source.location(source_key)) from None
                    raise

            done = self._call("COPY", key, copy)
            checksum = (done.get("CopyObjectResult") or {}).get("ChecksumSHA256")
            return base64.b64decode(checksum).hex() if checksum else None
        upload = self._call("CREATE MULTIPART UPLOAD", key, lambda: self.client.create_multipart_upload(
            Bucket=self.bucket, Key=k)["UploadId"])
        parts = []
        try:
            for n, start in enumerate(range(0, size, COPY_LIMIT), start=1):
                end = min(start + COPY_LIMIT, size) - 1
                etag = self._call(f"COPY PART {n}", key, lambda: self.client.upload_part_copy(
                    Bucket=self.bucket, Key=k, UploadId=upload, PartNumber=n, CopySource=src,
                    CopySourceRange=f"bytes={start}-{end}")["CopyPartResult"]["ETag"])
                parts.append({"ETag": etag, "PartNumber": n})
            self._call("COMPLETE MULTIPART UPLOAD", key, lambda: self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=k, UploadId=upload, MultipartUpload={"Parts": parts}))
        except BaseException:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=upload)
            raise
        return None  # a multipart object has no whole-object SHA-256: the caller reads it back

    def info(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        k = self._key(key)

        def head():
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=k)
                return ObjectInfo(key, head["ContentLength"], head.get("ETag"))
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
                out.extend(ObjectInfo(o["Key"][strip:], o["Size"], o.get("ETag"))
                           for o in page.get("Contents", []))
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

    def _head_exists(self, key: str, full_key: str) -> bool:
        from botocore.exceptions import ClientError

        def head() -> bool:
            try:
                self.client.head_object(Bucket=self.bucket, Key=full_key)
                return True
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise

        return self._call("HEAD", key, head)

    def marker_in_ancestors(self, marker: str) -> str | None:
        parts = [p for p in self.prefix.split("/") if p]
        for n in range(len(parts) - 1, -1, -1):
            prefix = "/".join(parts[:n])
            if self._head_exists("", f"{prefix}/{marker}" if prefix else marker):
                return f"s3://{self.bucket}/{prefix}"
        return None

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
        the single-winner commit needs (``include.store.s3_probe``); at most once per process
        per (endpoint, bucket). Skipped when the store was opened with
        ``probe_conditional_writes=False`` or the environment sets
        ITERATIONS_TRUST_CONDITIONAL_WRITES=1."""
        s3_probe.check_conditional_writes(self)
