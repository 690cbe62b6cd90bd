"""Which locations a run may name: the allowed roots, one rule for the runs and the view.

A DAG run's ``input_path``, ``output_path`` and ``checkpoint_root`` must lie under one of the
DAG's allowed roots: the places its author configured (the params' defaults: the input's
directory, the checkpoint root, the output root) and the deployment's ``ITERATIONS_ALLOWED_ROOTS``
(comma-separated). The root ``s3://`` allows every bucket (tests only).

Each DAG has its own directory under the project's local directory, ``<local>/dags/<dag_id>``
(``dag_directory``): the embedded defaults put its checkpoint store and outputs there. A place
inside DAG X's directory is reached only through a root that itself lies inside it: X's own
defaults, another DAG's author who declares an input there, or a deployer who names it. A wider
root (the local directory as a whole, ``/``) never reaches into a DAG's directory, so a location
there belongs to its DAG, not to whoever published first. The local directory as a whole is no
DAG's root either: it holds every DAG's defaults. Each value is parsed into a ``Location`` first (include.store.location:
the grammar, symbolic links resolved), then compared segment by segment.

``roots_for_dag`` is the one place that list is made: the operators check a run's values
against it and the Iterations view checks the checkpoint root it is asked to read against the
same list of the DAG that owns the job.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from include.errors import ConfigError, OutputError
from include.process.paths import LOCAL_DIR
from include.process.settings import ALLOWED_ROOTS, CHECKPOINT_ROOTS
from include.store.location import Location, LocationError

ROOTS_ENV = ALLOWED_ROOTS.name
CHECKPOINT_ROOTS_ENV = CHECKPOINT_ROOTS.name
#: the params whose defaults give a DAG its roots
LOCATION_PARAMS = ("input_path", "output_path", "checkpoint_root")
#: where the DAGs' own directories are, under the project's local directory
DAGS_DIR = os.path.join(LOCAL_DIR, "dags")
#: an Airflow DAG id, as a directory name (Airflow's own rule, without "." and "..")
_DAG_ID = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9_.\-]{1,250}")


def dag_directory(dag_id: str, *names: str) -> str:
    """DAG ``dag_id``'s own directory under the project's local directory,
    ``<ITERATIONS_LOCAL_DIR>/dags/<dag_id>``, or a place in it (``names``): where the embedded
    defaults keep its checkpoint store (``store``) and its outputs (``output``)."""
    if not isinstance(dag_id, str) or not _DAG_ID.fullmatch(dag_id):
        raise ConfigError(f"invalid dag_id {dag_id!r} for a DAG's directory: 1-250 letters, digits, '_', '-', '.'")
    return os.path.join(DAGS_DIR, dag_id, *names)


#: the store every shipped DAG shared before each had its own directory (``<local>/store``)
SHARED_STORE = os.path.join(LOCAL_DIR, "store")


def earlier_shared_job(job_id: str, checkpoint_root: str) -> str | None:
    """What to tell a user whose run starts job ``job_id`` in ``checkpoint_root`` while a job of
    that id is in the shared store of earlier versions (``SHARED_STORE``): the run does not go
    on with it, and how to; None otherwise (a local look, nothing read)."""
    earlier = os.path.join(SHARED_STORE, "jobs", job_id)
    if checkpoint_root.startswith(("s3://", "s3a://")) or not os.path.isdir(earlier):
        return None
    here = Location.parse(checkpoint_root, "checkpoint_root")
    if here.url == Location.parse(SHARED_STORE).url or os.path.isdir(os.path.join(here.path, "jobs", job_id)):
        return None
    return (f"job {job_id} starts anew in {here.url}: the shared store {SHARED_STORE} of earlier versions holds a "
            f"job {job_id} too, which this run does not go on with (each DAG keeps its jobs in its own "
            f"directory now). To go on with that one, add {SHARED_STORE} (and its outputs' directory) to "
            f"{ROOTS_ENV} and trigger with checkpoint_root={SHARED_STORE} and its output_path; see "
            "docs/configuration.md, 'Each DAG's own directory'")


def dag_home(location: Location) -> Location | None:
    """The DAG directory ``location`` lies in (``<local>/dags/<dag_id>``, canonical), the DAGs'
    directory itself when it is that (it holds them all), or None."""
    if not location.is_local:
        return None
    base = Location.parse(DAGS_DIR, "the DAGs' directory")
    if not base.contains(location):
        return None
    return base.child(location.segments[len(base.segments)]) if location.segments != base.segments else base


@dataclass(frozen=True)
class _Root:
    text: str
    location: Location | None  # None: any bucket ("s3://")


def _parse_root(text: str) -> _Root:
    text = text.strip()
    if text.lower() in ("s3://", "s3a://"):
        return _Root(text, None)
    try:
        return _Root(text, Location.parse(text, "allowed root"))
    except LocationError as e:
        raise LocationError(f"{e} (in {ROOTS_ENV} or a DAG's defaults)") from None


def deployment_roots() -> list[str]:
    """The deployment's ``ITERATIONS_ALLOWED_ROOTS``."""
    return ALLOWED_ROOTS.get()


def deployment_checkpoint_roots() -> list[str]:
    """The deployment's ``ITERATIONS_CHECKPOINT_ROOTS``: places where no output may go."""
    return CHECKPOINT_ROOTS.get()


class AllowedRoots:
    """The roots a run's locations must lie under. ``across_dags``: a wide root reaches into the
    DAGs' own directories too (the stop DAG, which may stop any job, and the view without a user
    to check); otherwise only a root inside a DAG's directory reaches it (module docstring)."""

    def __init__(self, roots: Iterable[str], *, across_dags: bool = False):
        self.roots = [_parse_root(r) for r in roots if r and str(r).strip()]
        self.across_dags = across_dags

    @classmethod
    def for_dag(cls, configured: Iterable[str], *, across_dags: bool = False) -> "AllowedRoots":
        """The DAG's configured roots plus the deployment's (``ITERATIONS_ALLOWED_ROOTS``)."""
        return cls([*configured, *deployment_roots()], across_dags=across_dags)

    def describe(self) -> str:
        return ", ".join(r.text for r in self.roots) or "none"

    def _covering(self, location: Location) -> list[_Root]:
        return [r for r in self.roots
                if (r.location is None and location.is_s3) or (r.location is not None and r.location.contains(location))]

    def allows(self, location: Location) -> bool:
        covering = self._covering(location)
        home = None if self.across_dags or not covering else dag_home(location)
        return any(home is None or (r.location is not None and home.contains(r.location)) for r in covering)

    def admit(self, what: str, value: object) -> Location:
        """The canonical location of ``value`` if it lies under an allowed root; LocationError
        naming ``what`` and the value otherwise."""
        location = Location.parse(value, what)
        if self.allows(location):
            return location
        resolved = f" (resolved {location.url!r})" if location.is_local and location.url != value else ""
        home = dag_home(location)
        if home is not None and self._covering(location):
            if home.url == Location.parse(DAGS_DIR).url:
                raise LocationError(f"{what} {value!r}{resolved} is the directory of every DAG's own directory: "
                                    f"no run reaches it unless the deployer names it in {ROOTS_ENV}")
            raise LocationError(f"{what} {value!r}{resolved} lies in DAG {home.name}'s own directory {home.url}"
                                f"{whose(location)}: only that DAG's runs reach it, unless this DAG's author "
                                f"declares the place (a default input there) or the deployer names it in {ROOTS_ENV}")
        raise LocationError(f"{what} {value!r}{resolved} is outside the allowed roots ({self.describe()})"
                            f"{whose(location)}; a DAG reads and writes only under its own roots: its author "
                            f"declares other inputs in its defaults, the deployer adds roots to {ROOTS_ENV}")

    def check(self, what: str, value: object) -> str:
        """``admit``'s canonical form, as a string."""
        return self.admit(what, value).url


def whose(location: Location) -> str:
    """What a refused local location is, where the store says: "; it is the output location of
    job J (DAG D, ...)" or "; it is inside the checkpoint store S", else ""."""
    if not location.is_local:
        return ""
    from include.publication.output_owners import OUTPUT_OWNER, read_output_owner
    from include.store import open_store
    from include.store.base import STORE_MARKER
    from include.store.local import marker_at_or_above

    try:
        here = marker_at_or_above(location.path, OUTPUT_OWNER)
        if here is not None:
            owner = read_output_owner(open_store(here, create=False))
            return f"; it is the output location {here} of {owner.describe()}" if owner else ""
        store = marker_at_or_above(location.path, STORE_MARKER)
        if store is not None:
            return f"; it is inside the checkpoint store {store}"
    except (OSError, ValueError, ConfigError, OutputError):
        return ""  # a record that is not one names nobody
    return ""


def configured_roots(defaults: Mapping[str, object]) -> list[str]:
    """The roots a DAG's params defaults imply: the input's directory (or prefix), the
    checkpoint root and the output root themselves."""
    roots = []
    for name, value in defaults.items():
        if not value:
            continue
        text = str(value)
        if name == "input_path" and "{date}" in text:  # a scheduled input: the directory of the dates
            location = Location.parse(text[:text.index("{date}")].rsplit("/", 1)[0] or "/", f"the default {name}")
        else:
            location = Location.parse(text, f"the default {name}")
            if name == "input_path" and location.segments:
                location = location.parent
        roots.append(location.url)
    return roots


def dag_roots(defaults: Mapping[str, object]) -> list[str]:
    """The roots a DAG's params defaults give it (``LOCATION_PARAMS``: ``configured_roots``),
    its own and nobody else's: the project's local directory as a whole is not one (it holds the
    other DAGs' inputs, stores and outputs); the deployment's are added by ``AllowedRoots.for_dag``."""
    return configured_roots({k: defaults.get(k) for k in LOCATION_PARAMS})


def roots_for_dag(defaults: Mapping[str, object]) -> AllowedRoots:
    """A DAG's allowed roots: the one rule its runs (iterations.dag_factory gives its operators
    ``dag_roots``) and the Iterations view (for the DAGs its user may read) both apply."""
    return AllowedRoots.for_dag(dag_roots(defaults))


def check_output_outside_checkpoints(output: Location | None, checkpoint_roots: Iterable[object]) -> None:
    """LocationError if ``output`` overlaps one of ``checkpoint_roots`` (or one of the
    deployment's, ``ITERATIONS_CHECKPOINT_ROOTS``): publishing there could damage a job's state.
    Stores elsewhere are found by their markers (include.store.borders)."""
    if output is None:
        return
    for root in [*checkpoint_roots, *deployment_checkpoint_roots()]:
        if not root:
            continue
        where = Location.parse(root, "checkpoint root")
        if output.overlaps(where):
            raise LocationError(f"output_path {output.url!r} overlaps the checkpoint root {where.url!r}: outputs never "
                                "share a location with checkpoints; choose an output_path outside every checkpoint root")


__all__ = ["AllowedRoots", "CHECKPOINT_ROOTS_ENV", "DAGS_DIR", "LOCATION_PARAMS", "ROOTS_ENV",
           "SHARED_STORE", "check_output_outside_checkpoints", "configured_roots", "dag_directory", "dag_home",
           "dag_roots", "earlier_shared_job",
           "deployment_checkpoint_roots", "deployment_roots", "roots_for_dag", "whose"]
