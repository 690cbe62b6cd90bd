"""Runs of a job: its owner and lease, its generations (rewinds) and its schedule of batches."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "generations": ["Lineage", "check_rewind_to", "open_newest", "retire"],
    "job_opening": ["OpenedJob", "open_job"],
    "ownership": ["Holder", "JobBusy", "JobLease", "LEASE_TTL_S", "LeaseLost", "check_claim", "read_owner"],
    "schedule": ["Schedule", "batch_date"],
})
