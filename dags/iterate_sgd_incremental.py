"""An Airflow DAG for mini-batch gradient descent over input that keeps arriving: drop Parquet files into
``input_path`` while the DAG runs; each epoch waits (deferred) for new files, takes a gradient
step on the files assigned to it, and checkpoints. Every file is processed exactly once, across
failures and restarts. Create ``_DONE`` under ``input_path`` to end the input: the job then
finishes and publishes ``model`` and ``splits`` (which file each epoch processed).
"""

from __future__ import annotations

import os

from iterations.dag_factory import LOCAL_DIR, iteration_dag, job_params, sgd_params

EPOCHS_PER_BATCH = 10

body_params = sgd_params()
params = job_params(
    job_id="sgd",
    input_path=os.path.join(LOCAL_DIR, "incoming"),
    max_epochs=10_000,
    tolerance=0,
    num_partitions=2,
) | body_params

dag = iteration_dag(
    dag_id="iterate_sgd_incremental",
    body="sgd",
    params=params,
    body_param_names=tuple(body_params),
    epochs_per_batch=EPOCHS_PER_BATCH,
    doc_md=__doc__,
    wait_for_input=True,
)
