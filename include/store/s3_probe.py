"""The conditional-write probe: does an S3 endpoint refuse a second create-if-absent of a key
(HTTP 412), as the single-winner commit needs? Asked once per process per (endpoint, bucket)."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import TYPE_CHECKING

from include.errors import ConfigError, PermanentStoreError, StoreError
from include.process.settings import TRUST_CONDITIONAL_WRITES

if TYPE_CHECKING:
    from include.store.s3 import S3Store

log = logging.getLogger("include.store.s3")

TRUST_CONDITIONAL_WRITES_ENV = TRUST_CONDITIONAL_WRITES.name
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
    try:
        return TRUST_CONDITIONAL_WRITES.get()
    except ConfigError:
        raise ConfigError(f"{TRUST_CONDITIONAL_WRITES_ENV} must be 1 (skip the conditional-write probe) or 0/unset "
                          f"(probe), got {TRUST_CONDITIONAL_WRITES.raw()!r}") from None


def check_conditional_writes(store: S3Store) -> None:
    """Make sure the endpoint refuses a second create-if-absent of a key (HTTP 412), as
    the single-winner commit needs: an endpoint that ignores If-None-Match lets every
    writer "win". Creates a scratch object under ``_iterations/probe/`` twice and deletes
    it. At most once per process per (endpoint, bucket): the verdict, either way, is kept;
    an error on the way (transient or not) is raised and nothing is kept. Skipped when
    the store was opened with ``probe_conditional_writes=False`` or the environment sets
    ITERATIONS_TRUST_CONDITIONAL_WRITES=1."""
    if not store.probe_conditional_writes:
        log.debug("%s: conditional-write probe skipped (probe_conditional_writes=False)", store.location())
        return
    if conditional_writes_trusted_by_environment():
        log.debug("%s: conditional-write probe skipped (%s)", store.location(), TRUST_CONDITIONAL_WRITES_ENV)
        return
    endpoint = store.endpoint_url or store.client.meta.endpoint_url
    with _PROBES_LOCK:
        slot = _PROBES.setdefault((endpoint, store.bucket), _ProbeSlot())
    with slot.lock:
        if slot.verdict is None:
            slot.verdict = _probe(store, endpoint)
        verdict = slot.verdict
    if verdict:
        raise PermanentStoreError(verdict)


def _probe(store: S3Store, endpoint: str) -> str:
    key = f"{PROBE_PREFIX}{uuid.uuid4()}"
    payload = b"conditional-write probe of include.store; safe to delete\n"
    try:
        # False here too is possible: the create landed, its reply was lost and the
        # retry was refused. Either way the object exists now.
        store.put_if_absent(key, payload)
        second = store.put_if_absent(key, payload)
    finally:
        try:
            store.delete([key])
        except StoreError as e:
            log.warning("conditional-write probe: could not delete %s: %s", store.location(key), e)
    if not second:
        log.info("S3 endpoint %s refuses a second create-if-absent in bucket %s: conditional "
                 "writes honoured", endpoint, store.bucket)
        return ""
    return (
        f"the S3 endpoint {endpoint} ignores conditional writes (If-None-Match: *) in bucket "
        f"{store.bucket}: a second create-if-absent of the scratch object {store.url(key)} was "
        "accepted instead of refused with 412 Precondition Failed, so exactly-once checkpoint "
        "commits cannot be guaranteed there (two attempts could both commit the same "
        "checkpoint). Use an endpoint that supports conditional writes; if this one is known "
        f"to honour them, skip the probe: set {TRUST_CONDITIONAL_WRITES_ENV}=1 in the "
        "deployment's environment, or open the store with probe_conditional_writes=False"
    )
