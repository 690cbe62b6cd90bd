"""The iteration body contract: pure DataFrame functions plus the metadata the aligner needs.

A body never reads or writes storage itself: the runtime hands it DataFrames (static data and
the variables restored from the last checkpoint) and writes what it returns.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from include.contract.parameters import Parameter, param, parameters_of
from include.errors import ConfigError

# What the runtime hands a body and takes back: pyspark.sql.DataFrame and SparkSession, named
# here, not imported (the core never loads pyspark: processes that only plan, align or commit
# stay without it)
DataFrame = Any
SparkSession = Any


@dataclass(frozen=True)
class EpochContext:
    epoch: int
    num_partitions: int
    params: Any  # the body's parsed parameters
    spark: "SparkSession"
    # the epoch's inbox: coordinator name -> its events to this epoch, in order, each
    # {"partition", "seq", "payload"} (see include.epoch.coordinators)
    events: Mapping[str, list] = field(default_factory=dict)
    input: Any = None  # the job's InputSpec (for bodies whose input arrives through events)
    store_options: Mapping[str, Any] = field(default_factory=dict)  # to open the input's store

    def events_for(self, coordinator: str) -> dict[int, list]:
        """The payloads coordinator ``coordinator`` sent to each partition, in order."""
        out: dict[int, list] = {}
        for e in self.events.get(coordinator, []):
            out.setdefault(int(e["partition"]), []).append(e["payload"])
        return out


@dataclass
class StepResult:
    """What one epoch of a body produces.

    variables: the feedback datasets for the next epoch, one per head.
    metrics: metric name -> (head, column): the column holds per-record contributions that the
        tail aggregates per partition (the body's ``metric_aggregations``) and then drops.
    outputs: the body's per-epoch outputs (one per name in ``epoch_outputs``): staged with the
        epoch's attempt and published when the epoch's checkpoint commits, exactly once.
    facts: scalars the body knows about the epoch (the input's record count, say), checked
        against what the epoch wrote by the data checks (``include.checks``).
    """

    variables: dict[str, "DataFrame"]
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    outputs: dict[str, "DataFrame"] = field(default_factory=dict)
    facts: dict[str, float] = field(default_factory=dict)


class IterationBody(ABC):
    """Subclass, set the class attributes, implement the four functions."""

    name: ClassVar[str]
    # head (variable dataset) -> columns its records are partitioned by
    heads: ClassVar[Mapping[str, tuple[str, ...]]]
    # head -> its own number of partitions (Flink's variable stream with a parallelism of its
    # own: the head, its feedback log and its tail keep it); a head not named here has the
    # job's num_partitions, and follows it when a run changes it
    head_partitions: ClassVar[Mapping[str, int]] = {}
    # metric -> "sum" | "max" | "min" (how partition values combine)
    metric_aggregations: ClassVar[Mapping[str, str]] = {}
    # metric compared with the job's tolerance; None: no convergence test
    convergence_metric: ClassVar[str | None] = None
    # names of the datasets finish() returns
    outputs: ClassVar[tuple[str, ...]] = ()
    # False: the body has no static input (``load`` gets None); its data comes from its
    # coordinators' events (new input assigned to epochs, see include.epoch.splits)
    static_input: ClassVar[bool] = True
    # names of the datasets step() returns every epoch in StepResult.outputs (appended to the
    # published output as each epoch commits)
    epoch_outputs: ClassVar[tuple[str, ...]] = ()
    # the body's data checks, validated before each checkpoint commits (include.checks):
    # Great Expectations configurations ({"name", "type", "kwargs", "severity", "description"})
    # over the columns of the attempt's profile, e.g. "ranks.rank.min" or "l1_delta"
    expectations: ClassVar[tuple[Mapping[str, Any], ...]] = ()
    # the names of the scalars step() reports in StepResult.facts (profile columns the data
    # checks may name; include.checks.check_columns refuses any other)
    facts: ClassVar[tuple[str, ...]] = ()
    # the body's parameters, declared once: a frozen dataclass whose fields are declared with
    # include.contract.parameters.param (default, description, JSON Schema). parse_params checks a run's
    # values with them and returns an instance; the DAG factory makes the DAG's params and its
    # trigger form of them (iterations.dag_factory.body_params). None: no parameters.
    params_type: ClassVar[Any] = None
    # derived from params_type (or, for a body without a dataclass, Parameter declarations
    # whose values parse_params returns as a dict)
    parameters: ClassVar[tuple[Parameter, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "params_type" in cls.__dict__ and "parameters" not in cls.__dict__:
            cls.parameters = parameters_of(cls.params_type)
    # the body's name in messages ("PageRank"); None: ``name``
    title: ClassVar[str | None] = None
    # how a person reviews a staged output before it is published (include.publication.review),
    # output name -> {"keys": (columns naming a row; default: the head's of that name), "ranked_by":
    # a numeric column whose top rows are shown with how far they moved, "top": how many (10),
    # "shift": True to show how far each row's numeric values moved (centroids)}
    review: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    def coordinators(self, params: Any, input: Any, store_options: Mapping[str, Any]) -> dict[str, Any]:
        """The job's coordinators (``include.epoch.coordinators.Coordinator``) by name, created for a
        job reading ``input`` (an ``InputSpec``); default none. Their events reach ``step``
        through ``ctx.events``."""
        return {}

    def parse_params(self, raw: Mapping[str, Any]) -> Any:
        """The body's parameters from ``raw`` (name -> value), each checked by its declaration
        in ``parameters`` (a missing one takes its default), as ``params_type`` (or a dict);
        None for a body without parameters. ConfigError names an unknown or bad one."""
        declared = {p.name: p for p in self.parameters}
        unknown = sorted(set(raw) - set(declared))
        if unknown:
            if not declared:
                raise ConfigError(f"body {self.name!r} takes no parameters, got {unknown}")
            raise ConfigError(f"unknown {self.title or self.name} parameter(s) {unknown}; accepted: "
                              f"{', '.join(declared)}")
        if not declared:
            return None
        values = {name: p.check(raw[name] if name in raw else p.default) for name, p in declared.items()}
        return self.params_type(**values) if self.params_type is not None else values

    @abstractmethod
    def load(self, raw: "DataFrame", params: Any) -> dict[str, "DataFrame"]:
        """Validate the static input and derive what every epoch reads (cached on warm sessions)."""

    @abstractmethod
    def init(self, data: Mapping[str, "DataFrame"], ctx: EpochContext) -> dict[str, "DataFrame"]:
        """The variables epoch 0 starts from."""

    def warm_start(
        self, previous: Mapping[str, "DataFrame"], data: Mapping[str, "DataFrame"], ctx: EpochContext
    ) -> dict[str, "DataFrame"]:
        """The variables epoch 0 starts from when the job warm-starts from another job's final
        checkpoint (a scheduled job's previous batch): ``previous`` are that checkpoint's
        variables, ``data`` this job's (possibly changed) input. Default: use them as they are."""
        return dict(previous)

    def fork(
        self, variables: Mapping[str, "DataFrame"], data: Mapping[str, "DataFrame"], ctx: EpochContext
    ) -> dict[str, "DataFrame"]:
        """The variables a fork's first epoch starts from (include.runs.forks): ``variables`` are
        its parent's at the epoch it forks, ``ctx.params`` the fork's own (they may differ: a
        body whose state depends on a parameter, such as k-means' number of centroids on ``k``,
        makes the state fit the fork's here). Default: the parent's, as they are."""
        return dict(variables)

    @abstractmethod
    def step(
        self, variables: Mapping[str, "DataFrame"], data: Mapping[str, "DataFrame"], ctx: EpochContext
    ) -> StepResult:
        """One epoch: variables of epoch k -> variables of epoch k+1, and metrics."""

    @abstractmethod
    def finish(
        self, variables: Mapping[str, "DataFrame"], data: Mapping[str, "DataFrame"], ctx: EpochContext
    ) -> dict[str, "DataFrame"]:
        """The job's outputs, computed from the final variables."""

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The metadata planning and alignment need, JSON-able (stored in every plan)."""
        for head, n in cls.head_partitions.items():
            if head not in cls.heads:
                raise ConfigError(f"body {cls.name!r}: head_partitions names {head!r}, which is not one of its heads "
                                  f"{sorted(cls.heads)}")
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 100_000:
                raise ConfigError(f"body {cls.name!r}: head_partitions[{head!r}] must be an integer in [1, 100000], "
                                  f"got {n!r}")
        return {
            "name": cls.name,
            "heads": {h: list(cols) for h, cols in cls.heads.items()},
            "head_partitions": dict(cls.head_partitions),
            "metric_aggregations": dict(cls.metric_aggregations),
            "convergence_metric": cls.convergence_metric,
            "outputs": list(cls.outputs),
            "epoch_outputs": list(cls.epoch_outputs),
            "expectations": [dict(e) for e in cls.expectations],
            "facts": list(cls.facts),
            "review": {name: {k: list(v) if isinstance(v, tuple) else v for k, v in hints.items()}
                       for name, hints in cls.review.items()},
        }


BUILTIN_BODIES = {
    "pagerank": "spark_jobs.bodies.pagerank:PageRank",
    "kmeans": "spark_jobs.bodies.kmeans:KMeans",
    "sgd": "spark_jobs.bodies.sgd:IncrementalSGD",
    "components": "spark_jobs.bodies.components:ConnectedComponents",
}


def body_reference(name: str) -> str:
    """How a body is loaded, ``package.module:Class``, for a registered name or a reference
    (one body, one reference: an owner record compares these)."""
    return BUILTIN_BODIES.get(name, name)


def resolve_body(name: str) -> IterationBody:
    """A body by registered name or by ``package.module:Class``."""
    target = BUILTIN_BODIES.get(name, name)
    if ":" not in target:
        raise ConfigError(
            f"unknown iteration body {name!r}; registered: {', '.join(sorted(BUILTIN_BODIES))}, "
            "or give 'package.module:Class'"
        )
    module_name, _, cls_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot load iteration body {name!r} ({target}): {e}") from e
    if not (isinstance(cls, type) and issubclass(cls, IterationBody)):
        raise ConfigError(f"{target} is not an IterationBody subclass")
    return cls()


__all__ = ["BUILTIN_BODIES", "EpochContext", "IterationBody", "Parameter", "StepResult", "body_reference", "param",
           "parameters_of", "resolve_body"]
