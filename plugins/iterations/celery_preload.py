"""Celery workers whose task processes start with the iteration runtime's heavy modules imported.

A Celery worker of Airflow 3 forks its pool processes from the worker's main process, and each
task's supervisor forks the task process from a pool process: a module the main process imported
before its pool started is imported in every task. Naming this module's ``CELERY_CONFIG`` in
``[celery] celery_config_options`` makes the main process import ``[iterations] preload_modules``
(the list :class:`iterations.executors.PreloadingLocalExecutor` reads, default
``include.process.preloading.DEFAULT_MODULES``) when Celery's ``worker_init`` signal fires, before the pool
starts::

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=iterations.celery_preload.CELERY_CONFIG

``CELERY_CONFIG`` is Airflow's default Celery configuration, unchanged: only the signal is added.
The scheduler imports this module too (to read the configuration); it never sends ``worker_init``.
"""

from __future__ import annotations

import sys

from airflow.configuration import conf
from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
from celery.signals import worker_init

from include.errors import ConfigError
from include.process import parse_modules, preload

CELERY_CONFIG = DEFAULT_CELERY_CONFIG


@worker_init.connect(weak=False)
def preload_for_task_processes(**_: object) -> None:
    """Import the configured modules in the worker's main process, before its pool forks."""
    try:
        modules = parse_modules(conf.get("iterations", "preload_modules", fallback=None))
        seconds = preload(modules) if modules else {}
    except ConfigError as e:
        # Celery logs what a signal handler raises and goes on: a typo in the list would only
        # make every task slower. Stop the worker instead, as the executor stops the scheduler
        print(f"error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(1) from e
    if seconds:
        print(f"Preloaded for the task processes in {sum(seconds.values()):.1f} s: "
              + ", ".join(f"{m} {s:.2f} s" for m, s in seconds.items()), flush=True)
