"""Airflow Assets for what iteration jobs publish.

Every output a finish publishes is an ``Asset`` whose URI is the output's location
(``include.publication.outputs.output_uri``: ``s3://bucket/prefix/<name>`` or ``file:///path/<name>``). The
location is a run's param, so the finish task declares an ``AssetAlias`` (one per DAG,
``outputs_alias``) as its outlet and resolves it, at run time, to the Assets it published: the
UI's asset graph shows the alias and, once a job published, the Assets behind it. A DAG that
needs an output is scheduled on ``output_asset(output_path, name)`` (or on the alias: every
output of every job of the DAG).

Exactly one asset event per publication: a finish that published announces each output unless
Airflow already holds an event of that publication (same job, checkpoint and version: a retry of
a finish whose earlier try published and succeeded, or a finish cleared after it succeeded). A
try that published and died before it succeeded left no event: its retry announces it."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from airflow.sdk import Asset, AssetAlias

from include.publication import output_uri

#: how many of an output's latest events are read to find one of the same publication
RECENT_EVENTS = 500
_SAME = ("job_id", "checkpoint_id", "version")


def outputs_alias(dag_id: str) -> AssetAlias:
    """The alias the finish task of DAG ``dag_id`` publishes its outputs' Assets through."""
    return AssetAlias(f"{dag_id}.outputs")


def output_asset(output_path: str, name: str) -> Asset:
    """The Asset of output ``name`` published under ``output_path`` (what a downstream DAG is
    scheduled on): its URI is the output's location, and so is its name."""
    return Asset(output_uri(output_path, name))


def input_asset(input_path: str) -> Asset:
    """The Asset of a job's input (what a DAG is scheduled on to run when its input arrives): its
    URI the input's location, as an upstream names it in its outlets (``output_asset`` for an
    iteration job's output: the same URI)."""
    from include.contract import canonical_location
    from include.publication import location_uri

    return Asset(location_uri(canonical_location(input_path, "input path")))


def unique_events(triggering_asset_events: Mapping[Any, Sequence[Any]] | None) -> list[Any]:
    """The asset events a run was triggered by, each once (a run scheduled on an alias gets an
    event under its Asset and under the alias), oldest first."""
    out, seen = [], set()
    for events in (triggering_asset_events or {}).values():
        for event in events:
            key = (event.asset.uri, event.source_dag_id, event.source_run_id, str(event.timestamp))
            if key not in seen:
                seen.add(key)
                out.append(event)
    return sorted(out, key=lambda e: str(e.timestamp))


def triggering_arrivals(context: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the asset events that started this DAG run say arrived (include.publication.arrivals.arrival:
    the extra's known fields, shape-checked), oldest first; empty for a run no asset started."""
    from include.publication import arrival

    out = []
    for e in unique_events(context.get("triggering_asset_events")):
        source = f"{e.source_dag_id}/{e.source_run_id}/{e.source_task_id}" if e.source_dag_id else "the REST API"
        out.append(arrival(e.asset.uri, e.extra, source=source, at=str(e.timestamp)))
    return out


def _events_of(asset: Asset) -> Sequence[Any]:
    """The latest events Airflow holds of ``asset`` (none when it has no event yet)."""
    from airflow.sdk.execution_time.context import InletEventsAccessor

    return list(InletEventsAccessor(asset_name=asset.name, asset_uri=asset.uri).ascending(False).limit(RECENT_EVENTS))


def announce(context: Mapping[str, Any], alias: AssetAlias, publications: Iterable[Mapping[str, Any]],
             log: Any, events_of=_events_of) -> list[str]:
    """Add an asset event (through ``alias``) for each of ``publications`` (``Publisher.publications``)
    that Airflow has no event of yet; the URIs announced."""
    announced = []
    for p in publications:
        asset, extra = Asset(p["uri"]), dict(p["extra"])
        key = tuple(extra.get(k) for k in _SAME)
        earlier = next((e for e in events_of(asset) if tuple((e.extra or {}).get(k) for k in _SAME) == key), None)
        if earlier is not None:
            log.info("output %s: the asset event of this publication (version %s) was emitted at %s: not again",
                     asset.uri, extra["version"], getattr(earlier, "timestamp", "?"))
            continue
        context["outlet_events"][alias].add(asset, extra=extra)
        log.info("output %s: asset event for version %s (%s rows%s)", asset.uri, extra["version"], extra["rows"],
                 f", replacing {extra['replaces']}" if extra.get("replaces") else "")
        announced.append(asset.uri)
    return announced


def describe_publications(triggering_asset_events: Mapping[Any, Sequence[Any]] | None,
                          aws_conn_id: str | None = "aws_default") -> list[dict[str, Any]]:
    """What a run scheduled on outputs' Assets was triggered by: for each asset event, what it
    says was published and what a reader of the output sees now (``include.publication.outputs.published``:
    the current version, its rows and files; ``current`` false when a later publication has
    replaced it since). An event that is not an output's (another producer's) is named and
    left out; logged as it goes. An event's ``extra`` is untrusted (anyone who may post an asset
    event writes it): only the fields a finish writes, of the right shape, are read
    (``include.publication.arrivals.arrival``); ``ignored`` names the other keys, whose values are never
    copied, and a field of the wrong shape is None."""
    import logging

    from include.errors import IterationError
    from include.publication import arrival, describe, output_of_uri, published
    from iterations.hooks.iteration_store import IterationStoreHook

    log = logging.getLogger("iterations")
    out = []
    for event in unique_events(triggering_asset_events):
        uri = event.asset.uri
        dag_id, run_id, task_id = (getattr(event, k, None) for k in ("source_dag_id", "source_run_id", "source_task_id"))
        said = arrival(uri, event.extra, source=f"{dag_id}/{run_id}/{task_id}" if dag_id else "the REST API",
                       at=str(event.timestamp))
        try:
            output_path, name = output_of_uri(uri)
            now = published(output_path, name, **IterationStoreHook(aws_conn_id).store_options(output_path))
        except IterationError as e:
            log.warning("asset event of %s: not an output this DAG can read (%s)", said["uri"], e)
            continue
        version = now.manifest.get("version")
        current = said.get("version") is not None and version == said["version"]
        log.info("output %s %s", describe(said), f"is current: {len(now.locations)} files, {now.rows} rows"
                 if current else f"is not current: the output is at version {version}")
        out.append({"uri": said["uri"], **{k: said.get(k) for k in ("job_id", "checkpoint_id", "version", "rows",
                                                                     "replaces")},
                    **({"ignored": said["ignored"]} if "ignored" in said else {}),
                    "current": current, "current_version": version, "files": len(now.locations)})
    return out
