"""OpenLineage, the provider's way: an iteration operator records what its task read and
published (``include.publication.openlineage.job_lineage``) and returns it from
``get_openlineage_facets_on_complete`` as the provider's ``OperatorLineage``: the job's input
and published outputs as datasets (each output with its version), and an ``iterations`` run
facet naming the logical iteration job the task's run belongs to. Without the
apache-airflow-providers-openlineage package, or with OpenLineage not configured, nothing of
this runs."""

from __future__ import annotations

from typing import Any, Mapping

from attrs import define
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet, dataset_version_dataset, output_statistics_output_dataset


@define
class IterationsRunFacet(RunFacet):
    """The logical iteration job a task's run is part of: ``job`` (``iterations.<job_id>``) and
    ``jobRunId`` (its generation's run id: the same for every task of every batch of it),
    ``generation`` (the checkpoint log), ``epoch`` and ``checkpointId`` when the task had one,
    ``forkedFrom`` for a fork: the logical job, checkpoint and epoch it started from."""

    job: str
    jobRunId: str
    generation: str
    epoch: int | None = None
    checkpointId: int | None = None
    forkedFrom: dict | None = None

    @staticmethod
    def _get_schema() -> str:
        return "urn:iterations:facet:IterationsRunFacet:1"  # described in docs/airflow.md, Lineage


def operator_lineage(recorded: Mapping[str, Any] | None):
    """The provider's OperatorLineage of what a task recorded (None: it recorded nothing)."""
    if not recorded:
        return None
    from airflow.providers.openlineage.extractors import OperatorLineage

    job = recorded["job"]
    outputs = []
    for o in recorded["outputs"]:
        statistics = ({"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=int(o["rows"]))} if o.get("rows") is not None else {})
        outputs.append(OutputDataset(
            namespace=o["namespace"], name=o["name"], outputFacets=statistics,
            facets={"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=o["version"])}))
    return OperatorLineage(
        inputs=[InputDataset(namespace=i["namespace"], name=i["name"], facets={
            "version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=i["version"])}
            if i.get("version") else {}) for i in recorded["inputs"]],
        outputs=outputs,
        run_facets={"iterations": IterationsRunFacet(job=job["name"], jobRunId=job["runId"],
                                                     generation=job["generation"], epoch=job.get("epoch"),
                                                     checkpointId=job.get("checkpointId"),
                                                     forkedFrom=job.get("forkedFrom"))})
