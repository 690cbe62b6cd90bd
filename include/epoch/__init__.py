"""One epoch and its boundary: plans, attempts, alignment, coordinators, the commit, stopping, IterationJob."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "boundary": [
        "EpochRun", "Step", "align_attempt", "align_if_complete", "aligned_line", "awaiting_reports",
        "check_borders", "epoch_line", "metrics_text", "owner_of", "resolve_attempt", "warm_up_checks"
    ],
    "commit": ["DataCheckFailed"],
    "head_state": ["AlignmentDecision", "EpochReport", "FileRef", "HeadStatus"],
    "job": ["IterationJob"],
    "lifecycle": ["StopMode"],
    "plan": ["Check", "DEFAULT_CHECKS", "EpochPlan"],
    "splits": ["FileSplitEnumerator"],
})
