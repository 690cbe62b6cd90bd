"""docs/writing-a-body.md, sections 5 and 6, run as written: in an empty directory outside the
checkout, the example package installed into a path of its own, the library run, a DAG file in
a DAGs folder of its own, ``airflow dags test`` of it in an Airflow home of its own. Nothing is
written into the checkout or its environment."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pandas as pd
import pytest

from include.runs.overview import job_overview
from include.store import LocalStore
from tests.conftest import ROOT, free_port
from tests.docs import block

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_body_guide_from_an_empty_directory(tmp_path):
    steps = [block("docs/writing-a-body.md", "export ITERATIONS=/path/to/the/checkout"),
             block("docs/writing-a-body.md", "mkdir dags && cat"),
             block("docs/writing-a-body.md", "export AIRFLOW_HOME=$PWD/airflow"),
             block("docs/writing-a-body.md", "airflow dags test label_propagation --conf '{\"job_id\": \"lp2\""),
             block("docs/writing-a-body.md", "python -m spark_jobs.connect_server stop")]
    script = "set -euo pipefail\n" + "".join(b.text for b in steps).replace("/path/to/the/checkout", ROOT)
    # a newcomer's shell: none of the project's or Airflow's settings; the one addition is a
    # free port for the Spark Connect server the DAG run starts, so that it meets no other
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ITERATIONS", "PYTHONPATH"))}
    env["ITERATIONS_SPARK_CONNECT_PORT"] = str(free_port())
    watched = ["dags", "plugins", "include", "spark_jobs", "examples"]  # (other tests write elsewhere meanwhile)

    def checkout() -> str:
        listed = subprocess.run(["git", "status", "--porcelain", "--ignored", "--", *watched], cwd=ROOT,
                                capture_output=True, text=True).stdout
        return "\n".join(line for line in listed.splitlines() if "__pycache__" not in line)

    before = checkout()
    work = tmp_path / "lp-work"
    try:
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=900)
    finally:  # the Spark Connect server the run started, whatever happened
        subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], cwd=ROOT, capture_output=True,
                       env={**env, "ITERATIONS_LOCAL_DIR": str(work / "local")}, timeout=120)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]

    # section 5: the library run converged and published the labels
    assert "converged" in log, log[-3000:]
    assert "verified: epoch 2 identical" in log, log[-3000:]  # the determinism audit
    assert "node  label" in log, log[-3000:]  # the output read through its manifest
    labels = pd.read_parquet(glob.glob(str(work / "out" / "lp" / "labels" / "**" / "*.parquet"), recursive=True)
                             or str(work / "out" / "lp" / "labels"))
    assert dict(zip(labels["node"], labels["label"])) == {1: 1, 2: 1, 3: 1, 4: 4, 5: 4, 6: 4}
    # section 6: the DAG run succeeded and its finish published under the DAG's own output default
    assert "state=success" in log, log[-6000:]
    dag_labels = pd.read_parquet(str(work / "out" / "lp1" / "labels"))
    assert sorted(zip(dag_labels["node"], dag_labels["label"])) == sorted(zip(labels["node"], labels["label"]))
    assert (work / "store" / "jobs" / "lp1").is_dir() and (work / "airflow" / "airflow.db").exists()
    # its lineage, read from the file transport: the finish's COMPLETE event names the output
    finish = [line for line in log.splitlines() if line.startswith("COMPLETE label_propagation.finish")]
    assert len(finish) == 1 and str(work / "out" / "lp1" / "labels") in finish[0], log[-6000:]

    # section 7: the refused attempt and the one that committed, as the Iterations view reads them
    assert "refused by the data check, as expected" in log and "FAILED  run.nothing_changes" in log
    view = job_overview(LocalStore(str(work / "store")), "lp2")
    assert view.status == "TERMINATED"
    first = view.epochs[0]
    assert sorted((a.status, a.why) for a in first.attempts) == [
        ("aborted", "data checks failed: run.nothing_changes"), ("committed", None)]

    # and everything stopped: the guide's last command
    assert "stopped the Spark Connect server on 127.0.0.1:" in log, log[-2000:]

    assert checkout() == before, "the checkout is as it was"
    site = subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), "-c",
                           "import importlib.util as u; print(u.find_spec('label_propagation'))"],
                          capture_output=True, text=True, env={k: v for k, v in env.items() if k != "PYTHONPATH"})
    assert site.stdout.strip() == "None", "the project's environment is as it was"
