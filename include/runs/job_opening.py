"""Opening the job a run works on (``open_job``): its generation, or for a scheduled job the
generation of the batch's date, and the ``IterationJob`` over it. The library runner and the
operators both open a job this way; they differ only in how they drive it afterwards."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import include.runs.generations as generations
from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from include.errors import ConfigError
from include.runs.forks import check_fork
from include.runs.generations import Lineage, check_rewind_to
from include.runs.ownership import JobOwner
from include.runs.schedule import Generation, Schedule
from include.store.base import ObjectStore


@dataclass
class OpenedJob:
    """An opened job: ``job`` works on the generation ``job.config.job_id`` names, one of
    ``lineage``'s; ``schedule`` and ``generation`` are set for a scheduled job's batch."""

    job: IterationJob
    lineage: Lineage
    schedule: Schedule | None = None
    generation: Generation | None = None


def open_job(config: JobConfig, store: ObjectStore, *, owner: JobOwner, hold: Callable[[str], Any],
             run: str | None = None, rewind_to: Any = None, on_input_change: Any = None,
             store_options: Mapping[str, Any] | None = None, batch_date: str | None = None,
             recompute: bool = False, arrivals: Sequence[Mapping[str, Any]] = (),
             **job_options: Any) -> OpenedJob:
    """The job a run of ``config`` works on, in ``store``.

    ``hold(lease_id)`` takes the job's lease for the run; it is called before anything is
    written (a new generation, a rewind, the run's binding to a generation), so a rewind waits
    for, or is refused by, a run that holds the job. ``run``: the DAG run's batch id (its first
    task fixes the generation the run's other tasks work on); None for a library run.
    ``rewind_to``: recompute from this epoch as a new generation (checked here).
    ``on_input_change``: "refuse" or "restart" (``generations.check_on_input_change``).
    ``batch_date``: a scheduled job's batch (include.runs.schedule): the generation of that date,
    warm-started from the previous batch; ``recompute`` recomputes that date.
    ``arrivals``: what the asset events that started the run say arrived.
    ``config.fork_from``: a new job that starts from another job's checkpoint
    (include.runs.forks.check_fork: refused here, before anything is written, when it cannot).
    ``job_options``: the rest of ``IterationJob``'s options (checks, coordinators, output_owner...).
    """
    rewind_to = check_rewind_to(rewind_to)
    options = dict(store_options or {})
    schedule = generation = None
    if config.fork_from is not None and (batch_date is not None or rewind_to is not None):
        raise ConfigError(f"fork_from {config.fork_from!r}: a fork starts a new job, "
                          + ("not a scheduled job's batch (each warm-starts from the batch before it)"
                             if batch_date is not None else "not a rewind of one (rewind_to): give one of them"))
    if batch_date is not None:
        schedule = Schedule(store, config.job_id)
        lineage = schedule.lineage(batch_date)
        generation = schedule.attach(batch_date, run, recompute=recompute, rewind_to=rewind_to, owner=owner,
                                     hold=lambda: hold(lineage.base), arrived=arrivals)
        extra = {"warm_start": schedule.warm_start_manifest(generation), "rewound_from": generation.rewound_from,
                 "publication_family": lineage.family(generation.job_id),
                 "may_publish": lambda: schedule.check_may_publish(generation), "lease_id": lineage.base}
        log_id = generation.job_id
    else:
        forked_from = check_fork(store, config, owner.dag_id)  # refused before anything is written
        log_id, lineage = generations.attach(
            store, config.job_id, run, rewind_to=rewind_to, owner=owner, hold=lambda: hold(config.job_id),
            input_changes=generations.input_changes_of(store, config, options, on_input_change))
        extra = {**generations.job_options(lineage, log_id), "forked_from": forked_from}
    job = IterationJob(dataclasses.replace(config, job_id=log_id), store, store_options=options,
                       arrivals=list(arrivals), **extra, **job_options)
    return OpenedJob(job=job, lineage=lineage, schedule=schedule, generation=generation)
