"""Build an iteration DAG from configuration: a DAG file is one call to ``iteration_dag``.

Each DAG run is one batch: task groups ``epoch_0 .. epoch_<L-1>`` (the batch's epochs, unrolled:
DAGs are acyclic), each ``run`` (head) -> ``align`` (deferrable sensor) -> ``commit``, then
``finish``. Epochs after termination are skipped; finish runs whenever nothing failed. With
``commit_in_head`` (the default) the head aligns and commits its epoch itself when every report
is there as its Spark job ends, skipping the group's other two tasks.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any, Mapping, Sequence

from airflow.sdk import DAG, Param, TaskGroup
from airflow.sdk.definitions.param import ParamsDict

from include.checkpoints import FORK_FROM_REGEX, JOB_ID_REGEX
from include.process import (  # noqa: F401 (LOCAL_DIR: for the DAG files)
    APPROVAL_TIMEOUT,
    COMMIT_IN_HEAD,
    EPOCHS_PER_BATCH,
    INPUT_POLL_SECONDS,
    LOCAL_DIR,
    OVERLAP_COMMITS,
    PROJECT_ROOT,
    RETRIES,
    RETRY_DELAY_SECONDS,
    SPARK_MODE,
)

#: a location default in the DAG's own directory (include.store.dag_directory,
#: ``<ITERATIONS_LOCAL_DIR>/dags/<dag_id>``): ``iteration_dag`` puts the DAG's id in; the
#: defaults of ``job_params``' checkpoint store and output root
DAG_DIRECTORY = "{dag_directory}"
OWN_STORE = f"{DAG_DIRECTORY}/store"
OWN_OUTPUT = f"{DAG_DIRECTORY}/output"

JOB_ID_PATTERN = JOB_ID_REGEX  # the job_id params' pattern: include.checkpoints.layout's rule

# The expectation types and kwargs include.checks accepts (EXPECTATION_TYPES, EXPECTATION_KWARGS),
# written out so that parsing a DAG file does not import the checks module; a unit test keeps
# them equal (tests/unit/checks/test_validation.py).
EXPECTATION_TYPES = [
    "expect_column_max_to_be_between", "expect_column_mean_to_be_between", "expect_column_median_to_be_between",
    "expect_column_min_to_be_between", "expect_column_pair_values_a_to_be_greater_than_b",
    "expect_column_pair_values_to_be_equal", "expect_column_sum_to_be_between", "expect_column_to_exist",
    "expect_column_values_to_be_between", "expect_column_values_to_be_in_set", "expect_column_values_to_be_null",
    "expect_column_values_to_not_be_in_set", "expect_column_values_to_not_be_null", "expect_multicolumn_sum_to_equal",
]
EXPECTATION_KWARGS = ["column", "column_A", "column_B", "column_index", "column_list", "ignore_row_if", "max_value",
                      "min_value", "mostly", "or_equal", "strict_max", "strict_min", "sum_total", "value_set"]


# The JSON Schema dialect of every param's schema. Airflow validates a param with
# ``jsonschema.validate``, which first checks the schema against its dialect's metaschema, and
# does so for every param each time a DAG is serialized (twice per ``airflow dags test``, on
# every parse by the dag-processor) and as each task starts; draft 7's metaschema is much
# quicker to check than the default 2020-12 one (bench/RESULTS.md), whose vocabularies add
# nothing these schemas use. (Tasks carry no copy of them: operators.base.own_params.)
SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"


def param(default: Any, *, description: str, **schema: Any) -> Param:
    """A DAG param whose schema (``type``, ``enum``, ``minimum``...) is JSON Schema draft 7. An
    integer's bounds are given to the form as exclusive ones (``form_bounds``)."""
    return Param(default, description=description, schema={"$schema": SCHEMA_DIALECT, **form_bounds(schema)})


def form_bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with an integer-only param's ``minimum`` / ``maximum`` as the same bounds made
    exclusive (``minimum: 1`` is ``exclusiveMinimum: 0``). Airflow's trigger form clamps a
    number field to ``minimum`` and ``maximum`` without a word (0 typed becomes 1); it ignores
    the exclusive ones, so the value typed reaches validation and is refused as typed ("0 is
    less than or equal to the minimum of 0"). A param that may be a float keeps its bounds."""
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if "integer" not in types or "number" in types:
        return dict(schema)
    out = dict(schema)
    for key, exclusive, step in (("minimum", "exclusiveMinimum", -1), ("maximum", "exclusiveMaximum", 1)):
        bound = out.get(key)
        if isinstance(bound, int) and not isinstance(bound, bool) and exclusive not in out:
            out[exclusive] = bound + step
            del out[key]
    return out


def job_params(
    *,
    job_id: str,
    input_path: str,
    output_path: str | None = OWN_OUTPUT,
    checkpoint_root: str = OWN_STORE,
    max_epochs: int | None = None,
    tolerance: float = 1e-6,
    num_partitions: int | None = None,
    retain_last: int | None = None,
    scheduled: bool = False,
    on_input_change: str = "refuse",
) -> dict[str, Param]:
    """The params every iteration DAG has, with their JSON schema (the trigger form); the
    bounded ones come from the job's declarations (include.contract.config.SETTINGS), with the defaults
    given here (None: the declared one). ``scheduled``: also the params of a scheduled job's
    batches (recompute, batch_date). ``checkpoint_root`` and ``output_path`` default to the
    DAG's own directory (``OWN_STORE``, ``OWN_OUTPUT``: a location that starts with
    ``{dag_directory}`` is made the DAG's by ``iteration_dag``); ``output_path`` None: no output."""
    from include.contract import SETTINGS

    def setting(name: str, default: Any = None) -> Param:
        s = SETTINGS[name]
        return param(s.check(default) if default is not None else s.default, description=s.description,
                     **s.json_schema())

    params = {
        "job_id": param(job_id, type="string", minLength=1, maxLength=128, pattern=JOB_ID_PATTERN,
                        description="Names the checkpoint log: the same id resumes the same job. 1 to 128 letters, "
                                    "digits, '_', '.' or '-', the first a letter or a digit, no '..' (the form "
                                    "refuses any other with the rule's regular expression)."),
        "input_path": param(input_path, type="string", minLength=1,
                            description="Static input: a local path or s3://bucket/key (CSV with header, Parquet, JSON lines)."),
        "output_path": param(output_path, type=["null", "string"],
                             description="Where finish publishes the outputs (local path or s3://bucket/prefix). "
                                         "Left at its default, each job publishes under <default>/<job_id>; "
                                         "a location another job published to first is refused."),
        "output_format": setting("output_format"),
        "checkpoint_root": param(checkpoint_root, type="string", minLength=1,
                                 description="Checkpoint store: a local directory or s3://bucket/prefix."),
        "max_epochs": setting("max_epochs", max_epochs),
        "tolerance": param(tolerance, type="number", minimum=0,
                           description="Converged when the body's metric is under this."),
        "num_partitions": setting("num_partitions", num_partitions),
        "retain_last": setting("retain_last", retain_last),
        "retain_batches": setting("retain_batches"),
        "retain_history": setting("retain_history"),
        "full_checkpoint_every": setting("full_checkpoint_every"),
        "on_damaged_checkpoint": setting("on_damaged_checkpoint"),
        "stop": param("none", type="string", enum=["none", "drain", "suspend"],
                      description="At the end of this run's batch, if the job has not terminated: none = go on "
                                  "(continuation); drain = finish now (final checkpoint, publish outputs); "
                                  "suspend = stop with the state checkpointed, nothing published (trigger "
                                  "again to resume). A running job is stopped by the iterations_stop DAG."),
        "checks": param({}, type="object",
                        properties={"enabled": {"type": "boolean"},
                                    "expectations": {"type": "array", "items": {
                                        "type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string", "minLength": 1},
                                                       "type": {"type": "string", "enum": EXPECTATION_TYPES},
                                                       "kwargs": {"type": "object",
                                                                  "propertyNames": {"enum": EXPECTATION_KWARGS}},
                                                       "severity": {"type": "string",
                                                                    "enum": ["critical", "warning", "info"]},
                                                       "description": {"type": "string"},
                                                       "enabled": {"type": "boolean"}},
                                        "additionalProperties": False}}},
                        additionalProperties=False,
                        description="Data checks this run adds to the DAG's: {\"expectations\": [{\"name\", "
                                    "\"type\", \"kwargs\", \"severity\"}]}. Changing or removing an existing "
                                    "expectation (an entry with its name) or {\"enabled\": false} is refused "
                                    "unless the DAG's author allows runs to relax its checks. See docs/data-checks.md."),
        "rewind_to": param(None, type=["null", "integer"], minimum=0,
                           description="Recompute the job from this epoch: a new generation of the job starts "
                                       "from a copy of checkpoint rewind_to - 1, computes the epochs from there "
                                       "and replaces the outputs in one step when it ends; the rewound one stays "
                                       "readable. Empty: go on with the newest generation. See docs/airflow.md."),
        "fork_from": param(None, type=["null", "string"], pattern=FORK_FROM_REGEX,
                           description="Start this run's job (a new job_id) from another job of this DAG: JOB "
                                       "(its newest kept epoch) or JOB:EPOCH (its checkpoint of that epoch), "
                                       "copied and verified; from there the job runs with this run's params "
                                       "(damping, k, tolerance, max_epochs...). The body and its variables' "
                                       "schemas must be the parent's. Empty: the job starts at epoch 0, or goes "
                                       "on. See docs/airflow.md, Forking a job."),
        "on_input_change": param(on_input_change, type="string", enum=["refuse", "restart"],
                                 description="When the input is no longer what the job pinned at its first epoch "
                                             "(a file added, gone or rewritten): refuse = fail naming the file "
                                             "and what changed; restart = a new generation computes the job from "
                                             "epoch 0 on the new input. See docs/airflow.md."),
        "verify_epoch": param(None, type=["null", "integer"], minimum=0,
                              description="The determinism audit: this run recomputes the job's epoch K from "
                                          "checkpoint K-1 in a scratch store and compares every variable's bytes "
                                          "with the committed checkpoint K (the run fails naming each partition "
                                          "that differs); it computes no epoch and changes nothing. Give it the "
                                          "job's own params. See docs/writing-a-body.md."),
        "continuation": param(True, type="boolean",
                              description="If the job has not terminated when the batch's epochs are done, "
                                          "trigger the next batch (a linked run of this DAG)."),
    }
    if scheduled:  # each batch is a log of its own, pinned when it starts: ``recompute`` reads the input anew
        del params["on_input_change"], params["verify_epoch"], params["fork_from"]
        params["recompute"] = param(
            False, type="boolean",
            description="Recompute this date's batch from the checkpoint it started from and replace "
                        "its outputs atomically. Off: a finished batch is not recomputed.")
        params["batch_date"] = param(
            None, type=["null", "string"],
            description="The date this batch is for; empty: the run's logical date. "
                        "Continuation runs set it to the date they continue.")
    return params


def body_params(body: str, **defaults: Any) -> dict[str, Param]:
    """A body's params, made from its declarations (``IterationBody.parameters``: the same
    schema checks a run's values), with the defaults given here in place of the body's (each
    checked: a bad one fails the DAG file's parse). ``body``: a registered name or
    ``package.module:Class``; resolving it imports no pyspark."""
    from include.contract import resolve_body

    declared = {p.name: p for p in resolve_body(body).parameters}
    unknown = sorted(set(defaults) - set(declared))
    if unknown:
        raise ValueError(f"body {body!r} has no parameter(s) {unknown}; it has {sorted(declared)}")
    out = {}
    for name, p in declared.items():
        value = p.check(defaults[name]) if name in defaults else p.default
        out[name] = param(list(value) if isinstance(value, tuple) else value, description=p.description,
                          **p.json_schema())
    return out


def pagerank_params(**defaults: Any) -> dict[str, Param]:
    """The PageRank body's params (``damping``), defaults overridable by name."""
    return body_params("pagerank", **defaults)


def sgd_params(**defaults: Any) -> dict[str, Param]:
    """The incremental gradient descent body's params."""
    return body_params("sgd", **defaults)


def kmeans_params(**defaults: Any) -> dict[str, Param]:
    """The k-means body's params."""
    return body_params("kmeans", **defaults)


def _on_assets(schedule: Any) -> bool:
    """Whether a DAG's schedule is made of Assets (an Asset, an alias, a list or an expression
    of them) rather than a clock."""
    from airflow.sdk.definitions.asset import BaseAsset

    if isinstance(schedule, BaseAsset):
        return True
    return isinstance(schedule, (list, tuple)) and bool(schedule) and all(isinstance(a, BaseAsset) for a in schedule)


def own_locations(params: Mapping[str, Param], dag_id: str) -> dict[str, Param]:
    """``params`` with each location default that starts with ``{dag_directory}`` (``OWN_STORE``,
    ``OWN_OUTPUT``) put in DAG ``dag_id``'s own directory (include.store.dag_directory)."""
    from include.store import LOCATION_PARAMS, dag_directory

    out = dict(params)
    for name in LOCATION_PARAMS:
        p = out.get(name)
        value = getattr(p, "value", None)
        if isinstance(value, str) and value.startswith(DAG_DIRECTORY):
            rest = value[len(DAG_DIRECTORY):].lstrip("/")
            out[name] = Param(dag_directory(dag_id, *rest.split("/")) if rest else dag_directory(dag_id),
                              description=p.description, schema=p.schema)
    return out


def _overridden(setting, value: bool) -> bool:
    """``value``, or the deployment's override of it: ``setting`` set to 1 or 0 (true, false)."""
    flag = (setting.get() or "").lower()
    if not flag:
        return value
    if flag not in ("1", "0", "true", "false"):
        raise ValueError(f"{setting.name} must be 1 or 0, got {flag!r}")
    return flag in ("1", "true")


def iteration_dag(
    *,
    dag_id: str,
    body: str,
    params: Mapping[str, Param],
    epochs_per_batch: int,
    body_param_names: tuple[str, ...] | None = None,
    spark_mode: str = SPARK_MODE.get(),
    spark_conn_id: str | None = None,
    aws_conn_id: str | None = "aws_default",
    schedule: Any = None,
    start_date: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    tags: tuple[str, ...] = (),
    doc_md: str | None = None,
    retries: int = 2,
    wait_for_input: bool = False,
    input_timeout: float = 3600.0,
    checks_file: str | None = None,
    allow_take_over: bool = False,
    relax_checks: bool = False,
    lease_wait: float = 60.0,
    commit_in_head: bool = True,
    overlap_commits: bool = False,
    attempt_retries: int = 0,
    approve_publication: bool = False,
    approvers: Sequence[Any] = (),
    allow_self_approval: bool = False,
    approval_timeout: float = 86400.0,
    dated_batches: bool | None = None,
    lineage_parents: Sequence[tuple[str, str]] = (),
) -> DAG:
    """``params``: the DAG's params (``job_params``, plus the body's: ``body_params``).
    ``body_param_names``: which of them are the body's; None: all the body declares, those not
    in ``params`` added with the body's defaults.

    ``wait_for_input``: for a body whose input arrives while it runs (``sgd``), each epoch
    group starts with ``wait_input``, a deferrable sensor that waits up to ``input_timeout``
    seconds for new input before the head plans the epoch. ``checks_file``: the DAG's data
    checks (JSON, ``include.checks``; a path relative to the project root), over the body's and
    under each run's ``checks`` param.

    The author's safeguards, which a run's conf cannot switch off: ``allow_take_over`` (off by
    default) adds a ``take_over`` param with which a run makes a job of another owner (another
    DAG, body, input or output) this DAG's; ``relax_checks`` (off by default) lets a run's
    ``checks`` param turn the data checks off or loosen the author's expectations (otherwise a
    run may only add expectations). ``lease_wait``: seconds a task waits for another run of the
    same job to end before it fails naming that run.

    ``commit_in_head`` (on by default): one task per epoch where it can be: the head aligns
    and commits its epoch when the Spark job has ended with every report written (the usual
    case), and skips the group's ``align`` and ``commit``, which stay for an attempt with a
    missing report (the sensor waits for it, deferred). Each later group starts once the head
    before it has succeeded and its commit succeeded or was skipped (trigger rule
    ``none_failed``). Off: three tasks every epoch. docs/airflow.md says what it changes.

    ``overlap_commits`` (off by default; needs ``commit_in_head``): an epoch's checks and commit
    run behind the next epoch's Spark job, in the next head's task (design rule 12). The head of
    epoch k aligns it and leaves its commit to the head of k+1, which adopts k's complete
    attempt, commits it in a thread while k+1's Spark job runs, and lands it before aligning
    k+1; if k does not commit, k+1's attempt is aborted and that head fails naming epoch k. The
    batch's last epoch, and one that decides termination, commit in their own task.

    ``attempt_retries``: how many times an epoch's head runs an attempt again in its own process
    when its Spark job failed in some partitions (their reports missing), before it fails the
    task for Airflow to retry: the coordinators are told which partitions failed and go on (not
    reset to the checkpoint, as a new task process would be), the new attempt gets the same
    inbox. Off (0) by default: Airflow's retries take every failure.

    ``approve_publication`` (off by default; a safeguard no run conf switches off): nothing of
    a job is published before a person approved the data itself. ``finish`` takes the final
    checkpoint and stages every output (and the per-epoch outputs, held back until then) as
    versions no reader sees, with their review (rows, schema, data checks, the difference from
    the published version); ``review`` asks (the standard provider's human-in-the-loop operator,
    deferred: no worker slot) one of ``approvers`` (user ids; the user who triggered the run is
    not one unless ``allow_self_approval``), for up to ``approval_timeout`` seconds (a day by
    default; ``ITERATIONS_APPROVAL_TIMEOUT`` overrides it); ``publish`` switches what was staged
    (one switch and one asset event per output) when approved, and otherwise deletes it: nothing
    visible changed, and triggering the DAG again with the same job_id asks again.

    ``schedule``: a cron or timetable, or Assets (``iterations.assets.input_asset``: run when the
    input arrives). ``dated_batches`` (default: True when there is a schedule): each run is the
    batch of a date (include.runs.schedule: a checkpoint log of its own, warm-started from the batch
    before it, its outputs under ``<output_path>/<date>``; the params ``recompute`` and
    ``batch_date``); False: every run goes on with the one job, as an unscheduled DAG's do (an
    incremental job whose asset events say more input arrived). A DAG scheduled on Assets that
    waits for its input (``wait_for_input``) never waits: an epoch with no input ends the batch
    (its later tasks, the finish and the continuation skipped), and the next event starts the next.

    ``lineage_parents``: the OpenLineage jobs, besides the DAG's own runs and tasks, a run's conf
    may name as its parent (the provider's ``openlineage`` entry): (namespace, job name pattern)
    pairs, ``fnmatch`` patterns (``("scheduler", "nightly.*")``). None by default: a run triggered
    through the API server with another parent is refused, naming it (iterations.closed_conf).
    Kept in a hidden, constant param (``lineage_parents``) for the API server to read."""
    from include.checks import load_checks_file
    from include.contract import LINEAGE_PARENTS_PARAM, check_lineage_parents
    from include.store import LOCATION_PARAMS, dag_roots
    from iterations.assets import outputs_alias
    from iterations.operators.continuation import ContinuationOperator
    from iterations.operators.epoch import (
        EpochCommitOperator,
        EpochHeadOperator,
        FinishOperator,
        PublicationReviewOperator,
        PublishOperator,
    )
    from iterations.sensors.alignment import AlignmentSensor
    from iterations.sensors.input import InputSensor

    params = own_locations(params, dag_id)
    if wait_for_input:  # input that arrives while the job runs: no epoch is recomputed from a fixed input
        params = {k: v for k, v in params.items() if k != "verify_epoch"}
    if body_param_names is None:
        declared = body_params(body)
        params = {**declared, **params}
        body_param_names = tuple(declared)
    # an override for trying things out and for tests: smaller batches, same DAG files
    epochs_per_batch = EPOCHS_PER_BATCH.get() or epochs_per_batch
    if epochs_per_batch < 1:
        raise ValueError(f"epochs_per_batch must be >= 1, got {epochs_per_batch}")
    if isinstance(attempt_retries, bool) or not isinstance(attempt_retries, int) or attempt_retries < 0:
        raise ValueError(f"attempt_retries must be an integer >= 0, got {attempt_retries!r}")
    if approve_publication:
        from iterations.operators.review import check_approvers

        approvers = check_approvers(approvers)
        approval_timeout = APPROVAL_TIMEOUT.get() or approval_timeout
        if isinstance(approval_timeout, bool) or not isinstance(approval_timeout, (int, float)) or \
                not 0 < approval_timeout < float("inf"):
            raise ValueError(f"approval_timeout must be a number of seconds > 0, got {approval_timeout!r}")
    lineage_parents = check_lineage_parents(lineage_parents)
    scheduled = schedule is not None if dated_batches is None else bool(dated_batches)
    # an input-driven DAG: its next asset event, not a sensor, starts the epochs of new input
    end_batch_without_input = wait_for_input and _on_assets(schedule)
    checks = load_checks_file(os.path.join(PROJECT_ROOT, checks_file)) if checks_file else None
    # where a run's params may point: the directories/prefixes of the defaults, the embedded
    # local directory, and the deployment's ITERATIONS_ALLOWED_ROOTS (include.store)
    defaults = {k: getattr(params.get(k), "value", None) for k in LOCATION_PARAMS}
    allowed_roots = dag_roots(defaults)  # the rule the Iterations view applies too
    common = {"body": body, "body_param_names": body_param_names, "aws_conn_id": aws_conn_id, "scheduled": scheduled,
              "reviewed": approve_publication,
              "checks": checks, "allowed_roots": allowed_roots, "allow_take_over": allow_take_over,
              "relax_checks": relax_checks, "lease_wait": lease_wait, "output_root": defaults["output_path"],
              "lineage_parents": lineage_parents,
              "checkpoint_roots": [defaults["checkpoint_root"]] if defaults["checkpoint_root"] else []}
    if allow_take_over:
        params = {**params, "take_over": param(
            False, type="boolean",
            description="Continue a job that belongs to another owner (another DAG, body, input or output "
                        "path) and make it this DAG's. Off: such a run is refused naming the owner.")}
    if lineage_parents:  # hidden in the trigger form (const), and no run may change it
        params = {**params, LINEAGE_PARENTS_PARAM: param(
            lineage_parents, type="array", const=lineage_parents,
            description="Set by the DAG's author: the OpenLineage jobs (namespace, job name pattern) besides this "
                        "DAG's own that a run's conf may name as its parent (its openlineage entry).")}
    # overrides for tests (the fault sweep): seconds between a failed task's tries, and how many
    retry_delay = RETRY_DELAY_SECONDS.get()
    retries = RETRIES.get() if RETRIES.is_set() else retries
    # the deployment's overrides (benchmarks, tests): ITERATIONS_COMMIT_IN_HEAD, _OVERLAP_COMMITS=1 or 0
    commit_in_head = _overridden(COMMIT_IN_HEAD, commit_in_head)
    overlap_commits = _overridden(OVERLAP_COMMITS, overlap_commits)
    if overlap_commits and not commit_in_head:
        how = f" ({COMMIT_IN_HEAD.name}={COMMIT_IN_HEAD.get()})" if COMMIT_IN_HEAD.get() else ""
        raise ValueError(f"overlap_commits needs commit_in_head, which is off{how}: with overlap_commits the head "
                         "of each epoch commits the epoch before it")
    if overlap_commits and wait_for_input:
        raise ValueError("overlap_commits cannot be used with wait_for_input: an epoch that waits for input would hold "
                         "the commit of the epoch before it")
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=start_date,
        catchup=False,  # `airflow backfill create` runs past dates on request
        max_active_runs=1,  # one batch of a job at a time, dates in order
        # the params are set once the tasks exist: Airflow deep-copies a DAG's params into every
        # operator, once per class of its hierarchy, and own_params drops the copies again
        params=None,
        tags=["iterations", body, *tags],
        doc_md=doc_md,
        default_args={"retries": retries, "retry_delay": dt.timedelta(seconds=retry_delay)},
    ) as dag:
        previous = previous_head = None
        for i in range(epochs_per_batch):
            # with commit_in_head an epoch group's commit is skipped when its head committed
            after_previous = {"trigger_rule": "none_failed"} if commit_in_head and i else {}
            with TaskGroup(f"epoch_{i}", tooltip=f"epoch {i} of the batch") as group:
                head = EpochHeadOperator(task_id="run", index=i, spark_mode=spark_mode, spark_conn_id=spark_conn_id,
                                         commit_in_head=commit_in_head, attempt_retries=attempt_retries,
                                         overlap_commits=overlap_commits, last=i == epochs_per_batch - 1,
                                         **({} if wait_for_input else after_previous), **common)
                align = AlignmentSensor(task_id="align", index=i, head_task_id=head.task_id, **common)
                commit = EpochCommitOperator(task_id="commit", index=i, head_task_id=head.task_id,
                                             align_task_id=align.task_id, **common)
                head >> align >> commit
                first = head
                if wait_for_input:
                    first = InputSensor(task_id="wait_input", index=i, timeout=input_timeout,
                                        end_batch_without_input=end_batch_without_input,
                                        poll_interval=INPUT_POLL_SECONDS.get(),
                                        **after_previous, **common)
                    first >> head
            if previous is not None:
                previous >> group
                if commit_in_head:
                    previous_head >> first
            previous, previous_head = group, head
        finish = FinishOperator(task_id="finish", trigger_rule="none_failed", spark_mode=spark_mode,
                                spark_conn_id=spark_conn_id,
                                outlets=[] if approve_publication else [outputs_alias(dag_id)],
                                approval=approve_publication, **common)
        continuation = ContinuationOperator(task_id="continue", trigger_dag_id=dag_id, **common)
        previous >> finish >> continuation
        if approve_publication:  # write, audit, publish: finish stages, review asks, publish switches
            review = PublicationReviewOperator(task_id="review", finish_task_id=finish.task_id, approvers=approvers,
                                               allow_self_approval=allow_self_approval,
                                               response_timeout=dt.timedelta(seconds=approval_timeout))
            publish = PublishOperator(task_id="publish", trigger_rule="all_done", finish_task_id=finish.task_id,
                                      review_task_id=review.task_id, outlets=[outputs_alias(dag_id)], **common)
            finish >> review >> publish >> continuation
            continuation.trigger_rule = "none_failed"  # after a publish skipped (nothing was staged)
        if commit_in_head:  # after the last head has ended, not only once it skipped its commit
            previous_head >> finish
    dag.params = ParamsDict(dict(params))  # converted and validated as in DAG(params=...)
    return dag
