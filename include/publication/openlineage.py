"""What an iteration job reads and publishes, named the way OpenLineage names datasets, for the
orchestrator to report (iterations.lineage turns it into the OpenLineage provider's facets).

Datasets are the job's input and its published outputs only: a checkpoint's objects are the
job's internal state, never a dataset. An output's version is the checkpoint it was published
from (``v-<job>-<checkpoint>``): a retried or restored epoch, a finish run again, report the
same version, never a second one. Every run of every task of one job carries the same logical
job (``iterations.<job_id>``) and the run id of its generation: one logical job per iteration
job, each task's run a child of it. A fork's logical job names the job and checkpoint it was
forked from (``forkedFrom``)."""

from __future__ import annotations

import os
import uuid
from typing import Any, Iterable, Mapping
from urllib.parse import urlparse

#: the namespace of the logical jobs' run ids (uuid5 of the store and the generation)
_RUNS = uuid.UUID("6f1d4c1e-2f55-4b8e-9a57-6c0de1e7a1b0")


def dataset_name(location: str) -> tuple[str, str]:
    """(namespace, name) of a location by OpenLineage's naming: ``s3://bucket/key`` ->
    ``("s3://bucket", "key")``; a local path or ``file://`` URL -> ``("file", "/abs/path")``."""
    parsed = urlparse(location)
    if parsed.scheme in ("s3", "s3a"):
        return f"s3://{parsed.netloc}", parsed.path.strip("/")
    path = parsed.path if parsed.scheme == "file" else location
    return "file", os.path.abspath(path)


def job_lineage(job, *, epoch: int | None = None, checkpoint_id: int | None = None,
                published: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """What a task of ``job`` read and published: ``{"job": {...}, "inputs": [...], "outputs":
    [...]}``. ``published``: ``Publisher.publications`` records (or per-epoch ones: name, uri,
    extra with version), each an output dataset with its version."""
    config = job.config
    base = getattr(getattr(job, "output_owner", None), "job_id", None) or config.job_id
    logical = {"name": f"iterations.{base}", "generation": config.job_id,
               "runId": str(uuid.uuid5(_RUNS, f"{config.checkpoint_root}\n{config.job_id}")),
               "epoch": epoch, "checkpointId": checkpoint_id}
    forked = getattr(job, "forked_from", None)
    if forked:  # a fork names the job and checkpoint it started from (include.runs.forks)
        logical["forkedFrom"] = {"job": f"iterations.{forked['job_id']}", "checkpointId": forked["checkpoint_id"],
                                 "epoch": forked["epoch"]}
    outputs = []
    for p in published:
        namespace, name = dataset_name(p["uri"])
        outputs.append({"namespace": namespace, "name": name, "version": str(p["extra"]["version"]),
                        "rows": p["extra"].get("rows")})
    inputs = []
    path = getattr(config.input, "path", None)
    if path:
        namespace, name = dataset_name(path)
        pinned = getattr(job, "pinned_input", None)  # a published output read as input: its version
        inputs.append({"namespace": namespace, "name": name, **({"version": pinned["version"]} if pinned else {})})
    return {"job": logical, "inputs": inputs, "outputs": outputs}
