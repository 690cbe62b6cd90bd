"""A stop request: asks a running job to drain or suspend at its next epoch boundary."""

from __future__ import annotations

from typing import Any, Mapping

from iterations.operators.base import IterationOperator
from iterations.operators.task_context import permanent_errors


class StopRequestOperator(IterationOperator):
    """Asks a job - usually running in another DAG run - to ``drain`` or ``suspend`` at its next
    epoch boundary, by writing the request into its checkpoint store (``job_id``,
    ``checkpoint_root`` and ``mode`` from the params). ``across_dags``: ``allowed_roots`` reach
    into every DAG's own directory under them (include.store.AllowedRoots): a control DAG
    that stops any DAG's jobs says so."""

    ui_color = "#f8d7da"

    def __init__(self, *, across_dags: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.across_dags = across_dags

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        with permanent_errors():
            return self._request(context)

    def _request(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from include.checkpoints import CheckpointLog
        from include.errors import ConfigError
        from include.runs import Lineage, read_owner
        from include.store import AllowedRoots, open_store
        from iterations.hooks.iteration_store import IterationStoreHook

        settings = self.settings(context)
        missing = [k for k in ("job_id", "checkpoint_root", "mode") if not settings.get(k)]
        if missing:
            raise ConfigError(f"missing setting(s) {missing} for a stop request")
        roots = AllowedRoots.for_dag(self.allowed_roots, across_dags=self.across_dags)
        root = roots.check("checkpoint_root", settings["checkpoint_root"])
        # an existing store only: a request never creates directories elsewhere
        store = open_store(root, create=False, **IterationStoreHook(self.aws_conn_id).store_options(root))
        newest = Lineage.of_job(store, settings["job_id"]).newest()
        if newest != settings["job_id"]:  # a rewound job: its newest generation runs
            self.log.info("job %s was rewound: the request goes to its newest generation %s", settings["job_id"],
                          newest)
            settings["job_id"] = newest
        log = CheckpointLog(store, settings["job_id"])
        owner = read_owner(store, settings["job_id"])
        if owner is None and log.latest_id() is None and not log.has_started():
            raise ConfigError(f"no job {settings['job_id']!r} under {store.location()}: nothing to stop "
                              "(check job_id and checkpoint_root; a job exists once its first run has started)")
        if log.latest_id() is None:
            self.log.warning("job %s has no checkpoint under %s yet: the request waits for it",
                             settings["job_id"], store.location())
        request = log.control.request_stop(settings["mode"], requested_by=f"{context['dag'].dag_id}/{context['run_id']}")
        self.log.info("asked job %s to %s at its next epoch boundary", settings["job_id"], request["mode"])
        return request
