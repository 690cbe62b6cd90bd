"""Import the runtime's heavy modules once, in a process that forks the task processes.

An Airflow task process under LocalExecutor is forked from a worker, itself forked from the
scheduler, so whatever the scheduler has imported before it starts its workers every task
has for free. Without that, every task process imports for itself what its epoch needs:
Great Expectations for each commit (seconds: it pulls in scipy, altair and its data-source
registry) and the Spark Connect client for each run (pandas, pyarrow, gRPC: most of a
second), on every epoch's critical path. ``PreloadingLocalExecutor`` (the plugin's
``iterations.executors``) calls :func:`preload` before starting its workers.

Importing is all this does: no Great Expectations context, Spark session or thread is made
before the fork (a gRPC channel or a thread does not survive one); the task process makes
its own at next to no cost.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from typing import Callable, Sequence

from include.errors import ConfigError

log = logging.getLogger("iterations")

#: What an epoch's tasks import beyond Airflow: Great Expectations (commit and finish tasks'
#: data checks), the Spark Connect client (run and finish tasks), the runtime itself and the S3
#: store (with S3's service description parsed, which each task's first S3 client would do).
DEFAULT_MODULES: tuple[str, ...] = ("great_expectations", "pyspark.sql.connect.session", "include.epoch.job",
                                    "include.store.s3")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def parse_modules(text: str | None) -> tuple[str, ...]:
    """The modules of a comma-separated list (as configured); ``None`` means the defaults, an
    empty list none. A name that cannot be a module is an error that names it."""
    if text is None:
        return DEFAULT_MODULES
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ConfigError(f"preload_modules: {', '.join(repr(b) for b in bad)} is not a module name "
                          f"(expected a comma-separated list such as {','.join(DEFAULT_MODULES)!r})")
    return names


def _import(name: str) -> None:
    if name == "great_expectations":
        from include.checks import import_gx

        import_gx()  # quietly: no analytics, none of its INFO logging
    elif name == "include.store.s3":
        from include.store.s3 import parse_service_descriptions

        parse_service_descriptions()
    else:
        importlib.import_module(name)


def preload(modules: Sequence[str] = DEFAULT_MODULES,
            importer: Callable[[str], None] = _import) -> dict[str, float]:
    """Import ``modules`` in this process; the seconds each took. A module that cannot be
    imported is an error naming it (a preload list is configuration: a typo should stop the
    process that reads it, not make every task slower without a word)."""
    seconds: dict[str, float] = {}
    for name in modules:
        started = time.perf_counter()
        try:
            importer(name)
        except ImportError as e:
            raise ConfigError(f"preload_modules: cannot import {name!r}: {e}") from e
        seconds[name] = time.perf_counter() - started
        log.info("preloaded %s in %.2f s", name, seconds[name])
    return seconds
