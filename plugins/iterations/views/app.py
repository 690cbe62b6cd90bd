"""The Iterations view: a FastAPI app the API server mounts under ``/iterations``.

Read-only over ``include.overview`` (the same checkpoint log the operators write). Every
endpoint needs an authenticated Airflow user allowed to read DAG runs (a JWT as a Bearer token,
or the UI's session cookie); the checkpoint root asked for must be under the allowed roots
(``include.paths``: the embedded local directory and ``ITERATIONS_ALLOWED_ROOTS``).

    GET /iterations/                                   HTML: the jobs of a checkpoint root
    GET /iterations/jobs/{job_id}                      HTML: the job's epochs, chart, finish
    GET /iterations/jobs/{job_id}/checks/{epoch}/{attempt_id}   a data-check report
    GET /iterations/api/jobs                           JSON: job ids
    GET /iterations/api/jobs/{job_id}                  JSON: the job's overview
    GET /iterations/runs/{dag_id}/{run_id}             redirect to the page of a DAG run's job

Each takes ``root`` (the checkpoint root, default the embedded store) as a query parameter.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Callable
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag

from include.errors import ConfigError, IterationError, ObjectNotFound, StoreError
from include.overview import JobNotFound, check_report, job_overview, list_jobs
from include.paths import PathPolicy
from iterations.dag_factory import DEFAULT_STORE, LOCAL_DIR
from iterations.hooks.iteration_store import IterationStoreHook
from iterations.operators.epoch import batch_id_of_run
from iterations.views import page

AWS_CONN_ENV = "ITERATIONS_VIEW_AWS_CONN_ID"

app = FastAPI(
    title="Iterations view",
    description="Read-only view of iteration jobs' checkpoint stores.",
    dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))],
    docs_url=None, redoc_url=None, openapi_url=None,  # every route needs an authenticated user
)


class ViewError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def open_root(root: str | None):
    """The store at checkpoint root ``root`` (default: the embedded store), once the path
    policy allows it. A local root that does not exist is not created."""
    root = root or DEFAULT_STORE
    try:
        PathPolicy.for_dag([LOCAL_DIR]).check("root", root)
    except ConfigError as e:
        raise ViewError(403, str(e)) from None
    if not root.startswith(("s3://", "s3a://")) and not os.path.isdir(root):
        raise ViewError(404, f"no checkpoint store at root {root!r}: the directory does not exist")
    hook = IterationStoreHook(aws_conn_id=os.environ.get(AWS_CONN_ENV, "aws_default"))
    try:
        return root, hook.get_store(root)
    except (ConfigError, StoreError) as e:
        raise ViewError(400, f"cannot open checkpoint root {root!r}: {e}") from None


def _guard(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ViewError:
        raise
    except JobNotFound as e:
        raise ViewError(404, str(e)) from None
    except ObjectNotFound as e:
        raise ViewError(404, str(e)) from None
    except ConfigError as e:
        raise ViewError(400, str(e)) from None
    except (StoreError, IterationError) as e:
        raise ViewError(502, f"{type(e).__name__}: {e}") from None


def _html(fn: Callable[[], str]) -> HTMLResponse:
    try:
        return HTMLResponse(_guard(fn))
    except ViewError as e:
        return HTMLResponse(page.error_page(e.status, e.message), status_code=e.status)


def _json(fn: Callable[[], Any]) -> Any:
    try:
        return _guard(fn)
    except ViewError as e:
        raise HTTPException(e.status, e.message) from None


def _base(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/") + "/"


@app.get("/", response_class=HTMLResponse)
def index(request: Request, root: str | None = None) -> HTMLResponse:
    def render() -> str:
        where, store = open_root(root)
        return page.index_page(where, list_jobs(store), None, _base(request))

    try:
        return HTMLResponse(_guard(render))
    except ViewError as e:  # the form stays usable to fix the root
        return HTMLResponse(page.index_page(root or DEFAULT_STORE, None, e.message, _base(request)),
                            status_code=e.status)


@app.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_view(request: Request, job_id: str, root: str | None = None, metric: str | None = None,
             batch: str | None = None) -> HTMLResponse:
    def render() -> str:
        where, store = open_root(root)
        return page.job_page(job_overview(store, job_id, metric=metric), where, _base(request), batch=batch)

    return _html(render)


def job_of_run(dag_id: str, run_id: str) -> tuple[str, str, str]:
    """(checkpoint log id, checkpoint root, batch id) of a DAG run of an iteration DAG: its conf
    over its DAG's params; a scheduled job's run works on the generation its first task chose."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if run is None:
            raise ViewError(404, f"no run {run_id!r} of DAG {dag_id!r}")
        conf = dict(run.conf or {})
        dag = SerializedDagModel.get_dag(dag_id, session=session)
    params = {name: dag.params[name] for name in ("job_id", "checkpoint_root")
              if dag is not None and name in dag.params}
    params.update({k: conf[k] for k in ("job_id", "checkpoint_root") if conf.get(k)})
    if not params.get("job_id") or not params.get("checkpoint_root"):
        raise ViewError(404, f"run {run_id!r} of DAG {dag_id!r} has no job_id and checkpoint_root params: "
                             "it is not a run of an iteration DAG")
    batch = batch_id_of_run(run_id)
    root, store = open_root(str(params["checkpoint_root"]))
    job_id = str(params["job_id"])
    try:
        job_id = json.loads(store.get(f"schedules/{job_id}/runs/{batch}.json"))["generation"]
    except ObjectNotFound:
        pass  # not a scheduled job's run (or its first task has not run yet)
    return job_id, root, batch


@app.get("/runs/{dag_id}/{run_id}")
def run_view(request: Request, dag_id: str, run_id: str) -> Response:
    try:
        job_id, root, batch = _guard(lambda: job_of_run(dag_id, run_id))
    except ViewError as e:
        return HTMLResponse(page.error_page(e.status, e.message), status_code=e.status)
    return RedirectResponse(f"{_base(request)}jobs/{quote(job_id)}?{urlencode({'root': root, 'batch': batch})}",
                            status_code=307)


@app.get("/jobs/{job_id}/checks/{epoch}/{attempt_id}")
def check_report_view(job_id: str, epoch: int, attempt_id: str, root: str | None = None) -> Response:
    def read() -> tuple[str, bytes]:
        _, store = open_root(root)
        return check_report(store, job_id, epoch, attempt_id)

    try:
        media, data = _guard(read)
    except ViewError as e:
        return HTMLResponse(page.error_page(e.status, e.message), status_code=e.status)
    # a Data Docs page is Great Expectations' HTML: no script of it runs in the UI's origin
    return Response(data, media_type=media, headers={"Content-Security-Policy": "sandbox"})


@app.get("/api/jobs")
def api_jobs(root: str | None = None) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        where, store = open_root(root)
        return {"root": where, "jobs": list_jobs(store)}

    return _json(read)


@app.get("/api/jobs/{job_id}")
def api_job(job_id: str, root: str | None = None, metric: str | None = None) -> JSONResponse:
    def read() -> dict[str, Any]:
        where, store = open_root(root)
        return {"root": where, **job_overview(store, job_id, metric=metric).to_dict()}

    return JSONResponse(_finite(_json(read)))


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a metric that is one is sent as its name."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
