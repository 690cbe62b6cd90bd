"""README.md's two commands, as written: the demo (``./run.sh demo``: PageRank end to end on the
embedded default, run here in an Airflow home and store of the test's own) and the test command,
which is what CI runs (.ci/run, on a fresh clone)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, free_port
from tests.docs import block

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_readme_commands(tmp_path):
    demo, test = block("README.md", "./run.sh demo").commands()
    assert test == "./run.sh test"
    ci = [line.strip() for line in open(os.path.join(ROOT, ".ci", "run")) if line.strip() and not line.startswith("#")]
    assert ci[-1] == test, "CI runs the README's test command"

    # a newcomer's shell; the embedded defaults under the test's own directory (not the
    # checkout's .local), the Spark Connect server the DAG run starts on a free port
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ITERATIONS", "PYSPARK"))}
    env.update({"ITERATIONS_LOCAL_DIR": str(tmp_path), "ITERATIONS_SPARK_CONNECT_PORT": str(free_port())})
    try:
        done = subprocess.run(["bash", "-c", demo], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    finally:
        subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], cwd=ROOT, env=env,
                       capture_output=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "(Airflow DAG iterate_pagerank)" in out and re.search(r"ranks sum to 1\.0000000000", out), out[-3000:]
    diff = float(re.search(r"max \|ours - networkx\| = (\S+)", out).group(1))
    assert diff <= 1e-5
    # its progress in sentences, as it goes: each epoch committed, no logger internals
    assert re.search(r"epoch 0 committed: feedback=\d+ l1_delta=", out), out[-3000:]
    assert "loc=" not in done.stdout and "[iterations]" not in done.stdout, done.stdout[-3000:]
    # the task logs Airflow keeps say what the tasks did, without the callsite of each line
    logs = [os.path.join(d, f) for d, _, files in os.walk(tmp_path / "airflow" / "logs") for f in files]
    text = "".join(open(p, errors="replace").read() for p in logs)
    assert not logs or "loc=" not in text and '"loc"' not in text, [p for p in logs if "loc" in open(p).read()][:3]
