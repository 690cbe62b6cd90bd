"""README.md's two commands, as written: the demo (``./run.sh demo``: PageRank end to end on the
embedded default, run here in an Airflow home and store of the test's own) and the test command,
which is what CI runs (.ci/run, on a fresh clone)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import ROOT
from tests.docs import block

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_readme_commands(airflow_env, tmp_path):
    demo, test = block("README.md", "./run.sh demo").commands()
    assert test == "./run.sh test"
    ci = [line.strip() for line in open(os.path.join(ROOT, ".ci", "run")) if line.strip() and not line.startswith("#")]
    assert ci[-1] == test, "CI runs the README's test command"

    # a newcomer's shell; the embedded defaults under the test's own directory (not the
    # checkout's .local). The embedded Spark Connect server is the one the DAG tests run on, as
    # it is for a user whose server is up from an earlier run ("keeps running for the next runs"):
    # its state directory with it, which makes it this checkout's (spark_jobs.connect_server.ours);
    # a new server's start is the body guide's (tests/dags/test_body_guide.py)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ITERATIONS", "PYSPARK"))}
    env.update({"ITERATIONS_LOCAL_DIR": str(tmp_path),
                **{k: airflow_env[k] for k in ("ITERATIONS_SPARK_CONNECT_PORT", "ITERATIONS_SPARK_CONNECT_DIR")}})
    done = subprocess.run(["bash", "-c", demo], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "(Airflow DAG iterate_pagerank)" in out and re.search(r"ranks sum to 1\.0000000000", out), out[-3000:]
    diff = float(re.search(r"max \|ours - networkx\| = (\S+)", out).group(1))
    assert diff <= 1e-5
    # its progress in sentences, as it goes: each epoch committed, no logger internals
    assert re.search(r"epoch 0 committed: feedback=\d+ l1_delta=", out), out[-3000:]
    # (the task logs `dags test` prints are these lines; the files a scheduler's workers keep are
    # read by tests/dags/test_stack.py)
    assert "loc=" not in done.stdout and "[iterations]" not in done.stdout, done.stdout[-3000:]
