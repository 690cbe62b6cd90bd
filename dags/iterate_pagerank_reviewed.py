"""PageRank whose outputs a person approves before they are published.

The same job as ``iterate_pagerank``; when it ends, its ``finish`` task asks for approval
(Airflow's human-in-the-loop: the UI's Required Actions, or the REST API) and shows the job's
final metrics and data checks. Approve: the final checkpoint is taken and the ranks are
published, once. Reject: nothing is published and the job is suspended at its latest
checkpoint; triggering the DAG again with the same ``job_id`` asks again. The task waits for
the answer without holding a worker slot.
"""

from __future__ import annotations

import os

from iterations.dag_factory import LOCAL_DIR, iteration_dag, job_params, pagerank_params

body_params = pagerank_params()
params = job_params(
    job_id="pagerank_reviewed",
    input_path=os.path.join(LOCAL_DIR, "demo", "input", "edges.parquet"),
    max_epochs=50,
    tolerance=1e-8,
) | body_params

dag = iteration_dag(
    dag_id="iterate_pagerank_reviewed",
    body="pagerank",
    params=params,
    body_param_names=tuple(body_params),
    epochs_per_batch=20,
    doc_md=__doc__,
    checks_file="include/pagerank_checks.json",
    tags=("approval",),
    approve_publication=True,
)
