"""The Python and command examples of README.md and docs/library.md, run as written (read from
the pages) in an empty working directory with a small input of the shape they name."""

from __future__ import annotations

import os
import subprocess
import sys

import networkx as nx
import pytest

from tests.conftest import ROOT
from tests.docs import block

pytestmark = pytest.mark.spark

EDGES = [(1, 2), (2, 3), (3, 1), (4, 5), (6, 6), (7, 8), (8, 9)]
# PageRank's examples: a cycle through all 9 nodes, whose ranks are 1/9 from the start, so the
# examples' tolerance is reached in their first epochs (EDGES would take their 50-epoch limit)
CYCLE = [(n, n % 9 + 1) for n in range(1, 10)]


def write_edges(path, edges=EDGES) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write("src,dst\n" + "".join(f"{a},{b}\n" for a, b in edges))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "components"]:
        del sys.modules[name]


def test_the_readme_body_and_its_run(spark, workdir, capsys):
    (workdir / "components.py").write_text(block("README.md", "from pyspark.sql import functions as F").text)
    write_edges("edges.csv")
    scope: dict = {}
    exec(compile(block("README.md", "from include import JobConfig").text, "README.md", "exec"), scope)
    labels = scope["result"].outputs["labels"].toPandas()
    expected = {n: min(c) for c in nx.connected_components(nx.Graph(EDGES)) for n in c}
    assert dict(zip(labels["node"], labels["label"])) == expected
    assert "|node|label|" in capsys.readouterr().out.replace(" ", "")  # what .show() printed


def test_the_library_pages_run_from_python_and_from_the_command_line(spark, workdir):
    write_edges("data/edges.csv", CYCLE)
    scope: dict = {}
    exec(compile(block("docs/library.md", "from include import JobConfig").text, "docs/library.md", "exec"),
         scope)
    ranks = scope["result"].outputs["ranks"].toPandas()
    assert len(ranks) == 9 and ranks["rank"].sum() == pytest.approx(1.0, abs=1e-6)
    assert scope["result"].status.value == "TERMINATED"
    assert scope["result"].decisions[-1].reason.startswith("converged"), scope["result"].decisions[-1]

    write_edges("edges.csv", CYCLE)
    [command] = block("docs/library.md", "python -m spark_jobs.run_job").commands()
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert (workdir / ".local" / "out" / "ranks").exists(), os.listdir(workdir / ".local" / "out")
    assert ROOT not in str(workdir)
