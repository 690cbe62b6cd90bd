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

from include.checks.specs import ExpectationSpec
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
    (``include.process.preloading``)."""
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


#: Results of expectations that passed, by what decides them (``_result_key``): an expectation
#: reads only its own columns of the one-row profile (and the parameters it names), so one whose
#: inputs equal those of an earlier validation in this process has that validation's result.
_PASSED: "dict[tuple, Any]" = {}
_MAX_PASSED = 4096
_LAST_RUN: dict[str, Any] = {}  # the meta and batch id of this process's last validation


def _result_key(spec: ExpectationSpec, values: Mapping[str, Any], parameters: Mapping[str, Any]) -> tuple:
    """What decides ``spec``'s result on the one-row profile ``values``: the spec itself, the
    profile's column names in order (``expect_column_to_exist`` may name a position), the type
    and exact value of each column it reads, and of each parameter it names."""
    def exact(v: Any) -> str:
        return f"{type(v).__name__}:{v!r}"

    return (json.dumps(asdict(spec), sort_keys=True, default=str), tuple(values),
            tuple((c, exact(values[c])) for c in spec.columns()),
            tuple((p, exact(parameters.get(p))) for p in sorted(spec.parameters())))


def run_gx(specs: Sequence[ExpectationSpec], profile: Mapping[str, Any], parameters: Mapping[str, Any],
            html: bool) -> tuple[list[Any], dict[str, Any], Any]:
    """Validate the one-row profile with Great Expectations (``Batch.validate``: nothing is kept
    in the context between validations). Pass/fail first, with ``BOOLEAN_ONLY`` results: that
    is all a passing attempt needs (the observed values are the profile's own), and it costs
    half as much as ``SUMMARY``; only the expectations whose inputs no earlier validation in
    this process passed with are given to Great Expectations (``_PASSED``; the reused ones are
    listed in the result's ``meta.reused_results``). When an expectation fails (or raises),
    every expectation is validated again with ``SUMMARY`` results, the detail the kept JSON and
    the Data Docs page show."""
    import pandas as pd

    gx, _ctx, batch_definition = _gx()
    values = {k: (math.nan if v is None else v) for k, v in profile.items()}
    frame = pd.DataFrame([values])

    def run(subset: Sequence[ExpectationSpec], result_format: str) -> Any:
        suite = _suite(gx, subset)
        with _GX_LOCK:  # one validation at a time in the shared context
            batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
            result = batch.validate(suite, result_format=result_format, expectation_parameters=dict(parameters))
            _LAST_RUN.update(meta=result.meta, batch_id=result.batch_id)
        _plain_numbers(result)
        return result

    keys = [_result_key(s, values, parameters) for s in specs]
    with _GX_LOCK:
        known = [_PASSED.get(k) for k in keys]
    missing = [s for s, r in zip(specs, known) if r is None]
    result = run(missing, "BOOLEAN_ONLY") if missing else None
    if result is not None and not result.success:
        result = run(specs, "SUMMARY")
    else:
        fresh = {r.expectation_config.meta.get("name"): r for r in (result.results if result is not None else ())}
        results = [r if r is not None else fresh.get(s.name) for s, r in zip(specs, known)]  # GX's order is its own
        with _GX_LOCK:
            for key, r, reused in zip(keys, results, known):
                if reused is None and r is not None and r.success:
                    _PASSED[key] = r
            while len(_PASSED) > _MAX_PASSED:
                _PASSED.pop(next(iter(_PASSED)))
        result = _with_reused(gx, result, results, [s.name for s, r in zip(specs, known) if r is not None],
                              frame)
    by_name = {r.expectation_config.meta.get("name"): r for r in result.results}
    ordered = [by_name.get(s.name) for s in specs]

    def render() -> str:
        from great_expectations.render.renderer import ValidationResultsPageRenderer
        from great_expectations.render.view import DefaultJinjaPageView

        return DefaultJinjaPageView().render(ValidationResultsPageRenderer().render(result))

    return ordered, jsonable(result.to_json_dict()), render


def _with_reused(gx: Any, fresh: Any, results: list[Any], reused: list[str], frame: Any) -> Any:
    """The suite's result from this validation's ``fresh`` one (None when every result was
    reused) and the ``reused`` expectations' earlier results, in the suite's order. Without a
    fresh validation, the meta is the last one's with this profile's batch markers, as Great
    Expectations computes them."""
    if not reused:
        return fresh
    from great_expectations.core.expectation_validation_result import ExpectationSuiteValidationResult
    from great_expectations.validator.validator import calc_validation_statistics

    if fresh is not None:
        meta, batch_id = dict(fresh.meta), fresh.batch_id
    else:
        from great_expectations.execution_engine.pandas_execution_engine import hash_pandas_dataframe

        with _GX_LOCK:
            meta, batch_id = dict(_LAST_RUN["meta"]), _LAST_RUN["batch_id"]
        meta["batch_markers"] = {"ge_load_time": time.strftime("%Y%m%dT%H%M%S.000000Z", time.gmtime()),
                                 "pandas_data_fingerprint": hash_pandas_dataframe(frame)}
    meta["reused_results"] = reused
    results = [r for r in results if r is not None]  # an expectation without one is reported as an error
    stats = calc_validation_statistics(results)
    return ExpectationSuiteValidationResult(
        success=stats.success, results=results, suite_name="iterations_checks", meta=meta, batch_id=batch_id,
        statistics={"evaluated_expectations": stats.evaluated_expectations,
                    "successful_expectations": stats.successful_expectations,
                    "unsuccessful_expectations": stats.unsuccessful_expectations,
                    "success_percent": stats.success_percent})


def _plain_numbers(result: Any) -> None:
    """numpy scalars in results -> Python numbers (Data Docs' renderer refuses numpy 2 reprs)."""
    for r in result.results:
        r.result = jsonable(r.result or {})

def jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if hasattr(v, "item") and type(v).__module__ == "numpy":
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v

