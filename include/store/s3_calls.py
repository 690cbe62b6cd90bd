"""How the S3 store calls its endpoint: which errors are transient (retried, bounded, logged)
and which permanent (raised at once, with what to check)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from include.errors import PermanentStoreError, TransientStoreError
from include.store.base import RetryPolicy

log = logging.getLogger("include.store.s3")

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


def call_s3(what: str, where: str, fn: Callable[[], Any], retry: RetryPolicy, sleep: Callable[[float], None]) -> Any:
    """``fn()`` (one request: ``what`` on ``where``), retried under ``retry`` while it fails
    with a transient error (a throttle, a 5xx, a lost connection); a permanent one raises
    PermanentStoreError at once, naming the request, the location and what to check.
    TransientStoreError when the attempts are spent."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )
    from botocore.exceptions import (
        ConnectionError as BotoConnectionError,
    )

    for attempt in range(retry.max_attempts):
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
        if attempt + 1 < retry.max_attempts:
            delay = retry.delay(attempt)
            log.warning(
                "%s %s: transient error (%s), retry %d/%d in %.2fs",
                what, where, failure, attempt + 1, retry.max_attempts - 1, delay,
            )
            sleep(delay)
    raise TransientStoreError(
        f"{what} {where} still failing after {retry.max_attempts} attempts: {failure}"
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
