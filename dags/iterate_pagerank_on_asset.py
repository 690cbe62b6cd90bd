"""PageRank of a graph another job publishes, run each time it publishes: an Airflow DAG scheduled
on its input's Asset. Each publication of the edges is an asset event; the run it starts is a batch of
its own (dated by when the event came: the run has no logical date), warm-started from the previous
batch's final ranks, and publishes under ``<output_path>/<date>``.

The input is read through its publication manifest when it is an output another iteration job
published (``<name>/_PUBLISHED.json``): the batch reads the version current when it started, for
every epoch, retry and continuation, never the versions kept beside it. What the asset events
said arrived is in the first task's log and in the batch's generation record.
"""

from __future__ import annotations

import datetime as dt
import os

from iterations.assets import input_asset
from iterations.dag_factory import LOCAL_DIR, iteration_dag, job_params, pagerank_params

EPOCHS_PER_BATCH = 20
EDGES = os.path.join(LOCAL_DIR, "graph", "edges")  # an output named "edges" published under LOCAL_DIR/graph

body_params = pagerank_params()
params = job_params(
    job_id="pagerank_on_asset",
    input_path=EDGES,
    max_epochs=50,
    tolerance=1e-8,
    scheduled=True,
) | body_params

dag = iteration_dag(
    dag_id="iterate_pagerank_on_asset",
    body="pagerank",
    params=params,
    body_param_names=tuple(body_params),
    epochs_per_batch=EPOCHS_PER_BATCH,
    schedule=[input_asset(EDGES)],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    tags=("scheduled", "assets"),
    doc_md=__doc__,
)
