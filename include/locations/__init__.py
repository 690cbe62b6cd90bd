"""Where a job reads and writes: canonical locations, the roots that allow them, and borders."""

from include.locations.location import SEGMENT_CHARS, Location, LocationError, parse_location
from include.locations.roots import (
    CHECKPOINT_ROOTS_ENV,
    DAGS_DIR,
    LOCATION_PARAMS,
    ROOTS_ENV,
    SHARED_STORE,
    AllowedRoots,
    check_output_outside_checkpoints,
    configured_roots,
    dag_directory,
    dag_home,
    dag_roots,
    deployment_checkpoint_roots,
    deployment_roots,
    earlier_shared_job,
    roots_for_dag,
)

__all__ = ["AllowedRoots", "CHECKPOINT_ROOTS_ENV", "DAGS_DIR", "LOCATION_PARAMS", "Location", "LocationError",
           "ROOTS_ENV", "SEGMENT_CHARS", "SHARED_STORE", "check_output_outside_checkpoints", "configured_roots",
           "dag_directory", "dag_home", "dag_roots", "deployment_checkpoint_roots", "deployment_roots",
           "earlier_shared_job", "parse_location", "roots_for_dag"]
