"""Errors of the runtime core. Every message names the bad value and what would be accepted."""

from __future__ import annotations


class IterationError(Exception):
    """Base class of every error the runtime raises on purpose."""


class ConfigError(IterationError, ValueError):
    """A configuration value is invalid; the message names the field and the accepted values."""


class ForkRefused(ConfigError):
    """A fork (``fork_from``) that cannot start from the checkpoint it names, or whose body
    gives a variable another schema than its parent's; the message says why."""


class InputDataError(IterationError, ValueError):
    """The static input of a job is missing, empty or has the wrong shape."""


class InputChanged(InputDataError):
    """A job's input is no longer what its checkpoint log pinned at its first plan (a file
    added, gone, or rewritten): the message names the file, what changed, and the ways out."""


# --- object store -----------------------------------------------------------------------


class StoreError(IterationError):
    """An object store operation failed."""


class ObjectNotFound(StoreError, KeyError):
    def __init__(self, location: str):
        super().__init__(location)
        self.location = location

    def __str__(self) -> str:
        return f"object not found: {self.location}"


class PermanentStoreError(StoreError):
    """Retrying cannot help (no bucket, no credentials, access denied, bad key)."""


class TransientStoreError(StoreError):
    """The store kept failing with retryable errors until the retry budget ran out."""


class StoreFull(StoreError):
    """The store's filesystem cannot take a write (full, over quota, read-only): nothing was
    written; the write can succeed once space is freed."""


# --- checkpoints -------------------------------------------------------------------------


class CheckpointError(IterationError):
    """The checkpoint log refused an operation."""


class CheckpointCorrupted(CheckpointError):
    """A committed checkpoint references an object that is missing or fails its checksum."""


class CheckpointSuperseded(CheckpointError):
    """Another attempt already committed this checkpoint: this attempt's files are garbage."""


class AlignmentIncomplete(CheckpointError):
    """Not every partition of every head has reported for the attempt yet."""


class OutputError(IterationError):
    """A published output is missing or unreadable."""
