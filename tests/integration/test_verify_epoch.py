"""The determinism audit (DESIGN invariant 9; ``IterationRunner.verify_epoch``, ``run_job
--verify-epoch``): epoch k recomputed from checkpoint k-1 in a scratch attempt that never commits
gives checkpoint k's bytes for a shipped body, and is flagged, naming the variable and partition,
for a body with an unseeded random; the store and the outputs are left byte for byte as they were."""

from __future__ import annotations

import pytest

from include.errors import ConfigError
from spark_jobs import run_job
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, tree_digest, write_edges

pytestmark = pytest.mark.spark


def test_a_shipped_body_verifies_identical_and_a_random_one_is_flagged(spark, tmp_path, capsys):
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(30, 0.12, seed=3))
    config = pagerank_config(tmp_path, edges, max_epochs=3, tolerance=0.0, output_path=str(tmp_path / "out"),
                             retain_last=10)
    IterationRunner(config, spark).run()
    before = tree_digest(tmp_path)

    runner = IterationRunner(config, spark)
    for epoch in (0, 2):  # from the input, and from a checkpoint
        verified = runner.verify_epoch(epoch)
        assert verified.identical, verified.describe()
        assert verified.describe().startswith(f"verified: epoch {epoch} identical")
    with pytest.raises(ConfigError, match="checkpoint 3 of job pr is its final checkpoint"):
        runner.verify_epoch(3)
    with pytest.raises(ConfigError, match=r"no committed checkpoint 7 .*epochs it can verify .*: \[0, 1, 2\]"):
        runner.verify_epoch(7)
    argv = ["--job-id", "pr", "--body", "pagerank", "--input", edges, "--checkpoint-root", str(tmp_path / "store"),
            "--output-path", str(tmp_path / "out"), "--max-epochs", "3", "--tolerance", "0", "--num-partitions", "3",
            "--retain-last", "10", "--verify-epoch", "1"]
    assert run_job.main(argv) == 0
    assert "verified: epoch 1 identical" in capsys.readouterr().out
    # an audit given other settings than the job's would flag a deterministic body: refused
    assert run_job.main([*argv, "--param", "damping=0.5", "--num-partitions", "2"]) == 1
    err = capsys.readouterr().err
    assert "num_partitions 3 (committed) vs 2 (now)" in err and "body param damping 0.85 (committed) vs 0.5" in err, err
    assert tree_digest(tmp_path) == before, "the store and the outputs are left as they were"

    noisy = pagerank_config(tmp_path, edges, job_id="noisy", body="tests.faulty_bodies:NoisyPageRank", max_epochs=3,
                            tolerance=0.0, output_path=str(tmp_path / "noisy-out"), retain_last=10)
    IterationRunner(noisy, spark).run()
    before = tree_digest(tmp_path)
    flagged = IterationRunner(noisy, spark).verify_epoch(1)
    assert not flagged.identical
    assert {(d.head, d.partition) for d in flagged.differences} == {("ranks", p) for p in range(3)}
    assert all(0 < d.largest["rank"] < 1e-8 for d in flagged.differences), flagged.describe()
    text = flagged.describe()
    assert text.startswith("not verified: epoch 1 of job noisy differs") and "variable ranks partition 0 differs" in text
    assert tree_digest(tmp_path) == before, "the store and the outputs are left as they were"
    assert run_job.main(["--job-id", "noisy", "--body", "tests.faulty_bodies:NoisyPageRank", *argv[4:8],
                         "--output-path", str(tmp_path / "noisy-out"), *argv[10:]]) == 1
    assert "variable ranks partition" in capsys.readouterr().out


def test_the_other_shipped_bodies_verify_identical(spark, tmp_path):
    import numpy as np
    import pandas as pd

    from include.contract.config import JobConfig

    rng = np.random.default_rng(4)
    pd.DataFrame({"id": np.arange(300), "x": rng.normal(size=300), "y": rng.normal(size=300)}).to_parquet(
        tmp_path / "points.parquet")
    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(40, 0.05, seed=9))
    for config in (
            JobConfig(job_id="km", body="kmeans", input=str(tmp_path / "points.parquet"), num_partitions=2,
                      checkpoint_root=str(tmp_path / "store"), body_params={"k": 3, "seed": 2}, max_epochs=3,
                      tolerance=0.0, retain_last=10),
            JobConfig(job_id="cc", body="components", input=edges, checkpoint_root=str(tmp_path / "store"),
                      num_partitions=2, max_epochs=3, tolerance=0.0, retain_last=10)):
        IterationRunner(config, spark).run()
        verified = IterationRunner(config, spark).verify_epoch(1)
        assert verified.identical, verified.describe()
