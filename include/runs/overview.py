"""What a job's checkpoint store says about it, for people watching it (the Iterations view).
Modules: ``model`` (the views), ``reader`` (reading them from the store).

Read-only: every read goes through a ``ReadOnlyStore``, which refuses writes and deletes, and
through the same ``CheckpointLog`` the runtime uses. Nothing here imports Spark or Airflow.

Per epoch (``EpochView``) the status is one of:

- ``committed``: its checkpoint committed;
- ``restored``: committed, and a later batch resumed from it (the next checkpoint was planned on
  it by another batch: the epoch was read back from the store, not recomputed);
- ``running``: not committed yet, with an attempt that is neither aborted nor superseded;
- ``aborted``: not committed, every attempt of it aborted (a failure, a refused data check);
- ``damaged``: committed, but its manifest is refused when read (not a manifest, fails its own
  checksum, names another job or objects outside the job): ``damage`` says why, and the
  checkpoint is listed in ``damaged_checkpoints`` only, neither kept nor retired. Whether it was
  an epoch's or the final checkpoint cannot be told, so it is shown as an epoch.

The events a coordinator released to epoch k are those it sent between the triggers of
checkpoints k-1 and k: the seqs ``[seq(k-1), seq(k))`` of its snapshots in the two manifests
(``include.epoch.coordinators``: a checkpoint is a consistent cut). The events themselves are listed when
the attempt's plan is still in the store (an epoch not committed yet; garbage collection deletes
a committed epoch's plan).
"""

from __future__ import annotations

from include.checkpoints.layout import JOB_ID_PATTERN, JobLayout, check_job_id, report_foreign
from include.checks.report_view import CheckView
from include.errors import ObjectNotFound
from include.runs.overview_model import (
    AttemptView,
    BatchView,
    EpochView,
    EventsView,
    FinishView,
    JobNotFound,
    JobOverview,
    OutputView,
    job_not_found,
)
from include.runs.overview_reader import OverviewReader
from include.store import ObjectStore
from include.store.readonly import ReadOnlyStore, ReadOnlyViolation


def list_jobs(store: ObjectStore) -> list[str]:
    """Ids of the jobs that have a checkpoint log in the store."""
    jobs = set()
    for o in ReadOnlyStore(store).list("jobs/"):
        parts = o.key.split("/", 2)
        if len(parts) == 3 and JOB_ID_PATTERN.fullmatch(parts[1]):
            jobs.add(parts[1])
        else:
            report_foreign(store, o.key, "a job's objects are jobs/<job id>/...")
    return sorted(jobs)


def job_overview(store: ObjectStore, job_id: str, *, metric: str | None = None) -> JobOverview:
    """Everything the store says about job ``job_id``; JobNotFound if it has no objects there."""
    return OverviewReader(ReadOnlyStore(store), job_id).overview(metric)


def check_report(store: ObjectStore, job_id: str, epoch: int, attempt_id: str) -> tuple[str, bytes]:
    """(media type, bytes) of an attempt's data-check report: Great Expectations' Data Docs page
    when there is one, else the JSON result. ObjectNotFound naming it when there is neither."""
    layout = JobLayout(check_job_id(job_id))
    where = layout.checks(int(epoch), attempt_id)
    ro = ReadOnlyStore(store)
    for name, media in (("data_docs.html", "text/html"), ("validation.json", "application/json")):
        try:
            return media, ro.get(f"{where}/{name}")
        except ObjectNotFound:
            continue
    raise ObjectNotFound(f"no data-check report of epoch {epoch} attempt {attempt_id} of job {job_id} "
                         f"at {ro.location(where)}")


__all__ = [
    "AttemptView", "BatchView", "CheckView", "EpochView", "EventsView", "FinishView", "JobNotFound",
    "JobOverview", "OutputView", "ReadOnlyStore", "ReadOnlyViolation", "check_report", "job_not_found", "job_overview",
    "list_jobs",
]
