"""The iterations Airflow plugin: registers the operators' extra link ("Data checks", the
report of the data checks a commit or finish task ran), the Iterations view: a FastAPI app
the API server mounts under ``/iterations`` (``iterations.views.app``), shown in the UI's
Browse menu as an embedded page, and the API server middleware that refuses a run conf key an
iteration DAG has no param for (``iterations.closed_conf``)."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from iterations.closed_conf import ClosedConfMiddleware
from iterations.operators.base import DataChecksLink


class IterationsView:
    """The view's ASGI app, imported on its first request: FastAPI and the API server's security
    module take seconds to import, and every Airflow process (each task's too) loads plugins."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from iterations.views.app import app

            self._app = app
        await self._app(scope, receive, send)

    def __repr__(self) -> str:
        return "iterations.views.app:app"


class IterationsPlugin(AirflowPlugin):
    name = "iterations"
    operator_extra_links = [DataChecksLink()]
    fastapi_apps = [{"app": IterationsView(), "url_prefix": "/iterations", "name": "Iterations view"}]
    # a run conf with a key the DAG has no param for is refused when it is triggered
    fastapi_root_middlewares = [{"middleware": ClosedConfMiddleware, "args": [], "kwargs": {},
                                 "name": "Closed run conf of the iteration DAGs"}]
    external_views = [
        {"name": "Iterations", "href": "/iterations/", "url_route": "iterations", "destination": "nav",
         "category": "browse"},
        # a tab of every DAG run: the page of the run's job, its batch highlighted
        {"name": "Iterations", "href": "/iterations/runs/{DAG_ID}/{RUN_ID}", "url_route": "iterations-run",
         "destination": "dag_run"},
    ]
