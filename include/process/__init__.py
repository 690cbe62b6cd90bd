"""Process-level settings: environment variables, failure points, paths, preloading, lazy surfaces."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "failpoints": ["DRIVER_PID_ENV", "failpoint"],
    "interpreter_exit": ["skip_exit_collection"],
    "paths": ["LOCAL_DIR", "PROJECT_ROOT"],
    "preloading": ["parse_modules", "preload"],
    "settings": [
        "AIRFLOW_HOME", "APPROVAL_TIMEOUT", "COMMIT_IN_HEAD", "DAGS_TEST_HANDOFF", "EPOCHS_PER_BATCH",
        "INPUT_POLL_SECONDS", "OVERLAP_COMMITS", "PATH", "PYSPARK_GATEWAY_PORT", "PYSPARK_PYTHON", "RETRIES",
        "RETRY_DELAY_SECONDS", "SETTINGS", "SPARK_CONNECT_DIR", "SPARK_CONNECT_PORT", "SPARK_DRIVER_MEMORY",
        "SPARK_LOG_LEVEL", "SPARK_MASTER", "SPARK_MODE", "SPARK_REMOTE", "SPARK_UI_ENABLED", "VIEW_AWS_CONN_ID", "Setting",
    ],
    "surface": ["lazy_surface"],
})
