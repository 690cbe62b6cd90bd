"""The runtime core of iterations, importable without Airflow or Spark: what a body and a job are made of.

A body and a job need only these names (``from include import IterationBody, StepResult``); the
packages below hold the rest, each behind its own surface (docs/how-it-works.md has the map):
``contract`` (body, config, parameters, sizing), ``epoch`` (the epoch and its boundary),
``checkpoints`` (the checkpoint log and its records), ``publication`` (outputs, approvals, pinned
inputs), ``runs`` (owners, leases, generations, schedules), ``checks`` (data checks between
rounds), ``store`` (object stores, locations), ``process`` (settings, failure points).
"""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "contract.body": ["EpochContext", "IterationBody", "StepResult"],
    "contract.config": ["InputSpec", "JobConfig"],
    "contract.parameters": ["param"],
    "errors": ["CheckpointError", "ConfigError", "InputChanged", "InputDataError", "IterationError", "StoreError"],
})
