"""The job's contract: the iteration body, the job's configuration, its parameters and its sizing."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "body": [
        "BUILTIN_BODIES", "EpochContext", "IterationBody", "StepResult", "body_reference", "resolve_body"
    ],
    "config": ["ForkFrom", "InputSpec", "JobConfig", "SETTINGS", "canonical_location"],
    "parameters": [
        "LINEAGE_KEY", "LINEAGE_PARENTS_PARAM", "check_conf_keys", "check_lineage_parent",
        "check_lineage_parents", "param"
    ],
    "sizing": ["connect_server_heap", "driver_memory", "s3_input_objects", "server_heap"],
})
