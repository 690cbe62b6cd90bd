"""A daily PageRank: the batch of each date runs to convergence on that date's graph, warm-started
from the previous date's final ranks, and publishes under ``<output_path>/<date>``.

``input_path`` may contain ``{date}`` (replaced by the batch's date, ``YYYY-MM-DD``) to read
each day's edges. Backfill past dates with ``airflow backfill create``; re-running a finished
date changes nothing unless the run sets ``recompute``, which recomputes the batch from the
checkpoint it started from and replaces its outputs atomically.
"""

from __future__ import annotations

import datetime as dt
import os

from iterations.dag_factory import LOCAL_DIR, iteration_dag, job_params, pagerank_params

EPOCHS_PER_BATCH = 20

body_params = pagerank_params()
params = job_params(
    job_id="pagerank_daily",
    input_path=os.path.join(LOCAL_DIR, "demo", "input", "edges.parquet"),
    max_epochs=50,
    tolerance=1e-8,
    scheduled=True,
) | body_params

dag = iteration_dag(
    dag_id="iterate_pagerank_daily",
    body="pagerank",
    params=params,
    body_param_names=tuple(body_params),
    epochs_per_batch=EPOCHS_PER_BATCH,
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    tags=("scheduled",),
    doc_md=__doc__,
)
