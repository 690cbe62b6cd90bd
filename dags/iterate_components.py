"""Connected components as an Airflow DAG: each large-star / small-star round a Spark job, each a
checkpoint. The input is an edge list (``src``, ``dst``: integer node ids, undirected); the
output ``components(node, component)`` names each node's component by its smallest node id.
The rounds needed grow with log(n), not with the graph's diameter.
"""

from __future__ import annotations

import os

from iterations.dag_factory import LOCAL_DIR, iteration_dag, job_params

EPOCHS_PER_BATCH = 40

params = job_params(
    job_id="components",
    input_path=os.path.join(LOCAL_DIR, "demo", "input", "edges.parquet"),
    max_epochs=60,
    tolerance=0.5,  # converged once no edge is unsettled (the metric counts edges: 0 < 0.5)
    num_partitions=2,
)

dag = iteration_dag(
    dag_id="iterate_components",
    body="components",
    params=params,
    epochs_per_batch=EPOCHS_PER_BATCH,
    doc_md=__doc__,
)
