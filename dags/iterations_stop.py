"""Stop a running iteration job at its next epoch boundary.

Trigger with the job's ``job_id`` and ``checkpoint_root`` (the params of the run to stop) and a
``mode``:

- ``drain``: finish now: final checkpoint from the latest epoch, outputs published, the run ends;
- ``suspend``: stop with the state checkpointed, nothing flushed or published; trigger the job's
  DAG again (same ``job_id``) to resume. The result is the same as an uninterrupted run's.

The request is written into the job's checkpoint store; the job's next epoch head honours it.
The store must exist under the allowed roots (the embedded local directory, each DAG's own
directory in it included, and ITERATIONS_ALLOWED_ROOTS) and the job must have started; whoever
may trigger this DAG may stop any job there. The default is iterate_pagerank's store.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG

from include.store import dag_directory
from iterations.dag_factory import JOB_ID_PATTERN, LOCAL_DIR, param
from iterations.operators.epoch import StopRequestOperator

with DAG(
    dag_id="iterations_stop",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["iterations", "control"],
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=10)},
    doc_md=__doc__,
    params={
        "job_id": param("pagerank", type="string", pattern=JOB_ID_PATTERN,
                        description="The job to stop (for a scheduled job: the batch's generation, <job>.<date>)."),
        "checkpoint_root": param(dag_directory("iterate_pagerank", "store"), type="string", minLength=1,
                                 description="The job's checkpoint store."),
        "mode": param("drain", type="string", enum=["drain", "suspend"],
                      description="drain: finish and publish now; suspend: stop, resume later."),
    },
):
    # the checkpoint root must lie under the allowed roots, as for every iteration DAG's runs; this
    # DAG stops the jobs of every DAG, in their own directories too
    StopRequestOperator(task_id="request_stop", body="", allowed_roots=[LOCAL_DIR], across_dags=True)
