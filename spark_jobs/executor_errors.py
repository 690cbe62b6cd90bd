"""Errors as they reach the driver from Spark: ours raised again as themselves, and the
failures that mean a block kept in Spark is gone."""

from __future__ import annotations

import re

from include import errors

_EXECUTOR_ERROR = re.compile(r"include\.errors\.(\w+): (.+)")


def lost_kept_block(error: BaseException) -> bool:
    """Whether a Spark job failed because a block of a local checkpoint is gone (its executor
    was lost, or the frame released): Spark's CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND, on a classic
    session (Py4J) or through Spark Connect; or because the Spark Connect session no longer
    holds the kept relation (DATAFRAME_NOT_FOUND: released by another client of the session)."""
    text = str(error)
    return any(s in text for s in ("CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND", "DATAFRAME_NOT_FOUND")) \
        or re.search(r"Checkpoint block rdd_\d+_\d+ not found", text) is not None


def first_line(error: BaseException) -> str:
    """What a log line says of a Spark failure: its error class and message, or its first line."""
    text = str(error).strip()
    match = re.search(r"\[(CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND|CONNECT_INVALID_PLAN\.DATAFRAME_NOT_FOUND)\][^\n]*", text)
    return (match.group(0) if match else text.splitlines()[0] if text else type(error).__name__)[:300]


def raise_executor_error(error: Exception) -> None:
    """An error of ours raised inside a Spark task reaches the driver as a PythonException with
    a traceback; raise it again as itself so the caller sees the plain message and type."""
    if isinstance(error, errors.IterationError):
        return
    matches = _EXECUTOR_ERROR.findall(str(error))
    if not matches:
        return
    name, message = matches[-1]
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, errors.IterationError):
        raise (errors.StoreError(message) if cls is errors.ObjectNotFound else cls(message)) from error
