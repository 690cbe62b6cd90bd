"""New input arriving while a job iterates: files dropped into the input prefix during the run
are each processed exactly once, across a failure and a real SIGKILL, verified by the counts
and by the final model (a numpy replay of the gradient steps with the epochs' recorded files)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
import pytest

from include.checkpoints.head_state import HeadStatus
from include.contract.config import InputSpec, JobConfig
from include.epoch.job import DEFAULT_CHECKS
from include.epoch.splits import DONE_MARKER
from include.process import failpoints
from include.process.failpoints import FailpointError
from spark_jobs.bodies.sgd import INTERCEPT
from spark_jobs.runner import IterationRunner
from tests.conftest import ROOT
from tests.helpers import read_published

pytestmark = pytest.mark.spark

LR = 0.05


def drop_file(directory, i: int, rows: int = 40) -> str:
    """Write batch i atomically (a hidden temporary name, then a rename)."""
    os.makedirs(directory, exist_ok=True)
    name = f"batch-{i:03d}.parquet"
    final = os.path.join(directory, name)
    if os.path.exists(final):
        return final
    rng = np.random.default_rng(i)
    x = rng.normal(size=(rows, 2))
    y = 3.0 * x[:, 0] - 2.0 * x[:, 1] + 0.5 + rng.normal(scale=0.01, size=rows)
    tmp = os.path.join(directory, f".{name}.tmp")
    pd.DataFrame({"id": np.arange(rows) + 1000 * i, "x1": x[:, 0], "x2": x[:, 1], "y": y}).to_parquet(tmp)
    os.rename(tmp, final)
    return final


def end_input(directory) -> None:
    open(os.path.join(directory, DONE_MARKER), "w").close()


def replay(directory, splits: pd.DataFrame) -> dict[str, float]:
    """The model numpy computes from the same files, grouped by the epochs that processed them."""
    w, b = np.zeros(2), 0.0
    for _epoch, group in splits.sort_values(["epoch", "split"]).groupby("epoch"):
        batch = pd.concat([pd.read_parquet(os.path.join(directory, s)) for s in group["split"]])
        X, y = batch[["x1", "x2"]].to_numpy(), batch["y"].to_numpy()
        r = X @ w + b - y
        w, b = w - LR * (r[:, None] * X).mean(axis=0), b - LR * r.mean()
    return {"x1": w[0], "x2": w[1], INTERCEPT: b}


def check_exactly_once(directory, output_path, files: int, rows: int = 40):
    splits = read_published(output_path, "splits")
    assert sorted(splits["split"]) == [f"batch-{i:03d}.parquet" for i in range(files)], "each file once"
    assert (splits["rows"] == rows).all() and splits["rows"].sum() == files * rows, "every row counted once"
    model = read_published(output_path, "model").set_index("name")["weight"].to_dict()
    expected = replay(directory, splits)
    assert model.keys() == expected.keys()
    for k in expected:
        assert model[k] == pytest.approx(expected[k], rel=1e-9, abs=1e-12), k
    return splits, model


def test_files_added_during_the_run_each_processed_once_across_a_failure(spark, tmp_path):
    inbox = str(tmp_path / "in")
    drop_file(inbox, 0), drop_file(inbox, 1)
    cfg = JobConfig(job_id="sgd", body="sgd", input=inbox, checkpoint_root=str(tmp_path / "store"),
                    output_path=str(tmp_path / "out"), max_epochs=40, tolerance=None, num_partitions=2,
                    body_params={"learning_rate": LR, "max_splits_per_epoch": 1})

    def more_input(plan, decision, reports):  # files arrive while the job runs
        if plan.epoch == 1:
            drop_file(inbox, 2)
        if plan.epoch == 2:
            drop_file(inbox, 3), drop_file(inbox, 4)
        if plan.epoch == 4:
            end_input(inbox)

    checks = DEFAULT_CHECKS + (more_input,)
    failpoints.configure("commit.after_write@epoch=4=raise")  # checkpoint 4 written, the process dies
    try:
        with pytest.raises(FailpointError):
            IterationRunner(cfg, spark, checks=checks, wait_for_input=30, poll_interval=0.2).run()
    finally:
        failpoints.configure("")
    result = IterationRunner(cfg, spark, checks=checks, wait_for_input=30, poll_interval=0.2).run()
    assert result.status is HeadStatus.TERMINATED and result.restored_from == 4
    assert result.decisions[-1].reason == "end of input"
    splits, _ = check_exactly_once(inbox, cfg.output_path, files=5)
    assert splits.groupby("epoch").size().max() == 1, "one split per epoch (max_splits_per_epoch=1)"
    final = result.final
    assert final.lifecycle.all_fully_finished
    assert final.coordinators["splits"]["state"]["pending"] == [] and final.coordinators["splits"]["state"]["ended"]


@pytest.mark.slow  # a run_job process with its own Spark driver
def test_sigkill_while_files_arrive(spark, tmp_path):
    """run_job is SIGKILLed inside a commit while a writer keeps dropping files; the restarted
    job (the library runner in this process, with the configuration run_job builds) processes
    every file exactly once."""
    inbox = str(tmp_path / "in")
    drop_file(inbox, 0)
    env = {k: v for k, v in os.environ.items() if k not in ("ITERATIONS_FAILPOINTS", "ITERATIONS_DRIVER_PID")}
    env["PYTHONPATH"] = ROOT
    cmd = [sys.executable, "-m", "spark_jobs.run_job", "--job-id", "sgd", "--body", "sgd", "--input", inbox,
           "--checkpoint-root", str(tmp_path / "store"), "--output-path", str(tmp_path / "out"),
           "--max-epochs", "200", "--num-partitions", "2", "--param", f"learning_rate={LR}",
           "--param", "max_splits_per_epoch=2", "--wait-for-input", "60"]
    stop = threading.Event()

    def writer():
        for i in range(1, 8):
            if stop.wait(1.0):
                return
            drop_file(inbox, i)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        killed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, start_new_session=True,
                                env={**env, "ITERATIONS_FAILPOINTS": "commit.after_write@epoch=2=kill"})
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        thread.join()
        end_input(inbox)
        # The restart, in this process: the JobConfig and runner options run_job builds from
        # cmd's arguments (its defaults for the rest). The killed run's lease is stale at once:
        # its process (reaped by subprocess.run) is gone from this host (include.runs.ownership).
        config = JobConfig(job_id="sgd", body="sgd", input=InputSpec(inbox, None),
                           checkpoint_root=str(tmp_path / "store"), output_path=str(tmp_path / "out"),
                           output_format="parquet", body_params={"learning_rate": LR, "max_splits_per_epoch": 2},
                           max_epochs=200, tolerance=1e-6, num_partitions=2, retain_last=3, retain_batches=None,
                           retain_history=None, checks=None, on_damaged_checkpoint="fail")
        resumed = IterationRunner(config, spark, store_options={}, wait_for_input=60, take_over=False,
                                  lease_wait=0.0, rewind_to=None).run(batch_id=None, max_epochs_in_batch=None)
    finally:
        stop.set()
        thread.join()
    assert resumed.status is HeadStatus.TERMINATED and resumed.restored_from == 2
    assert resumed.decisions and resumed.decisions[-1].reason == "end of input"
    check_exactly_once(inbox, str(tmp_path / "out"), files=8)
