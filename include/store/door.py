"""The door a run's locations go through once: ``admit_run``.

A DAG run's ``input_path``, ``output_path`` and ``checkpoint_root`` (untrusted: its conf) are
parsed into their canonical forms (include.store.location), checked against the DAG's
allowed roots (include.store.roots), kept apart from every checkpoint root, and, for a local
input read as a directory, every symbolic link in it followed to a place the roots allow. What
leaves here is the only form the rest of the run uses; the borders that need the store (no
input or output inside a store, no store inside another) are checked as the run starts
(include.runs.boundary.start_run).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from include.store.borders import check_local_tree
from include.store.location import Location, LocationError
from include.store.roots import AllowedRoots, check_output_outside_checkpoints

LOCATIONS = ("input_path", "output_path", "checkpoint_root")


def admit_run(settings: Mapping[str, Any], roots: AllowedRoots, *, checkpoint_roots: Iterable[str] = (),
              output_root: str | None = None, date: str | None = None) -> dict[str, Any]:
    """``settings`` with their locations admitted (see the module docstring); LocationError
    (a ConfigError) naming the setting and the value otherwise.

    ``checkpoint_roots``: the DAG's checkpoint roots besides the run's own (no input or output
    may overlap one). ``output_root``: the DAG's default ``output_path``; a run that leaves it
    publishes under ``<output_root>/<job_id>``, so that two jobs of one DAG never share an
    output by default. ``date``: a scheduled batch's date (``YYYYMMDD``): its input is the
    ``{date}`` of the input path, its output ``<output_path>/<date>``."""
    out = dict(settings)
    if out.get("output_path") and output_root and \
            roots.check("output_path", out["output_path"]) == roots.check("the default output_path", output_root):
        out["output_path"] = Location.parse(output_root).child(str(out["job_id"])).url
    if date is not None:
        out["input_path"] = str(out["input_path"]).replace("{date}", f"{date[:4]}-{date[4:6]}-{date[6:8]}")
        if out.get("output_path"):
            out["output_path"] = f"{str(out['output_path']).rstrip('/')}/{date}"
    for name in LOCATIONS:
        if out.get(name):
            out[name] = roots.check(name, out[name])
    checkpoint = [out["checkpoint_root"], *checkpoint_roots] if out.get("checkpoint_root") else list(checkpoint_roots)
    output = Location.parse(out["output_path"]) if out.get("output_path") else None
    check_output_outside_checkpoints(output, checkpoint)
    if out.get("input_path"):
        source = Location.parse(out["input_path"])
        for root in checkpoint:
            if root and source.overlaps(Location.parse(root, "checkpoint root")):
                raise LocationError(f"input_path {source.url!r} overlaps the checkpoint root {root!r}: a run never "
                                    "reads checkpoint data as its input")
        if source.is_local:
            check_local_tree(source, roots.allows, "input_path")
    return out


__all__ = ["LOCATIONS", "admit_run"]
