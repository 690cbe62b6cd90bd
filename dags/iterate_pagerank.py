"""PageRank as an Airflow DAG: each epoch a Spark job, each epoch boundary a checkpoint.

Trigger it with parameters from the UI (the form is built from the params' JSON schema).
"""

from __future__ import annotations

import os

from airflow.sdk import Param

from iterations.dag_factory import PROJECT_ROOT, iteration_dag, job_params

EPOCHS_PER_BATCH = 20

params = job_params(
    job_id="pagerank",
    input_path=os.path.join(PROJECT_ROOT, ".local", "demo", "input", "edges.parquet"),
    output_path=os.path.join(PROJECT_ROOT, ".local", "output", "pagerank"),
    max_epochs=50,
    tolerance=1e-8,
)
params["damping"] = Param(0.85, type="number", exclusiveMinimum=0, exclusiveMaximum=1,
                          description="Probability of following a link.")

dag = iteration_dag(
    dag_id="iterate_pagerank",
    body="pagerank",
    params=params,
    body_param_names=("damping",),
    epochs_per_batch=EPOCHS_PER_BATCH,
    doc_md=__doc__,
)
