"""Data checks between rounds: Great Expectations 1.x suites over what an attempt wrote,
validated before its checkpoint commits.

Cheap by construction. The tail computes a profile of every dataset it writes in the pass
that writes it (``spark_jobs.storeio._Profile``: records, nulls per column; for numeric
columns the non-finite values and the min, max and sum of the finite ones; duplicate keys);
each partition's profile travels in its report. The commit step combines the reports into one
row, the attempt's **profile**, and validates that row with Great Expectations' pandas engine:
no Spark job, no second pass over the data, milliseconds per epoch.

Columns of the profile (``D`` a dataset the attempt wrote: a head's feedback, an epoch output,
or, for the final checkpoint, an output; ``C`` one of its columns)::

    epoch, kind                    the checkpoint id, "epoch" or "final"
    feedback                       feedback records (all heads)
    <metric>, <metric>.nonfinite   each metric of the epoch, and 1 if it is NaN or infinite
    <fact>                         scalars the body reported (StepResult.facts), e.g. input_nodes
    D.rows, D.schema               records; the schema as "name type, name type"
    D.duplicate_keys               (heads) records whose key (the head's key columns) an
                                   earlier record has too
    D.C.nulls                      null values
    D.C.nonfinite, D.C.min, D.C.max, D.C.sum    (numeric C, or an array of numbers: over its elements)
                                                NaN/inf count; min/max/sum of the finite values

An expectation is a Great Expectations configuration plus a name: ``{"name", "type",
"kwargs", "severity", "description"}``. ``severity`` is Great Expectations' own: ``critical``
(the default) blocks the commit; ``warning`` and ``info`` are reported and kept, and do not
block. A ``column`` may be a glob (``centroids.*.nonfinite``): the expectation applies to each
matching column. Parameters (``{"$PARAMETER": "previous__l1_delta + 1e-9"}``) are the parent
checkpoint's metrics as ``previous__<metric>``. An expectation whose columns or parameters the
attempt does not have (the final checkpoint has no metrics; epoch 0 no parent) is reported as
skipped (see below for what is an error instead).

The suite of an attempt: the runtime's (metrics finite; each head's schema the one it was
restored with), then the body's (``IterationBody.expectations``),
then the job's (``JobConfig.checks``: a DAG's checks file, then the run's ``checks`` param). A
later entry with the name of an earlier one replaces the keys it gives (``{"name":
"rank_mass", "severity": "warning"}`` only downgrades it; ``"enabled": false`` removes it).

What an expectation may say is an allow-list (``EXPECTATION_TYPES``: per type, the kwargs it
takes and the values each accepts), enforced on every entry, wherever it comes from (a run's
``checks`` param, a DAG's checks file, a body, the runtime) when settings are parsed, when
entries are merged and again when a suite is validated. Nothing Great Expectations evaluates as
code or as an expression is accepted (``row_condition``, ``condition_parser``...), except a
bound's ``$PARAMETER``, restricted to arithmetic (numbers, parameter names, ``+ - * /``, unary
minus, parentheses; at most ``MAX_PARAMETER_LENGTH`` characters), checked here before Great
Expectations parses it.

A run's conf is untrusted: ``run_settings`` layers it over the DAG author's settings and, unless
the DAG lets runs relax its checks, refuses a run that turns the checks off or touches an
expectation of the runtime, the body or the DAG's checks file (a run may add new ones).

A column no checkpoint can have is a configuration error, found when the job starts
(``check_columns``, from the body's metadata); at validation, a column of a dataset the profile
has but that dataset does not (``ranks.rnk.min``; ``ranks.node.min`` of a string column) is one
too. What is legitimately absent (a column of the other kind of checkpoint, a parameter epoch 0
does not have, a statistic of an empty dataset) is reported as skipped.

Modules: ``allowlist`` (what an expectation may say), ``settings`` (specs, checks files, run
confs), ``profile`` (the profile row, the runtime's expectations), ``columns`` (which columns a
profile can have), ``validate`` (outcomes and the report), ``gx`` (Great Expectations itself).
Nothing here imports Spark or Airflow; Great Expectations is imported when a suite runs.
"""

from include.checks.allowlist import (
    BLOCKING,
    EXPECTATION_KWARGS,
    EXPECTATION_TYPES,
    MAX_PARAMETER_LENGTH,
    SEVERITIES,
    check_expectation,
    parameter_expression_problem,
)
from include.checks.columns import NUMERIC_TYPES, check_columns
from include.checks.gx import WARM_UP_NICENESS, import_gx, warm_up, yield_cpu
from include.checks.profile import combine, expand, profile_row, runtime_expectations, schema_string
from include.checks.specs import (
    CheckSettings,
    ExpectationSpec,
    finite_metric_name,
    load_checks_file,
    locked_expectation_names,
    merge,
    run_settings,
    schema_stable_name,
)
from include.checks.validate import CheckReport, Outcome, validate

__all__ = [
    "BLOCKING",
    "CheckReport",
    "CheckSettings",
    "EXPECTATION_KWARGS",
    "EXPECTATION_TYPES",
    "ExpectationSpec",
    "MAX_PARAMETER_LENGTH",
    "NUMERIC_TYPES",
    "Outcome",
    "SEVERITIES",
    "WARM_UP_NICENESS",
    "check_columns",
    "check_expectation",
    "combine",
    "expand",
    "finite_metric_name",
    "import_gx",
    "load_checks_file",
    "locked_expectation_names",
    "merge",
    "parameter_expression_problem",
    "profile_row",
    "run_settings",
    "runtime_expectations",
    "schema_stable_name",
    "schema_string",
    "validate",
    "warm_up",
    "yield_cpu",
]
