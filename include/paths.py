"""Where a job given by untrusted hands (a DAG run's params) may read and write.

A DAG run's ``input_path``, ``output_path`` and ``checkpoint_root`` are checked against the
allowed roots before anything touches them: the directories and ``s3://bucket/prefix`` the DAG
author configured (its params' defaults) plus the deployment's ``ITERATIONS_ALLOWED_ROOTS``
(comma-separated). A local path must be absolute and stay under a root once resolved (``..``
and symbolic links included); an S3 path must name a root's bucket and stay under its prefix,
with no ``.``/``..`` segments. Other schemes, control characters and values that look like
command-line options are refused. The root ``s3://`` allows every bucket (tests only).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlparse

from include.errors import ConfigError

ROOTS_ENV = "ITERATIONS_ALLOWED_ROOTS"
#: the checkout the project runs from (./run.sh installs it editable: its packages stay here)
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: where the embedded defaults live: demo input, the local checkpoint store, outputs, the demo's
#: Airflow home, the embedded Spark Connect server's state
LOCAL_DIR = os.environ.get("ITERATIONS_LOCAL_DIR") or os.path.join(PROJECT_ROOT, ".local")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class _Root:
    text: str
    local: str | None = None  # resolved directory
    bucket: str | None = None  # "" = any bucket
    prefix: str = ""


def _s3_parts(path: str, what: str) -> tuple[str, str]:
    u = urlparse(path)
    if u.query or u.fragment or u.params or "@" in u.netloc or ":" in u.netloc:
        raise ConfigError(f"{what} {path!r}: an S3 path is s3://bucket/key, without user, port, query or fragment")
    key = u.path.lstrip("/")
    segments = key.split("/")
    if any(s in (".", "..") for s in segments) or "//" in key:
        raise ConfigError(f"{what} {path!r}: '.', '..' and empty segments are not allowed in an S3 key")
    return u.netloc, key.rstrip("/")


def _parse_root(text: str) -> _Root:
    text = text.strip()
    if text.startswith(("s3://", "s3a://")):
        bucket, prefix = _s3_parts(text, "allowed root")
        return _Root(text, bucket=bucket, prefix=prefix)
    if not os.path.isabs(text):
        raise ConfigError(f"allowed root {text!r} must be an absolute directory or s3://bucket[/prefix]")
    return _Root(text, local=os.path.realpath(text))


class PathPolicy:
    def __init__(self, roots: Iterable[str]):
        self.roots = [_parse_root(r) for r in roots if r and r.strip()]

    @classmethod
    def for_dag(cls, configured: Iterable[str]) -> "PathPolicy":
        """The DAG's configured roots plus the deployment's (``ITERATIONS_ALLOWED_ROOTS``)."""
        extra = os.environ.get(ROOTS_ENV, "")
        return cls([*configured, *extra.split(",")])

    def describe(self) -> str:
        return ", ".join(r.text for r in self.roots) or "none"

    def check(self, what: str, path: str) -> str:
        """``path`` if it stays under an allowed root; ConfigError naming it otherwise."""
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{what} must be a non-empty string, got {path!r}")
        if _CONTROL.search(path):
            raise ConfigError(f"{what} {path!r} contains control characters")
        if path.startswith("-"):
            raise ConfigError(f"{what} {path!r} looks like a command-line option, not a path")
        if path.startswith(("s3://", "s3a://")):
            bucket, key = _s3_parts(path, what)
            if not _BUCKET.fullmatch(bucket):
                raise ConfigError(f"{what} {path!r}: {bucket!r} is not a valid bucket name")
            for r in self.roots:
                if r.bucket is not None and (r.bucket in ("", bucket)) and (
                        not r.prefix or key == r.prefix or key.startswith(r.prefix + "/")):
                    return path
            raise ConfigError(f"{what} {path!r} is outside the allowed roots ({self.describe()}); "
                              f"add its bucket/prefix to {ROOTS_ENV} if it is meant to be used")
        if _SCHEME.match(path):
            raise ConfigError(f"{what} {path!r}: only local paths and s3:// URLs are accepted")
        if not os.path.isabs(path):
            raise ConfigError(f"{what} {path!r} must be an absolute path")
        resolved = os.path.realpath(path)
        for r in self.roots:
            if r.local is not None and os.path.commonpath([r.local, resolved]) == r.local:
                return path
        raise ConfigError(f"{what} {path!r} (resolved {resolved!r}) is outside the allowed roots "
                          f"({self.describe()}); add a parent directory to {ROOTS_ENV} if it is meant to be used")


def _place(path: str) -> tuple[str, str, str]:
    """(kind, bucket, key) of a local path (kind "local", its resolved path as key) or an
    s3:// URL, for comparing locations."""
    if path.startswith(("s3://", "s3a://")):
        u = urlparse(path)
        return "s3", u.netloc, "/".join(s for s in u.path.split("/") if s)
    if path.startswith("file://"):
        path = urlparse(path).path
    return "local", "", os.path.realpath(os.path.abspath(path))


def overlap(a: str, b: str) -> bool:
    """Whether locations ``a`` and ``b`` are the same or one lies inside the other."""
    (ka, ba, pa), (kb, bb, pb) = _place(a), _place(b)
    if ka != kb or ba != bb:
        return False
    if ka == "local":
        return os.path.commonpath([pa, pb]) in (pa, pb)
    return pa == pb or not pa or not pb or pa.startswith(pb + "/") or pb.startswith(pa + "/")


CHECKPOINT_ROOTS_ENV = "ITERATIONS_CHECKPOINT_ROOTS"


def check_output_path(output_path: str | None, checkpoint_roots: Iterable[str | None]) -> None:
    """ConfigError if ``output_path`` overlaps one of ``checkpoint_roots`` (or one of the
    deployment's, ``ITERATIONS_CHECKPOINT_ROOTS``): publishing there could damage a job's state.
    Stores elsewhere are recognised when publishing (include.outputs.check_not_in_store)."""
    if not output_path:
        return
    extra = [r.strip() for r in os.environ.get(CHECKPOINT_ROOTS_ENV, "").split(",") if r.strip()]
    for root in [*checkpoint_roots, *extra]:
        if root and overlap(output_path, str(root)):
            raise ConfigError(f"output_path {output_path!r} overlaps the checkpoint root {root!r}: outputs never "
                              "share a location with checkpoints; choose an output_path outside every checkpoint root")


def configured_roots(defaults: dict[str, str | None]) -> list[str]:
    """The roots a DAG's params defaults imply: the input's directory (or prefix), the
    checkpoint root and the output path themselves."""
    roots = []
    for name, value in defaults.items():
        if not value:
            continue
        value = str(value)
        if name == "input_path":
            if value.startswith(("s3://", "s3a://")):
                bucket, key = _s3_parts(value, name)
                value = f"s3://{bucket}/{key.rsplit('/', 1)[0]}" if "/" in key else f"s3://{bucket}"
            else:
                value = os.path.dirname(value)
        roots.append(value)
    return roots


__all__ = ["CHECKPOINT_ROOTS_ENV", "PathPolicy", "ROOTS_ENV", "check_output_path", "configured_roots", "overlap"]
