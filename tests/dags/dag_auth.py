"""An auth manager for the tests that grants DAGs one by one, as a deployment's FAB or Keycloak
roles would: Airflow's SimpleAuthManager (role-based: a ``viewer`` reads every DAG), except for
the users listed in the JSON object ``$ITERATIONS_TEST_DAG_GRANTS`` (user name -> DAG ids),
who may read those DAGs (and their runs) and no other, and may not write any. A grant is about
one DAG: asked about DAGs in general (``DagDetails(id=None)`` or no details), such a user is
refused. Users not listed are SimpleAuthManager's.

Configured with ``AIRFLOW__CORE__AUTH_MANAGER=tests.dags.dag_auth.PerDagAuthManager`` (the API
server's PYTHONPATH holds the checkout); nothing in the project knows about it."""

from __future__ import annotations

import json
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

from include.process.settings import TEST_DAG_GRANTS

GRANTS_ENV = TEST_DAG_GRANTS.name


def grants() -> dict[str, set[str]]:
    raw = json.loads(TEST_DAG_GRANTS.get() or "{}")
    return {str(user): set(dags) for user, dags in raw.items()}


class PerDagAuthManager(SimpleAuthManager):
    def _granted(self, user: Any) -> set[str] | None:
        """The DAGs a listed user may read; None for a user that is not listed."""
        return grants().get(user.get_name()) if user is not None else None

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        granted = self._granted(user)
        if granted is None:
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
        return method == "GET" and details is not None and details.id is not None and details.id in granted

    def filter_authorized_dag_ids(self, *, dag_ids, user, method="GET", team_name=None) -> set[str]:
        granted = self._granted(user)
        if granted is None:
            return super().filter_authorized_dag_ids(dag_ids=dag_ids, user=user, method=method, team_name=team_name)
        return {d for d in dag_ids if d in granted} if method == "GET" else set()
