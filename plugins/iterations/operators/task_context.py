"""What an iteration task takes from its Airflow context (the batch a DAG run is, who runs an
attempt) and how it fails for good (``permanent_errors``: no retries)."""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator, Mapping

from airflow.sdk.exceptions import AirflowFailException


def batch_id_of(context: Mapping[str, Any]) -> str:
    """The DAG run is the batch; its id, made safe for object keys. ``airflow tasks test`` makes
    a new temporary run for every task: there the batch is named by the logical date, so the
    tasks of one date run by hand, one after the other, form one batch."""
    run_id = str(context["run_id"])
    if run_id.startswith("__airflow_temporary_run_") and context.get("logical_date") is not None:
        run_id = f"tasks-test-{context['logical_date']:%Y%m%dT%H%M%S}"
    return batch_id_of_run(run_id)


def run_of(context: Mapping[str, Any]) -> dict[str, Any]:
    """Who runs an attempt, as its plan records it for the job's history (the Iterations view
    shows it and links the run): the DAG, the run's id as Airflow has it, the task and its try."""
    ti = context.get("ti")
    run = {"dag_id": getattr(context.get("dag"), "dag_id", None) or getattr(ti, "dag_id", None),
           "run_id": str(context["run_id"]), "task_id": getattr(ti, "task_id", None),
           "try_number": getattr(ti, "try_number", None)}
    if isinstance(getattr(ti, "map_index", None), int) and ti.map_index >= 0:
        run["map_index"] = ti.map_index
    return run


def batch_id_of_run(run_id: str) -> str:
    """The batch id of DAG run ``run_id``: its id made safe for object keys."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", run_id).strip("._-")[:120] or "batch"


@contextlib.contextmanager
def permanent_errors() -> Iterator[None]:
    """A task that fails for a reason a retry cannot change (bad params or input, a job that is
    another's or busy, a damaged or superseded checkpoint) fails at once, without its retries:
    Airflow's AirflowFailException with the error's own message."""
    from include.errors import (
        CheckpointCorrupted,
        CheckpointSuperseded,
        ConfigError,
        InputDataError,
    )
    from include.runs import JobBusy, LeaseLost

    try:
        yield
    except (ConfigError, InputDataError, JobBusy, LeaseLost, CheckpointCorrupted, CheckpointSuperseded) as e:
        raise AirflowFailException(f"{type(e).__name__}: {e}") from e
