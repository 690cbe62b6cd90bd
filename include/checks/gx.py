"""Great Expectations itself: imported once per process (in the background, at low CPU
priority, by ``warm_up``), the suites built once per spec list, and the results translated."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from include.checks.settings import ExpectationSpec
from include.errors import ConfigError

log = logging.getLogger("iterations")


_GX: dict[str, Any] = {}
_GX_LOCK = threading.RLock()


def _gx():
    """(great_expectations, an ephemeral context with a pandas data source, its batch
    definition), made once per process, quietly (no analytics, no progress bars)."""
    with _GX_LOCK:
        if not _GX:
            _make_gx()
    return _GX["gx"], _GX["ctx"], _GX["batch"]


_WARMING: list[threading.Thread] = []

#: How much the warm-up thread lowers its priority: the import takes whatever CPU the epoch's
#: Spark work leaves (on a machine shared with the Spark driver or a local Connect server it
#: would otherwise slow the epoch down about as much as it saves).
WARM_UP_NICENESS = 10


def yield_cpu(niceness: int = WARM_UP_NICENESS) -> None:
    """Lower the calling thread's CPU priority by ``niceness`` (Linux: niceness is per thread;
    at most 19); elsewhere, or if refused, nothing."""
    try:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + niceness))
    except (AttributeError, OSError):
        pass


def warm_up() -> None:
    """Make Great Expectations' context in a background thread: importing it takes seconds,
    which then overlap with the Spark work of the first epoch instead of delaying its commit.
    The first validation waits for it (the lock) if it is not ready; a failure here is left
    for that validation to raise."""
    def make() -> None:
        yield_cpu()
        try:
            _gx()
        except Exception:  # raised again, with its context, by the validation that needs it
            pass

    with _GX_LOCK:
        if _GX or _WARMING:
            return
        thread = threading.Thread(target=make, name="great-expectations-warm-up", daemon=True)
        _WARMING.append(thread)
    thread.start()


def import_gx() -> Any:
    """Import Great Expectations quietly (no analytics, its INFO logging off): the one way this
    project imports it, also used to preload it in a process that forks task processes
    (``include.preload``)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        ProgressBarsConfig,  # noqa: F401
    )

    for name in ("great_expectations", "great_expectations.data_context.types.base"):  # the latter sets INFO itself
        logging.getLogger(name).setLevel(logging.WARNING)
    return gx


def _make_gx() -> None:
    started = time.perf_counter()
    preloaded = "great_expectations" in sys.modules
    gx = import_gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = ctx.data_sources.add_pandas("iterations").add_dataframe_asset("profile") \
        .add_batch_definition_whole_dataframe("attempt")
    _GX.update(gx=gx, ctx=ctx, batch=batch)
    log.info("Great Expectations ready in %.2f s (%s)", time.perf_counter() - started,
             "its modules were preloaded" if preloaded else "imported by this process")


_SUITES: "dict[str, Any]" = {}  # the specs' JSON -> their Great Expectations suite, built once
_MAX_SUITES = 64


def _suite(gx: Any, specs: Sequence[ExpectationSpec]) -> Any:
    """The suite of ``specs``, built once per process and kept (an epoch's suite is usually its
    predecessor's: only the parameters change, and they are given to each validation)."""
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    key = json.dumps([asdict(s) for s in specs], sort_keys=True, default=str)
    with _GX_LOCK:
        suite = _SUITES.get(key)
    if suite is not None:
        return suite
    suite = gx.ExpectationSuite(name="iterations_checks")
    for spec in specs:
        try:
            expectation = ExpectationConfiguration(
                type=spec.type, kwargs=dict(spec.kwargs), meta={"name": spec.name},
                description=spec.description or None, severity=spec.severity,
            ).to_domain_obj()
        except Exception as e:  # an unknown type or bad kwargs: the user's configuration
            raise ConfigError(f"expectation {spec.name!r} ({spec.type} {spec.kwargs}) is not a valid "
                              f"Great Expectations expectation: {e}") from e
        suite.add_expectation(expectation)
    with _GX_LOCK:
        if len(_SUITES) >= _MAX_SUITES:
            _SUITES.pop(next(iter(_SUITES)))
        return _SUITES.setdefault(key, suite)


def _run_gx(specs: Sequence[ExpectationSpec], profile: Mapping[str, Any], parameters: Mapping[str, Any],
            html: bool) -> tuple[list[Any], dict[str, Any], Any]:
    """Validate the one-row profile with Great Expectations (``Batch.validate``: nothing is kept
    in the context between validations). Pass/fail first, with ``BOOLEAN_ONLY`` results: that
    is all a passing attempt needs (the observed values are the profile's own), and it costs
    half as much as ``SUMMARY``. When an expectation fails (or raises), the same validation runs
    again with ``SUMMARY`` results, the detail the kept JSON and the Data Docs page show."""
    import pandas as pd

    gx, _ctx, batch_definition = _gx()
    suite = _suite(gx, specs)
    frame = pd.DataFrame([{k: (math.nan if v is None else v) for k, v in profile.items()}])

    def run(result_format: str) -> Any:
        with _GX_LOCK:  # one validation at a time in the shared context
            batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
            return batch.validate(suite, result_format=result_format, expectation_parameters=dict(parameters))

    result = run("BOOLEAN_ONLY")
    if not result.success:
        result = run("SUMMARY")
    _plain_numbers(result)
    by_name = {r.expectation_config.meta.get("name"): r for r in result.results}
    ordered = [by_name.get(s.name) for s in specs]

    def render() -> str:
        from great_expectations.render.renderer import ValidationResultsPageRenderer
        from great_expectations.render.view import DefaultJinjaPageView

        return DefaultJinjaPageView().render(ValidationResultsPageRenderer().render(result))

    return ordered, _jsonable(result.to_json_dict()), render


def _plain_numbers(result: Any) -> None:
    """numpy scalars in results -> Python numbers (Data Docs' renderer refuses numpy 2 reprs)."""
    for r in result.results:
        r.result = _jsonable(r.result or {})

def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and type(v).__module__ == "numpy":
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v

