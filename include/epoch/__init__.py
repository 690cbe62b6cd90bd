"""One epoch of a job: plans, attempts, restore, alignment, coordinators, checks and commit, IterationJob."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "attempts": ["Attempts"],
    "commit": ["Committer", "DataCheckFailed", "PendingCommit"],
    "coordination": ["Coordination"],
    "job": ["IterationJob"],
    "plan": ["Check", "DEFAULT_CHECKS", "EpochPlan"],
    "restore": ["Restorer"],
    "splits": ["FileSplitEnumerator"],
    "stopping": ["Stopping"],
})
