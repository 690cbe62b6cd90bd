"""The checkpoint log of a job and its records: layout, manifests, retention, restore, the overview."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "checkpoint_log": ["CheckpointLog"],
    "layout": ["JOB_ID_REGEX", "JobLayout", "check_job_id"],
    "manifest": ["DatasetRef", "Manifest", "verify_bytes"],
    "overview": ["check_report", "job_overview", "list_jobs"],
    "overview_model": ["CheckView", "EpochView", "JobNotFound", "JobOverview", "job_not_found"],
})
