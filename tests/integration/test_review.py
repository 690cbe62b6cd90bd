"""Write, audit, publish through the library runner (``IterationRunner(reviewed=True)``;
include.publication.review, Publisher.stage / approve / reject): nothing of a reviewed job is
visible before it is approved, per-epoch outputs included; a rejection leaves the output
location byte for byte as it was; an approval publishes each output once; the review's
comparison equals one computed by hand from the published files."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.contract.config import JobConfig
from include.errors import CheckpointError, OutputError
from include.publication import review_markdown
from include.publication.outputs import published, published_increments
from include.store import open_store
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, read_published, tree_digest, write_edges
from tests.integration.test_kmeans import blobs

pytestmark = pytest.mark.spark


def test_a_reviewed_kmeans_job_publishes_nothing_before_it_is_approved(spark, tmp_path):
    blobs(tmp_path / "points.parquet", n=300)
    out = tmp_path / "out"
    config = JobConfig(job_id="km", body="kmeans", input=str(tmp_path / "points.parquet"),
                       checkpoint_root=str(tmp_path / "store"), output_path=str(out), body_params={"k": 3, "seed": 7},
                       max_epochs=6, tolerance=0.0, num_partitions=2, retain_last=2)
    runner = IterationRunner(config, spark, reviewed=True)
    result = runner.run()
    assert result.status.value == "TERMINATED" and result.published == {}
    assert not out.exists(), "nothing of a reviewed job is visible: not its per-epoch outputs either"
    store = open_store(str(tmp_path / "store"))
    log = CheckpointLog(store, "km")
    final = log.latest()
    assert sorted(final.pending_outputs) == [0, 1, 2, 3, 4, 5], "every epoch's centroid_history waits with it"
    assert log.checkpoint_ids()[-2:] == [5, 6], "retention went on: the waiting outputs are kept by reference"
    with pytest.raises(CheckpointError, match="no publication awaiting approval"):
        IterationRunner(dataclass_copy(config, job_id="other"), spark, reviewed=True).approve("alice")

    review = runner.review()
    staged = tree_digest(out)
    assert staged and all("/v-km-" in "/" + k for k in staged), "staged: versions only, no manifest, no record"
    with pytest.raises(OutputError):
        published(str(out), "centroids")
    with pytest.raises(OutputError):
        published_increments(str(out), "centroid_history")
    [centroids] = [o for o in review["outputs"] if o["name"] == "centroids"]
    assert centroids["rows"] == 3 and centroids["schema"] == "cluster_id int, x double, y double, z double"
    assert centroids["comparison"]["current_rows"] is None, "nothing published yet: every row is new"
    assert review["increments"] == {"centroid_history": {"epochs": 6, "rows": 18}}
    assert review["checks"]["counts"]["passed"] >= 1 and review["checks"]["counts"].get("failed", 0) == 0
    assert all(o["status"] == "skipped" for o in review["checks"]["not_passed"])
    subject, body = review_markdown(review)
    assert subject == "Publish the outputs of job km?"
    assert "Per-epoch output **centroid\\_history**: 6 epochs, 18 rows" in body

    assert runner.reject("bob", "not these") == len(staged)
    assert not out.exists(), "a rejection leaves the location as it was: here, not there at all"
    assert [r["by"] for r in log.reviews.rejections(final.checkpoint_id)] == ["bob"]

    runner.review()  # asked again: staged again from the checkpoints, which kept everything
    gone = next(k for k in sorted(tree_digest(out)) if k.startswith("centroids/v-km-"))
    os.unlink(out / gone)  # a staged file lost before the approval: the publication copies it again
    published_now = runner.approve("alice")
    assert (out / gone).exists()
    assert sorted(published_now) == ["assignments", "centroids"]
    history = published_increments(str(out), "centroid_history")
    assert [cid for _, cid in history.checkpoints] == [0, 1, 2, 3, 4, 5] and history.rows == 18
    assert published(str(out), "centroids").checkpoint_id == final.checkpoint_id
    assert log.reviews.approval(final.checkpoint_id)["by"] == "alice"
    before = tree_digest(out)
    assert runner.approve("alice") == published_now, "approved and published: a second approval changes nothing"
    assert tree_digest(out) == before
    assert not any(f.key.startswith("jobs/km/attempts/") and "/_outputs/centroid_history" in f.key
                   for f in store.list("jobs/km/attempts/")), "the waiting copies go once published"


def dataclass_copy(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def test_the_review_compares_with_the_published_version_as_a_hand_computation(spark, tmp_path):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.08, seed=9))
    out = tmp_path / "out"

    def config(damping):
        return pagerank_config(tmp_path, edges, max_epochs=4, tolerance=0.0, output_path=str(out),
                               body_params={"damping": damping}, retain_last=10)

    IterationRunner(config(0.85), spark).run()  # published without a review
    before = read_published(out, "ranks")
    unreviewed = tree_digest(out)
    rewound = IterationRunner(config(0.6), spark, rewind_to=1, reviewed=True)
    assert rewound.run().published == {}
    assert tree_digest(out) == unreviewed
    review = rewound.review()
    [ranks] = review["outputs"]
    now = pd.concat(pd.read_parquet(os.path.join(out, k)) for k in sorted(tree_digest(out)) if "/v-pr.r1-" in "/" + k)
    assert ranks["rows"] == len(now) == len(before)

    # by hand: the staged ranks against the published ones, by node
    merged = now.merge(before, on="node", suffixes=("", "_was"))
    changed = int((merged["rank"] != merged["rank_was"]).sum())
    c = ranks["comparison"]
    assert (c["added"], c["removed"], c["changed"], c["unchanged"]) == (0, 0, changed, len(now) - changed)
    assert c["keys"] == ["node"] and c["current_rows"] == len(before)
    assert c["largest_change"]["rank"] == pytest.approx((merged["rank"] - merged["rank_was"]).abs().max(), abs=0)
    order_now = now.sort_values(["rank", "node"], ascending=[False, True])["node"].tolist()
    order_was = before.sort_values(["rank", "node"], ascending=[False, True])["node"].tolist()
    top = c["top"]
    assert [r["key"] for r in top["rows"]] == [[n] for n in order_now[:10]]
    for r in top["rows"]:
        node = r["key"][0]
        assert r["place"] == order_now.index(node) + 1 and r["was_place"] == order_was.index(node) + 1
        assert r["moved"] == r["was_place"] - r["place"]
        assert r["change"] == pytest.approx(float(now.set_index("node").loc[node, "rank"])
                                            - float(before.set_index("node").loc[node, "rank"]), abs=0)
    assert [x["key"][0] for x in top["left"]] == [n for n in order_was[:10] if n not in order_now[:10]]
    _, body = review_markdown(review)
    assert "| added | removed | changed | unchanged |" in body and f"| 0 | 0 | {changed} |" in body

    rewound.approve("carol")
    assert published(str(out), "ranks").job_id == "pr.r1"


def test_a_centroid_shift_in_the_review_is_the_distance_each_centroid_moved(spark, tmp_path):
    blobs(tmp_path / "points.parquet", n=300, seed=8)
    out = tmp_path / "out"

    def config(seed):
        return JobConfig(job_id="km", body="kmeans", input=str(tmp_path / "points.parquet"),
                         checkpoint_root=str(tmp_path / "store"), output_path=str(out),
                         body_params={"k": 3, "seed": seed}, max_epochs=2, tolerance=0.0, num_partitions=2)

    IterationRunner(config(1), spark).run()
    was = read_published(out, "centroids").set_index("cluster_id")
    again = IterationRunner(config(2), spark, rewind_to=0, reviewed=True)
    again.run()
    review = again.review()
    [centroids] = [o for o in review["outputs"] if o["name"] == "centroids"]
    staged = [k for k in tree_digest(out) if k.startswith("centroids/v-km.r1-")]
    now = pd.concat(pd.read_parquet(out / k) for k in staged).set_index("cluster_id")
    shifts = {i: float(np.linalg.norm(now.loc[i, ["x", "y", "z"]].to_numpy(float) - was.loc[i, ["x", "y", "z"]].to_numpy(float)))
              for i in now.index}
    shift = centroids["comparison"]["shift"]
    assert {r["key"][0]: r["shift"] for r in shift["rows"]} == pytest.approx(shifts, abs=1e-12)
    assert shift["max"] == pytest.approx(max(shifts.values()), abs=1e-12)
    assert [r["key"][0] for r in shift["rows"]] == sorted(shifts, key=lambda i: -shifts[i])
    _, body = review_markdown(review)
    assert "Shift (distance from the published values): largest" in body
    again.reject("dave", "another seed")
    assert [k for k in tree_digest(out) if "v-km.r1-" in k] == []
    assert published(str(out), "centroids").job_id == "km"
