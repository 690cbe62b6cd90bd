"""A closed run conf, at trigger time: the API server refuses a conf key an iteration DAG has no
param for, naming the key and the nearest param.

Airflow merges a run's conf into its DAG's params and validates each param by its schema, but
keeps a key no param declares without a word: a misspelt ``tolerence`` would be ignored and the
run would go on with the default tolerance. ``ClosedConfMiddleware`` (registered by the plugin
as a ``fastapi_root_middlewares`` entry) reads the body of ``POST /api/v2/dags/{dag_id}/dagRuns``
(the trigger form and the REST API) and of ``POST /api/v2/backfills`` (its ``dag_run_conf``),
and for a DAG tagged ``iterations`` (every DAG ``iteration_dag`` builds, and ``iterations_stop``)
answers 400 with the message of ``include.contract.parameters.check_conf_keys``. Runs made without the
API server (``airflow dags test``, ``tasks test``, a continuation) are refused by their first
task with the same message (``iterations.operators.base.IterationOperator.settings``).

The ``openlineage`` entry (the OpenLineage provider's parent run) is refused here too unless the
parent it names is the DAG's own (a continuation's: ``<dag_id>.continue``, in the deployment's
namespace) or one the DAG's author allows (``iteration_dag(lineage_parents=...)``):
``include.contract.parameters.check_lineage_parent``. A user who triggers a run cannot make lineage show
it as started by another job. A run made without the API server (another DAG's
TriggerDagRunOperator, into whose conf the provider itself writes the triggering task) is not
refused for it: its first task logs a warning naming the parent instead.
"""

from __future__ import annotations

import json
import re
from typing import Any, Awaitable, Callable

_TRIGGER = re.compile(r"^(?:.*)/api/v2/dags/(?P<dag_id>[A-Za-z0-9_.\-]{1,250})/dagRuns/?$")
_BACKFILL = re.compile(r"^(?:.*)/api/v2/backfills(?:/dry_run)?/?$")
#: the tag of the DAGs whose run conf is closed
CLOSED_TAG = "iterations"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def conf_problem(dag_id: str, conf: Any) -> str | None:
    """Why ``conf`` is refused for DAG ``dag_id`` (None: it is not, or the DAG's conf is open)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    from include.contract import LINEAGE_PARENTS_PARAM

    if not isinstance(conf, dict) or not conf:
        return None
    with create_session() as session:
        dag = SerializedDagModel.get_dag(dag_id, session=session)
        if dag is None or CLOSED_TAG not in set(getattr(dag, "tags", None) or ()):
            return None
        declared = set(dag.params.keys())
        allowed = dag.params[LINEAGE_PARENTS_PARAM] if LINEAGE_PARENTS_PARAM in declared else ()
        own = own_lineage_jobs(dag_id, dag.task_ids)
    return refusal(dag_id, conf, declared, own, allowed=allowed, namespace=lineage_namespace())


def refusal(dag_id: str, conf: dict[str, Any], declared: Any, own_jobs: Any, *, allowed: Any = (),
            namespace: str | None = None) -> str | None:
    """Why ``conf`` is refused for DAG ``dag_id`` whose params are ``declared`` (None: it is
    not): a key the DAG has no param for, or an ``openlineage`` entry of the wrong shape or
    naming a parent that is not the DAG's (``own_jobs``) nor one its author ``allowed``."""
    from include.contract import LINEAGE_KEY, check_conf_keys, check_lineage_parent
    from include.errors import ConfigError

    try:
        check_conf_keys(conf, declared)
        if isinstance(conf.get(LINEAGE_KEY), dict) and LINEAGE_KEY not in declared:
            check_lineage_parent(conf[LINEAGE_KEY], own_jobs, namespace=namespace, allowed=allowed)
    except ConfigError as e:
        return f"DAG {dag_id}: {e}"
    return None


def own_lineage_jobs(dag_id: str, task_ids: Any) -> set[str]:
    """The OpenLineage job names of a DAG's runs and tasks (the provider's: ``<dag_id>`` and
    ``<dag_id>.<task_id>``)."""
    return {dag_id, *(f"{dag_id}.{t}" for t in task_ids)}


def lineage_namespace() -> str | None:
    """The deployment's OpenLineage namespace (the provider's ``[openlineage] namespace``); None
    without the provider, whose lineage nobody then reads."""
    try:
        from airflow.providers.openlineage.conf import namespace
    except ImportError:
        return None
    return namespace()


class ClosedConfMiddleware:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" and scope.get("method") == "POST" else ""
        trigger, backfill = _TRIGGER.match(path), _BACKFILL.match(path)
        if not (trigger or backfill):
            await self.app(scope, receive, send)
            return
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            if message.get("type") != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        problem = None
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            payload = None  # Airflow answers a body that is not JSON itself
        if isinstance(payload, dict):
            dag_id = trigger["dag_id"] if trigger else payload.get("dag_id")
            conf = payload.get("conf") if trigger else payload.get("dag_run_conf")
            if isinstance(dag_id, str) and conf:
                from anyio import to_thread

                problem = await to_thread.run_sync(conf_problem, dag_id, conf)
        if problem is not None:
            data = json.dumps({"detail": problem}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(data)).encode())]})
            await send({"type": "http.response.body", "body": data})
            return

        async def replay() -> dict[str, Any]:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


__all__ = ["CLOSED_TAG", "ClosedConfMiddleware", "conf_problem", "lineage_namespace", "own_lineage_jobs", "refusal"]
