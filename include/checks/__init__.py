"""Data checks between rounds: Great Expectations 1.x suites over what an attempt wrote, before it commits."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "allowlist": [
        "BLOCKING", "EXPECTATION_KWARGS", "EXPECTATION_TYPES", "MAX_PARAMETER_LENGTH", "SEVERITIES",
        "check_expectation", "parameter_expression_problem"
    ],
    "columns": ["NUMERIC_TYPES", "check_columns"],
    "gx": ["WARM_UP_NICENESS", "import_gx", "warm_up", "yield_cpu"],
    "profile": ["combine", "expand", "profile_row", "runtime_expectations", "schema_string"],
    "report_view": ["CheckView", "check_view"],
    "specs": [
        "CheckSettings", "ExpectationSpec", "finite_metric_name", "load_checks_file",
        "locked_expectation_names", "merge", "run_settings", "schema_stable_name"
    ],
    "validation": ["CheckReport", "Outcome", "validate"],
})
