"""``RunResult``'s repr is one line a person reads (docs/library.md), not the dump of every
decision, manifest and DataFrame it holds."""

from __future__ import annotations

from include.checkpoints.head_state import AlignmentDecision, HeadStatus
from spark_jobs.runner import RunResult


def test_the_repr_is_one_short_line():
    decisions = [AlignmentDecision(epoch=e, attempt_id=f"a{e}", terminated=e == 49, feedback_count=10,
                                   reason="converged" if e == 49 else None,
                                   metrics={"l1_delta": 0.1}) for e in range(50)]
    result = RunResult("pr", HeadStatus.TERMINATED, 50, epochs_computed=list(range(3, 50)), epochs_adopted=[2],
                       restored_from=1, decisions=decisions, published={"ranks": "/out/ranks"},
                       outputs={"ranks": object()})
    text = repr(result)
    assert text == ("RunResult(job_id='pr', status=TERMINATED, checkpoint_id=50, restored_from=1, "
                    "epochs_computed=[3..49] (47), epochs_adopted=[2], terminated='converged', published=['ranks'], "
                    "outputs=['ranks'])")
    assert repr(RunResult("pr", HeadStatus.RUNNING, None)) == \
        "RunResult(job_id='pr', status=RUNNING, checkpoint_id=None, restored_from=None, epochs_computed=[])"
