"""An Airflow DAG for mini-batch gradient descent over input that keeps arriving, run when it
arrives: scheduled on the input's Asset instead of waiting in a sensor. Whoever drops Parquet
files into ``input_path`` announces them with an asset event of the input (an outlet of its
task, or ``POST /api/v2/assets/events``); each event starts a batch of the one job, which takes
a gradient step per epoch on the files that are new, checkpoints, and ends as soon as an epoch
finds no new file: no task waits for input between events. Every file is processed exactly once,
across failures and restarts. Create ``_DONE`` under ``input_path`` (and announce it) to end the
input: the job then finishes and publishes ``model`` and ``splits``.
"""

from __future__ import annotations

import os

from iterations.assets import input_asset
from iterations.dag_factory import LOCAL_DIR, iteration_dag, job_params, sgd_params

EPOCHS_PER_BATCH = 10
INCOMING = os.path.join(LOCAL_DIR, "incoming_on_asset")

body_params = sgd_params()
params = job_params(
    job_id="sgd_on_asset",
    input_path=INCOMING,
    max_epochs=10_000,
    tolerance=0,
    num_partitions=2,
) | body_params

dag = iteration_dag(
    dag_id="iterate_sgd_on_asset",
    body="sgd",
    params=params,
    body_param_names=tuple(body_params),
    epochs_per_batch=EPOCHS_PER_BATCH,
    doc_md=__doc__,
    wait_for_input=True,
    schedule=[input_asset(INCOMING)],
    dated_batches=False,  # every event goes on with the one job: its files are processed once
    tags=("assets",),
)
