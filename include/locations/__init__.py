"""Where a job reads and writes: canonical locations, the roots that allow them, and borders."""

from include.locations.location import SEGMENT_CHARS, Location, LocationError, parse_location
from include.locations.roots import (
    CHECKPOINT_ROOTS_ENV,
    LOCATION_PARAMS,
    ROOTS_ENV,
    AllowedRoots,
    check_output_outside_checkpoints,
    configured_roots,
    dag_roots,
    deployment_checkpoint_roots,
    deployment_roots,
    roots_for_dag,
)

__all__ = ["AllowedRoots", "CHECKPOINT_ROOTS_ENV", "LOCATION_PARAMS", "Location", "LocationError", "ROOTS_ENV",
           "SEGMENT_CHARS", "check_output_outside_checkpoints", "configured_roots", "dag_roots", "deployment_checkpoint_roots",
           "deployment_roots", "parse_location", "roots_for_dag"]
