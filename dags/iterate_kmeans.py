"""k-means as an Airflow DAG: each Lloyd iteration a Spark job, each a checkpoint."""

from __future__ import annotations

import os

from airflow.sdk import Param

from iterations.dag_factory import PROJECT_ROOT, iteration_dag, job_params

EPOCHS_PER_BATCH = 10

params = job_params(
    job_id="kmeans",
    input_path=os.path.join(PROJECT_ROOT, ".local", "demo", "input", "points.parquet"),
    output_path=os.path.join(PROJECT_ROOT, ".local", "output", "kmeans"),
    max_epochs=30,
    tolerance=1e-6,
    num_partitions=2,
)
params["k"] = Param(3, type="integer", minimum=1, maximum=10_000, description="Number of clusters.")
params["seed"] = Param(42, type="integer", description="Seed of the deterministic k-means++ initialisation.")

dag = iteration_dag(
    dag_id="iterate_kmeans",
    body="kmeans",
    params=params,
    body_param_names=("k", "seed"),
    epochs_per_batch=EPOCHS_PER_BATCH,
    doc_md=__doc__,
)
