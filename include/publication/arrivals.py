"""What arrived: the asset events that started a run, what they claim, and what the store bears out.

A DAG scheduled on its input's Asset is started by asset events whose ``extra`` anyone allowed to
post an asset event writes: ``arrival`` keeps only the fields this project's finish writes
(include.publication.publish: job_id, checkpoint_id, version, rows, format, replaces), each shape-checked,
and names the other keys without using them. Even well-shaped, those fields are the poster's
claims: ``check_arrivals`` keeps them as what arrived only for an event of the run's own input that
names its current version (with the manifest's job, checkpoint and rows), and files any other
under ``claimed``. Arrivals are logged and recorded so (in the pin and in a scheduled batch's
generation record); they never choose which files are read: the manifest does.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from include.contract.input_versions import PINNED_FIELDS
from include.store import Location, open_store

MAX_ARRIVALS = 50  # recorded per pin or generation: the newest ones


def arrival(uri: Any, extra: Any, *, source: str | None = None, at: str | None = None) -> dict[str, Any]:
    """What one asset event says arrived, from its (untrusted) ``extra``: the fields a finish
    writes, those of the right shape only; ``ignored`` names the other keys (never used)."""
    extra = extra if isinstance(extra, Mapping) else {}
    out: dict[str, Any] = {"uri": str(uri)[:1024], "source": None if source is None else str(source)[:512],
                           "at": None if at is None else str(at)[:64]}
    for key, ok in PINNED_FIELDS.items():
        if key in extra and ok(extra[key]):
            out[key] = extra[key]
    ignored = sorted(str(k)[:64] for k in extra if k not in PINNED_FIELDS or not PINNED_FIELDS[k](extra[k]))
    if ignored:
        out["ignored"] = ignored[:20]
    return out


def describe(a: Mapping[str, Any]) -> str:
    """One line of a log: where, which version of which job, from whom, and whether the store
    bears it out (``check_arrivals``)."""
    what = (f"version {a['version']} of job {a.get('job_id', '?')} (checkpoint {a.get('checkpoint_id', '?')}, "
            f"{a.get('rows', '?')} rows)") if a.get("version") else "no version named"
    checked = a.get("checked")
    verdict = "" if checked is None else " (as the output's manifest says)" if checked == CHECKED else \
        f" (the event's claim, not borne out: {checked})"
    return f"{a['uri']}: {what}{verdict}, from {a.get('source') or 'an unnamed source'} at {a.get('at') or '?'}" + \
        (f"; keys not read: {', '.join(a['ignored'])}" if a.get("ignored") else "")


CHECKED = "the current version"


_CLAIMS = ("job_id", "checkpoint_id", "rows", "format", "replaces")


def check_arrivals(arrivals: Sequence[Mapping[str, Any]], location: Location,
                   store_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The arrivals (``arrival``) with their claims checked against the store, for logs and
    records: an arrival of ``location`` (the run's own input, and only it: an event's URI never
    makes a run read elsewhere) that names the output's current version gets the manifest's job,
    checkpoint and rows (``checked``: ``CHECKED``); any other keeps what it says under ``claimed``
    (never shown as what arrived) and ``checked`` says why not."""
    uri = location_uri(location)
    current: Any = None
    looked = False
    out = []
    for a in arrivals:
        a = dict(a)
        if a.get("version") is None:
            out.append(a)
            continue
        if a.get("uri") != uri:
            why = "an event of another location than this run's input"
        else:
            if not looked:
                looked = True
                try:
                    current = current_version(location, dict(store_options or {}))
                except Exception as e:  # noqa: BLE001 - a damaged or unreachable manifest: the claim stays a claim
                    current = e
            if current is None or isinstance(current, Exception):
                why = "the input has no readable publication manifest" + (f" ({current})" if current else "")
            elif current.manifest["version"] != a["version"]:
                why = f"not the input's current version ({current.manifest['version']})"
            else:
                a.update(job_id=current.job_id, checkpoint_id=current.checkpoint_id, rows=current.rows, checked=CHECKED)
                out.append(a)
                continue
        claimed = {k: a.pop(k) for k in _CLAIMS if k in a}
        out.append({**a, "claimed": claimed, "checked": why[:300]})
    return out


def newest_for(arrivals: Sequence[Mapping[str, Any]], uri: str) -> Mapping[str, Any] | None:
    """The last arrival of ``uri`` that names a version (arrivals come oldest first)."""
    return next((a for a in reversed(arrivals) if a.get("uri") == uri and a.get("version")), None)


def location_uri(location: Location) -> str:
    """A location as Airflow Assets and OpenLineage name it (include.publication.outputs.output_uri's form)."""
    if location.is_s3:
        return location.url
    import pathlib

    return pathlib.Path(location.path).as_uri()


def current_version(location: Location, store_options: Mapping[str, Any]):
    """The current publication of the output at ``location`` (include.publication.outputs.published), or
    None when it is not a published output (no ``_PUBLISHED.json`` in it)."""
    from include.publication.outputs import PUBLISHED, published
    if not location.segments:
        return None
    if location.is_local:
        if not os.path.isfile(os.path.join(location.path, PUBLISHED)):
            return None  # asked of the file system: opening a local store would create its directory
    elif not open_store(location.parent.url, **store_options).exists(f"{location.name}/{PUBLISHED}"):
        return None
    return published(location.parent.url, location.name, **store_options)  # a damaged manifest: refused
