"""Who may see which job in the Iterations view (docs/design.md, "Who may do what").

A job belongs to the DAG that owns it: its owner record (``include.runs.ownership.read_owner``),
written by the runtime when the job was first run. The rule, for the user of a request:

- a job owned by DAG ``D`` is shown only to a user the auth manager lets read ``D``'s runs:
  ``is_authorized_dag(GET, DagAccessEntity.RUN, DagDetails(id=D, team_name=<D's team>))``,
  after ``filter_authorized_dag_ids`` (the auth manager's batch API: may read DAG ``D``) has
  kept ``D``;
- a job with no DAG owner (run by the library runner: ``dag_id`` None; made before owners were
  recorded: no record; or a damaged record) is shown only to a user who may read every DAG and
  every DAG's runs: ``is_authorized_dag(GET, details=DagDetails(id=None))`` and
  ``is_authorized_dag(GET, DagAccessEntity.RUN, DagDetails(id=None))``. The first is the DAG
  permission that is not about one DAG (FabAuthManager: the global ``DAGs`` resource; a
  per-DAG grant does not give it); the second alone is not enough: FabAuthManager answers it from
  the global ``DAG Runs`` permission without looking at the DAGs at all.

The decision never depends on a request parameter, only on the store's owner record and the
user. Answers are kept for the request (one ``JobAccess`` per request).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from include.errors import CheckpointCorrupted, ConfigError
from include.runs import read_owner
from include.store import ObjectStore, ReadOnlyStore


def _team_names(dag_ids: Iterable[str]) -> dict[str, str | None]:
    """DAG id -> the team that owns it (Airflow's multi-team mode), as ``requires_access_dag``
    finds it (``DagModel.get_team_name``), for many DAGs in one query."""
    from airflow.models.dag import DagModel

    ids = sorted(set(dag_ids))
    return DagModel.get_dag_id_to_team_name_mapping(ids) if ids else {}


class JobAccess:
    """What ``user`` may see, asked of the API server's auth manager."""

    def __init__(self, user: Any, auth_manager: Any = None):
        self.user = user
        self._auth_manager = auth_manager
        self._every_dag: bool | None = None
        self._dags: dict[str, bool] = {}

    @property
    def auth_manager(self) -> Any:
        if self._auth_manager is None:
            from airflow.api_fastapi.app import get_auth_manager

            self._auth_manager = get_auth_manager()
        return self._auth_manager

    def may_read_every_dag(self) -> bool:
        if self._every_dag is None:
            from airflow.api_fastapi.auth.managers.models.resource_details import (
                DagAccessEntity,
                DagDetails,
            )

            am, every = self.auth_manager, DagDetails(id=None)
            self._every_dag = bool(
                am.is_authorized_dag(method="GET", details=every, user=self.user)
                and am.is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, details=every,
                                         user=self.user))
        return self._every_dag

    def readable_dags(self, dag_ids: Iterable[str]) -> set[str]:
        """Those of ``dag_ids`` whose runs the user may read."""
        dag_ids = set(dag_ids)
        todo = dag_ids - set(self._dags)
        if todo:
            from airflow.api_fastapi.auth.managers.models.resource_details import (
                DagAccessEntity,
                DagDetails,
            )

            teams = _team_names(todo)
            by_team: dict[str | None, set[str]] = defaultdict(set)
            for dag_id in todo:
                by_team[teams.get(dag_id)].add(dag_id)
            am = self.auth_manager
            for team, ids in by_team.items():
                readable = am.filter_authorized_dag_ids(dag_ids=set(ids), user=self.user, method="GET",
                                                        team_name=team)
                for dag_id in ids:
                    self._dags[dag_id] = dag_id in readable and bool(am.is_authorized_dag(
                        method="GET", access_entity=DagAccessEntity.RUN,
                        details=DagDetails(id=dag_id, team_name=team), user=self.user))
        return {d for d in dag_ids if self._dags[d]}

    @staticmethod
    def owning_dag(store: ObjectStore, job_id: str) -> str | None:
        """The DAG that owns the job; None if no DAG does (library run, no owner record, or a
        damaged one). ConfigError for an invalid job id."""
        try:
            owner = read_owner(ReadOnlyStore(store), job_id)
        except CheckpointCorrupted:
            return None
        return owner.dag_id if owner is not None else None

    def may_see(self, store: ObjectStore, job_id: str) -> bool:
        dag_id = self.owning_dag(store, job_id)
        return self.may_read_every_dag() if dag_id is None else bool(self.readable_dags([dag_id]))

    def visible(self, store: ObjectStore, job_ids: Iterable[str]) -> list[str]:
        """Those of ``job_ids`` the user may see, in their order (one owner read per job, one
        authorization per DAG)."""
        owners: dict[str, str | None] = {}
        for job_id in job_ids:
            try:
                owners[job_id] = self.owning_dag(store, job_id)
            except ConfigError:
                continue  # not a valid job id: no page can show it
        readable = self.readable_dags(d for d in owners.values() if d is not None)
        return [j for j, d in owners.items() if (d in readable if d is not None else self.may_read_every_dag())]


__all__ = ["JobAccess"]
