"""Runs of a job: the epoch boundary they keep, owners and leases, generations, schedules, the overview."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "boundary": [
        "Step", "align_attempt", "align_if_complete", "aligned_line", "awaiting_reports",
        "check_borders", "epoch_line", "metrics_text", "owner_of", "resolve_attempt", "warm_up_checks"
    ],
    "epoch_run": ["EpochOutcome", "EpochRun"],
    "forks": ["check_fork", "forks_of", "read_fork"],
    "generations": ["Lineage", "check_rewind_to", "open_newest", "retire"],
    "job_opening": ["OpenedJob", "open_job"],
    "overview": ["check_report", "job_overview", "list_jobs"],
    "overview_model": ["EpochView", "JobNotFound", "JobOverview", "job_not_found"],
    "leases": ["LEASE_TTL_S", "Holder", "JobLease"],
    "ownership": ["JobBusy", "LeaseLost", "check_claim", "read_owner"],
    "schedule": ["Schedule", "batch_date"],
})
