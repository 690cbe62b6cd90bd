"""The extension point: a body in a package of its own (examples/label-propagation), installed
into a temporary path, runs through the DAG factory and the library runner with no change to the
project, its parameters declared once (a dataclass) and turned into the DAG's params."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import networkx as nx
import pandas as pd
import pytest

from include.contract.config import JobConfig
from include.errors import ConfigError
from spark_jobs.runner import IterationRunner
from tests.conftest import ROOT
from tests.helpers import write_dag_file

pytestmark = pytest.mark.spark


@pytest.fixture
def installed(tmp_path):
    """The example package installed into a path of its own, importable while the test runs."""
    site, source = tmp_path / "site", tmp_path / "label-propagation"
    # built from a copy: pip builds in the source tree, and the checkout stays as it is
    shutil.copytree(os.path.join(ROOT, "examples", "label-propagation"), source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                           str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "label_propagation" / "__init__.py").exists()
    sys.path.insert(0, str(site))
    yield site
    sys.path.remove(str(site))
    for name in [m for m in sys.modules if m == "label_propagation" or m.startswith("label_propagation.")]:
        del sys.modules[name]


def test_a_body_from_its_own_package(installed, spark, tmp_path):
    edges = [(i, i + 1) for i in range(12)] + [(20, 21), (22, 21), (30, 30), (40, 41), (41, 42), (42, 40)]
    pd.DataFrame(edges, columns=["src", "dst"]).to_parquet(tmp_path / "edges.parquet")

    # the DAG factory: the body's parameter (declared once, on its dataclass) is a DAG param
    dags = write_dag_file(tmp_path / "dags", "label_propagation", "label_propagation:LabelPropagation",
                          epochs_per_batch=40, job_id="lp", input_path=str(tmp_path / "edges.parquet"),
                          output_path=str(tmp_path / "out"), max_epochs=40, tolerance=0.5)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dags))
    assert bag.import_errors == {}
    dag = bag.dags["label_propagation"]
    directed = dag.params.get_param("directed")
    assert directed.value is False and directed.schema["type"] == "boolean"
    assert "Follow edges from src to dst only" in directed.description
    assert any(t.task_id == "epoch_0.run" for t in dag.tasks)

    # the library runner, by the same reference
    config = JobConfig(job_id="lp", body="label_propagation:LabelPropagation", input=str(tmp_path / "edges.parquet"),
                       checkpoint_root=str(tmp_path / "store"), max_epochs=40, tolerance=0.5, num_partitions=2)
    result = IterationRunner(config, spark).run()
    assert result.status.value == "TERMINATED" and result.decisions[-1].reason.startswith("converged")
    labels = result.outputs["labels"].toPandas()
    graph = nx.Graph(edges)
    assert dict(zip(labels["node"], labels["label"])) == {n: min(c) for c in nx.connected_components(graph) for n in c}
    assert len(result.epochs_computed) == 13, "one epoch per hop of the path's 12, and one that changes nothing"

    # its parameters are checked as declared
    bad = JobConfig(**{**config.__dict__, "job_id": "lp-bad", "body_params": {"directed": "yes"}})
    with pytest.raises(ConfigError, match=r"directed must be true or false, got 'yes'"):
        IterationRunner(bad, spark).run()
