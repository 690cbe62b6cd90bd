"""The checkpoint log of a job and what it records: layout, manifests, head state, lifecycle, retention."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "checkpoint_log": ["CheckpointLog"],
    "head_state": ["AlignmentDecision", "EpochReport", "FileRef", "HeadStatus"],
    "layout": ["FORK_FROM_REGEX", "JOB_ID_REGEX", "JobLayout", "check_job_id"],
    "lifecycle": ["StopMode"],
    "manifest": ["DatasetRef", "JobState", "Manifest", "verify_bytes"],
})
