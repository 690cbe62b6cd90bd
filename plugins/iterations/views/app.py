"""The Iterations view: a FastAPI app the API server mounts under ``/iterations``.

Read-only over ``include.runs.overview`` (the same checkpoint log the operators write). Every
endpoint needs an authenticated Airflow user (a JWT as a Bearer token, or the UI's session
cookie), and shows a job only to a user who may read a DAG that owns it
(``iterations.views.access``, docs/design.md, "Who may do what"); any other job is answered as a job that does
not exist. The checkpoint root asked for must be under the roots of a DAG the user may read, by the rule
that DAG's runs keep (``include.store.roots_for_dag``), the embedded local directory or
``ITERATIONS_ALLOWED_ROOTS``.

    GET /iterations/                                   HTML: the jobs of a checkpoint root
    GET /iterations/jobs/{job_id}                      HTML: the job's epochs, chart, finish
    GET /iterations/jobs/{job_id}/checks/{epoch}/{attempt_id}   a data-check report
    GET /iterations/api/jobs                           JSON: job ids
    GET /iterations/api/jobs/{job_id}                  JSON: the job's overview
    GET /iterations/runs/{dag_id}/{run_id}             redirect to the page of a DAG run's job

Each takes ``root`` (the checkpoint root, default the embedded store) as a query parameter.
Every response says ``X-Content-Type-Options: nosniff``; every HTML page of the view carries a
Content-Security-Policy that lets no script run (``CSP``), a data-check report the stricter
``sandbox``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Callable
from urllib.parse import quote, urlencode

from airflow.api_fastapi.core_api.security import GetUserDep, get_user
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from include.checkpoints import JobLayout, check_job_id
from include.errors import ConfigError, IterationError, ObjectNotFound, StoreError
from include.process import LOCAL_DIR, VIEW_AWS_CONN_ID
from include.runs import JobNotFound, check_report, job_not_found, job_overview, list_jobs
from include.store import LOCATION_PARAMS, AllowedRoots, ReadOnlyStore, dag_directory, dag_roots
from iterations.hooks.iteration_store import IterationStoreHook
from iterations.operators.task_context import batch_id_of_run
from iterations.views import page
from iterations.views.access import JobAccess

AWS_CONN_ENV = VIEW_AWS_CONN_ID.name

app = FastAPI(
    title="Iterations view",
    description="Read-only view of iteration jobs' checkpoint stores.",
    # an authenticated user; which jobs it may see, each endpoint asks (JobAccess)
    dependencies=[Depends(get_user)],
    docs_url=None, redoc_url=None, openapi_url=None,  # every route needs an authenticated user
)

#: The view's pages are server-rendered HTML with inline styles and SVG: no script, no external
#: asset, forms only to the view itself, framed only by the Airflow UI (same origin).
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
       "frame-ancestors 'self'; base-uri 'none'")


@app.middleware("http")
async def _security_headers(request: Request, call_next: Callable[[Request], Any]) -> Response:
    response = await call_next(request)
    response.headers["X-Content-Type-Options"] = "nosniff"
    if response.headers.get("content-type", "").startswith("text/html") \
            and "content-security-policy" not in response.headers:  # a check report keeps its sandbox
        response.headers["Content-Security-Policy"] = CSP
    return response


class ViewError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def readable_defaults(access: JobAccess | None) -> list[tuple[str, dict[str, Any]]]:
    """(dag_id, location defaults) of every DAG the user may read, by dag_id (none without a
    user to check: ``access`` None)."""
    if access is None:
        return []
    from airflow.models.dag import DagModel
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out = []
    with create_session() as session:
        dag_ids = list(session.scalars(select(DagModel.dag_id).where(~DagModel.is_stale)))
        for dag_id in sorted(access.readable_dags(dag_ids)):
            dag = SerializedDagModel.get_dag(dag_id, session=session)
            if dag is not None:
                out.append((dag_id, {k: dag.params[k] for k in LOCATION_PARAMS if k in dag.params}))
    return out


def view_roots(access: JobAccess | None,
               readable: list[tuple[str, dict[str, Any]]] | None = None) -> AllowedRoots:
    """The roots the view reads: those of every DAG the user may read, by the rule their runs
    keep (include.store.roots_for_dag over each DAG's params' defaults), and the
    deployment's ``ITERATIONS_ALLOWED_ROOTS``; the embedded local directory as a whole, each
    DAG's own directory in it included, only without an access check (``access`` None).
    ``readable``: ``readable_defaults(access)``, if the request has read them already."""
    if access is None:
        return AllowedRoots.for_dag([LOCAL_DIR], across_dags=True)
    roots: list[str] = []
    for _dag_id, defaults in readable_defaults(access) if readable is None else readable:
        try:
            roots.extend(dag_roots(defaults))
        except ConfigError:
            continue  # a DAG whose defaults are not locations gives the view no root
    return AllowedRoots.for_dag(roots)


def dag_stores(access: JobAccess | None, readable: list[tuple[str, dict[str, Any]]] | None = None
               ) -> list[tuple[str, str]]:
    """(dag_id, default checkpoint root) of the DAGs the user may read: the stores the index
    offers; without a user to check, iterate_pagerank's. ``readable`` as for ``view_roots``."""
    if access is None:
        return [("iterate_pagerank", dag_directory("iterate_pagerank", "store"))]
    stores: dict[str, str] = {}  # root -> the first DAG (by id) whose default it is
    for dag_id, d in readable_defaults(access) if readable is None else readable:
        if isinstance(d.get("checkpoint_root"), str) and d["checkpoint_root"]:
            stores.setdefault(d["checkpoint_root"], dag_id)
    return [(dag_id, root) for root, dag_id in stores.items()]


def default_root(stores: list[tuple[str, str]]) -> str:
    """The store the index opens on: the first of ``stores`` that holds a job (a local store
    is looked at, an S3 one taken as it is), else the first; iterate_pagerank's without any."""
    for _dag_id, root in stores:
        if root.startswith(("s3://", "s3a://")) or os.path.isdir(os.path.join(root, "jobs")):
            return root
    return stores[0][1] if stores else dag_directory("iterate_pagerank", "store")


def open_root(root: str | None, access: JobAccess | None = None,
              readable: list[tuple[str, dict[str, Any]]] | None = None):
    """The store at checkpoint root ``root`` (default: ``default_root`` of the user's DAGs'
    stores), once it lies under a root of a DAG the user may read (``view_roots``). A local root
    that does not exist is not created. ``readable`` as for ``view_roots``."""
    if readable is None and access is not None:  # the DAGs' defaults, read once for both uses
        readable = readable_defaults(access)
    root = root or default_root(dag_stores(access, readable))
    try:
        root = view_roots(access, readable).check("root", root)
    except ConfigError as e:
        raise ViewError(403, str(e)) from None
    if not root.startswith(("s3://", "s3a://")) and not os.path.isdir(root):
        raise ViewError(404, f"no checkpoint store at root {root!r}: the directory does not exist")
    hook = IterationStoreHook(aws_conn_id=VIEW_AWS_CONN_ID.get())
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


def _visible(access: JobAccess, store: Any, job_id: str) -> None:
    """JobNotFound unless the user may see the job, worded exactly as for a job that does not
    exist: the answer tells nothing of a job the user may not see."""
    if not access.may_see(store, job_id):
        raise job_not_found(store, job_id)


def visible_overview(access: JobAccess, store: Any, job_id: str, metric: str | None):
    """The job's overview with only the relatives (its parent, its forks) the user may see too."""
    view = job_overview(store, job_id, metric=metric)
    if view.forked_from and not access.visible(store, [view.forked_from["job_id"]]):
        view.forked_from = {**view.forked_from, "job_id": None}  # the page says: a job you may not see
    seen = set(access.visible(store, [f["job_id"] for f in view.forks]))
    view.forks = [f for f in view.forks if f["job_id"] in seen]
    return view


@app.get("/", response_class=HTMLResponse)
def index(request: Request, user: GetUserDep, root: str | None = None) -> HTMLResponse:
    def render() -> str:
        where, store = open_root(root, access, readable)
        return page.index_page(where, access.visible(store, list_jobs(store)), None, _base(request), stores)

    access, readable, stores = JobAccess(user), [], []
    try:
        readable = _guard(lambda: readable_defaults(access))
        stores = dag_stores(access, readable)
        return HTMLResponse(_guard(render))
    except ViewError as e:  # the form stays usable to fix the root
        return HTMLResponse(page.index_page(root or default_root(stores), None, e.message, _base(request), stores),
                            status_code=e.status)


@app.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_view(request: Request, user: GetUserDep, job_id: str, root: str | None = None, metric: str | None = None,
             batch: str | None = None, page_number: int | None = Query(None, alias="page", ge=1, le=10**9),
             ) -> HTMLResponse:
    def render() -> str:
        access = JobAccess(user)
        where, store = open_root(root, access)
        _visible(access, store, job_id)
        return page.job_page(visible_overview(access, store, job_id, metric), where, _base(request), batch=batch,
                             page=page_number)

    return _html(render)


def _no_run(dag_id: str, run_id: str) -> str:
    return f"no run {run_id!r} of DAG {dag_id!r}"


def job_of_run(dag_id: str, run_id: str, access: JobAccess | None = None) -> tuple[str, str, Any, str]:
    """(checkpoint log id, checkpoint root, its store, batch id) of a DAG run of an iteration DAG:
    its conf over its DAG's params; the run works on the generation its first task chose."""
    from airflow.models.dagrun import DagRun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if run is None:
            raise ViewError(404, _no_run(dag_id, run_id))
        conf = dict(run.conf or {})
        dag = SerializedDagModel.get_dag(dag_id, session=session)
    params = {name: dag.params[name] for name in ("job_id", "checkpoint_root")
              if dag is not None and name in dag.params}
    params.update({k: conf[k] for k in ("job_id", "checkpoint_root") if conf.get(k)})
    if not params.get("job_id") or not params.get("checkpoint_root"):
        raise ViewError(404, f"run {run_id!r} of DAG {dag_id!r} has no job_id and checkpoint_root params: "
                             "it is not a run of an iteration DAG")
    batch = batch_id_of_run(run_id)
    root, store = open_root(str(params["checkpoint_root"]), access)
    job_id = check_job_id(str(params["job_id"]))  # a run's conf is untrusted: no other key is read
    for key in (f"schedules/{job_id}/runs/{batch}.json", f"lineages/{job_id}/runs/{batch}.json"):
        try:  # the generation the run's first task chose (include.runs.schedule, include.runs.generations)
            return check_job_id(json.loads(store.get(key))["generation"]), root, store, batch
        except ObjectNotFound:
            continue  # not a scheduled (or rewound) job's run, or its first task has not run yet
        except (ValueError, KeyError, TypeError, ConfigError):
            raise ViewError(502, f"the record {store.location(key)} of run {run_id!r} of DAG {dag_id!r} is damaged") \
                from None
    return job_id, root, store, batch


@app.get("/runs/{dag_id}/{run_id}")
def run_view(request: Request, user: GetUserDep, dag_id: str, run_id: str) -> Response:
    """The run's job, for a user who may read the DAG's runs (anyone else learns nothing of the
    run: the answer is the one for a run that does not exist, before the database is read) and
    may see the job (its owner's DAG may be another)."""
    access = JobAccess(user)

    def resolve() -> tuple[str, str, str]:
        if not access.readable_dags([dag_id]):
            raise ViewError(404, _no_run(dag_id, run_id))
        job_id, root, store, batch = job_of_run(dag_id, run_id, access)
        _visible(access, store, job_id)
        return job_id, root, batch

    try:
        job_id, root, batch = _guard(resolve)
    except ViewError as e:
        return HTMLResponse(page.error_page(e.status, e.message), status_code=e.status)
    return RedirectResponse(f"{_base(request)}jobs/{quote(job_id)}?{urlencode({'root': root, 'batch': batch})}",
                            status_code=307)


@app.get("/jobs/{job_id}/checks/{epoch}/{attempt_id}")
def check_report_view(user: GetUserDep, job_id: str, epoch: int, attempt_id: str,
                      root: str | None = None) -> Response:
    def read() -> tuple[str, bytes]:
        access = JobAccess(user)
        _, store = open_root(root, access)
        _visible(access, store, job_id)
        try:
            return check_report(store, job_id, epoch, attempt_id)
        except ObjectNotFound:
            # a job with no objects at all is answered as a job the user may not see
            if not ReadOnlyStore(store).list(JobLayout(check_job_id(job_id)).root + "/"):
                raise job_not_found(store, job_id) from None
            raise

    try:
        media, data = _guard(read)
    except ViewError as e:
        return HTMLResponse(page.error_page(e.status, e.message), status_code=e.status)
    # a Data Docs page is Great Expectations' HTML: no script of it runs in the UI's origin
    return Response(data, media_type=media, headers={"Content-Security-Policy": "sandbox"})


@app.get("/api/jobs")
def api_jobs(user: GetUserDep, root: str | None = None) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        access = JobAccess(user)
        where, store = open_root(root, access)
        return {"root": where, "jobs": access.visible(store, list_jobs(store))}

    return _json(read)


@app.get("/api/jobs/{job_id}")
def api_job(user: GetUserDep, job_id: str, root: str | None = None, metric: str | None = None) -> JSONResponse:
    def read() -> dict[str, Any]:
        access = JobAccess(user)
        where, store = open_root(root, access)
        _visible(access, store, job_id)
        return {"root": where, **visible_overview(access, store, job_id, metric).to_dict()}

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
