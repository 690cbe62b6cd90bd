"""A reviewed DAG under ``airflow dags test`` (write, audit, publish): k-means, whose
``centroid_history`` is a per-epoch output, with ``approve_publication``. The finish stages the
outputs and the review task asks, deferred; its timeout (``ITERATIONS_APPROVAL_TIMEOUT``, 4 s)
holds under ``dags test``, where nobody can answer: the answer is a rejection, the publish task
deletes what was staged, and the output location stays as it was - nothing of the job, not one
epoch's centroids, ever visible. Triggered again: asked again, from the same final checkpoint."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.store import LocalStore
from tests.dags.conftest import airflow
from tests.helpers import write_dag_file

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_reviewed_dag_whose_review_times_out_publishes_nothing_and_asks_again(airflow_env, tmp_path):
    rng = np.random.default_rng(3)
    points = np.concatenate([rng.normal(c, 0.3, size=(40, 2)) for c in ((0, 0), (4, 4), (0, 4))])
    pd.DataFrame({"x": points[:, 0], "y": points[:, 1]}).to_parquet(tmp_path / "points.parquet")
    out = tmp_path / "out"
    dags = write_dag_file(tmp_path / "dags", "kmeans_reviewed", "kmeans", epochs_per_batch=4,
                          dag_options={"approve_publication": True, "approvers": ["reviewer"]},
                          job_id="km-rv", input_path=str(tmp_path / "points.parquet"), output_path=str(out),
                          checkpoint_root=str(tmp_path / "store"), max_epochs=2, tolerance=0, num_partitions=2)
    env = {**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": dags, "ITERATIONS_APPROVAL_TIMEOUT": "4"}
    log = CheckpointLog(LocalStore(str(tmp_path / "store")), "km-rv")

    for run in (1, 2):
        done = airflow(env, "dags", "test", "kmeans_reviewed", "--conf", json.dumps({"k": 3}))
        text = done.stdout + done.stderr
        assert done.returncode == 0 and "state=success" in text, text[-5000:]
        final = log.latest()
        assert final.kind == "final" and sorted(final.pending_outputs) == [0, 1]
        assert "output version(s) staged in" in text and "the wait ends at its timeout" in text
        assert "publication of final checkpoint 2 not approved (no answer in time)" in text, text[-3000:]
        assert not os.path.exists(out), f"run {run}: nothing published, nothing staged left: {list(os.walk(out))}"
        assert log.reviews.staged(final.checkpoint_id) is None
        assert len(log.reviews.rejections(final.checkpoint_id)) == run
        review = log.reviews.review(final.checkpoint_id)
        assert review["increments"] == {"centroid_history": {"epochs": 2, "rows": 6}}
        assert [o["name"] for o in review["outputs"]] == ["assignments", "centroids"]
        if run == 2:
            assert "epoch 2 is not needed" in text or "TERMINATED" in text, "the job ended: asked again, no epoch"
    assert log.latest_id() == 2, "the same final checkpoint, asked about twice"
