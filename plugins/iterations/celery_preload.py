"""Celery workers whose task processes start with the iteration runtime's heavy modules imported.

A Celery worker of Airflow 3 forks its pool processes from the worker's main process, and each
task's supervisor forks the task process from a pool process: a module the main process imported
before its pool started is imported in every task. Naming this module's ``CELERY_CONFIG`` in
``[celery] celery_config_options`` makes the main process import ``[iterations] preload_modules``
(the list :class:`iterations.executors.PreloadingLocalExecutor` reads, default
``include.process.preloading.DEFAULT_MODULES``) when Celery's ``worker_init`` signal fires, before the pool
starts::

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=iterations.celery_preload.CELERY_CONFIG

``CELERY_CONFIG`` is Airflow's default Celery configuration with one change, the publish retry
policy (``PUBLISH_RETRY_POLICY``), beside the signal. The scheduler imports this module too (to
read the configuration); it never sends ``worker_init``.

The policy is for a broker that goes away (Redis restarted: found by the chaos run,
tests.chaos). Airflow's Celery executor publishes a task under ``[celery] operation_timeout``
and keeps the task queued for its next loop when that times out, up to ``[celery]
task_publish_max_retries`` times; any other error fails the task's try at once. Celery's own
policy gave up on a refused connection within a second, so a broker down for a few seconds
spent every try of the tasks the scheduler sent meanwhile and failed their DAG runs. Retrying
the connection longer than ``operation_timeout`` makes an outage a time-out, which the
scheduler retries: the stack and the compose file set ``operation_timeout`` to 5 s and
``task_publish_max_retries`` to 60, a broker outage of five minutes or so.
"""

from __future__ import annotations

import sys

from airflow.configuration import conf
from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
from celery.signals import worker_init

from include.errors import ConfigError
from include.process import parse_modules, preload

#: retried for about 20 s, longer than ``[celery] operation_timeout`` (see the module's docstring)
PUBLISH_RETRY_POLICY = {"max_retries": 25, "interval_start": 0.2, "interval_step": 0.2, "interval_max": 1.0}
CELERY_CONFIG = {**DEFAULT_CELERY_CONFIG, "task_publish_retry_policy": PUBLISH_RETRY_POLICY}


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
