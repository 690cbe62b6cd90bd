"""PageRank whose ranks a person approves before anyone sees them (write, audit, publish).

The same job as ``iterate_pagerank``; when it ends, ``finish`` takes the final checkpoint and
stages the ranks as a version no reader sees, ``review`` asks the user ``reviewer`` (Airflow's
human-in-the-loop: the UI's Required Actions, or the REST API) showing the staged ranks: rows,
schema, data checks, the top nodes and how far they moved since the published version. Approve:
``publish`` switches the ranks, once, with one asset event. Reject, or no answer within a day:
the staged ranks are deleted, nothing visible changed, and triggering the DAG again with the
same ``job_id`` asks again. The user who triggered a run may not approve it. The wait holds no
worker slot.
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
    approvers=("reviewer",),  # user ids of the auth manager (SimpleAuthManager: user names)
    approval_timeout=24 * 3600,
)
