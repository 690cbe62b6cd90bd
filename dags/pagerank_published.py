"""Downstream of ``iterate_pagerank``: one run per publication of its outputs.

Scheduled on the Assets ``iterate_pagerank``'s finish publishes (through its alias
``iterate_pagerank.outputs``): each time a job of that DAG publishes its ranks, this DAG runs
once (publications that arrive before its next run is created are taken by one run), and its
task reads what each asset event says arrived (job, checkpoint, version, rows) and
checks it against the output's manifest: the version a reader of the location sees now, its
files and rows. A DAG that needs one output only is scheduled on that output's Asset instead:
``iterations.assets.output_asset(output_path, "ranks")``.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task

from iterations.assets import outputs_alias

with DAG(
    dag_id="pagerank_published",
    schedule=[outputs_alias("iterate_pagerank")],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["iterations", "downstream"],
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=10)},
    doc_md=__doc__,
) as dag:

    @task
    def read_publication(*, triggering_asset_events=None) -> list[dict]:
        """Each publication that triggered this run, as the output's readers see it."""
        from iterations.assets import describe_publications

        return describe_publications(triggering_asset_events)

    read_publication()
