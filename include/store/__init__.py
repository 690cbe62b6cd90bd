"""Object stores and where a job may read and write: local and S3 stores, locations, roots, borders."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "base": ["STORE_MARKER", "ObjectInfo", "ObjectStore", "RetryPolicy", "check_key", "join_key", "sha256_hex"],
    "door": ["admit_run"],
    "local": ["LocalStore"],
    "location": ["SEGMENT_CHARS", "Location", "LocationError", "parse_location"],
    "opening": ["open_store", "store_from_spec"],
    "readonly": ["ReadOnlyStore", "ReadOnlyViolation"],
    "roots": [
        "CHECKPOINT_ROOTS_ENV", "DAGS_DIR", "LOCATION_PARAMS", "ROOTS_ENV", "SHARED_STORE", "AllowedRoots",
        "check_output_outside_checkpoints", "configured_roots", "dag_directory", "dag_home", "dag_roots",
        "deployment_checkpoint_roots", "deployment_roots", "earlier_shared_job", "roots_for_dag",
    ],
    "s3": ["S3Store"],
})
