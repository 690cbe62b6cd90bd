"""Every environment variable the project reads, declared once: its name, its kind, its default,
who sets it and what it does. Code reads a variable only through its ``Setting`` here
(``ALLOWED_ROOTS.get()``), never ``os.environ`` itself; docs/configuration.md lists the same
variables, checked against ``SETTINGS`` by tests/unit/process/test_settings.py.

Kinds: ``text``; ``list`` (comma-separated, blanks dropped); ``int`` and ``float``; ``switch``
(``1``/``true``/``yes`` or ``0``/``false``/``no``, anything else a ConfigError naming the
variable and the value); ``flag`` (``1``/``true``/``yes`` turn it on, anything else leaves it
off). An empty value is the same as unset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from include.errors import ConfigError

KINDS = ("text", "list", "int", "float", "switch", "flag")
#: who sets a variable: a deployment's operator, a Python or shell caller, the test suite only,
#: or the project itself (for its own processes)
AUDIENCES = ("deployer", "caller", "tests", "internal")
_ON = ("1", "true", "yes")
_OFF = ("0", "false", "no")


@dataclass(frozen=True)
class Setting:
    """One environment variable. ``default``: the value when unset (already parsed)."""

    name: str
    kind: str
    default: Any
    audience: str
    doc: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.audience not in AUDIENCES:
            raise ValueError(f"setting {self.name}: kind {self.kind!r} of {KINDS}, audience {self.audience!r} "
                             f"of {AUDIENCES}")

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's text, stripped; None when it is unset or empty."""
        value = (os.environ if environ is None else environ).get(self.name)
        return None if value is None else (value.strip() or None)

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        return self.raw(environ) is not None

    def get(self, environ: Mapping[str, str] | None = None) -> Any:
        """The variable's value, parsed by its kind; ``default`` when unset. A value of the wrong
        kind is a ConfigError that names the variable and the value."""
        text = self.raw(environ)
        if text is None:
            return self.default
        if self.kind == "text":
            return text
        if self.kind == "list":
            return [part.strip() for part in text.split(",") if part.strip()]
        if self.kind == "flag":
            return text.lower() in _ON
        if self.kind == "switch":
            if text.lower() in _ON:
                return True
            if text.lower() in _OFF:
                return False
            raise ConfigError(f"{self.name} must be 1 (or true/yes) or 0 (or false/no), got {text!r}")
        try:
            return int(text) if self.kind == "int" else float(text)
        except ValueError:
            raise ConfigError(f"{self.name}={text!r} is not {'an integer' if self.kind == 'int' else 'a number'}"
                              ) from None


SETTINGS: dict[str, Setting] = {}


def _declare(name: str, kind: str, default: Any, audience: str, doc: str) -> Setting:
    if name in SETTINGS:
        raise ValueError(f"setting {name} declared twice")
    SETTINGS[name] = setting = Setting(name, kind, default, audience, doc)
    return setting


# --- the deployment
ALLOWED_ROOTS = _declare("ITERATIONS_ALLOWED_ROOTS", "list", [], "deployer",
                         "Directories and s3:// roots a DAG run's input, output and checkpoint root may lie under.")
CHECKPOINT_ROOTS = _declare("ITERATIONS_CHECKPOINT_ROOTS", "list", [], "deployer",
                            "Checkpoint roots no output_path may overlap.")
TRUST_CONDITIONAL_WRITES = _declare("ITERATIONS_TRUST_CONDITIONAL_WRITES", "switch", False, "deployer",
                                    "Take every S3 store to honour If-None-Match: * and never probe it.")
SPARK_MODE = _declare("ITERATIONS_SPARK_MODE", "text", "connect", "deployer",
                      "Default of iteration_dag(spark_mode=...): connect or submit.")
LOCAL_DIR = _declare("ITERATIONS_LOCAL_DIR", "text", None, "deployer",
                     "The embedded local directory (default <project>/.local).")
SPARK_CONNECT_PORT = _declare("ITERATIONS_SPARK_CONNECT_PORT", "int", 15002, "deployer",
                              "Port of the embedded Spark Connect server on 127.0.0.1.")
SPARK_CONNECT_DIR = _declare("ITERATIONS_SPARK_CONNECT_DIR", "text", None, "deployer",
                             "State directory of the embedded Spark Connect server.")
SPARK_CONNECT_MEMORY = _declare("ITERATIONS_SPARK_CONNECT_MEMORY", "text", None, "deployer",
                                "Heap of the embedded Spark Connect server (2g, 1536m).")
VIEW_AWS_CONN_ID = _declare("ITERATIONS_VIEW_AWS_CONN_ID", "text", "aws_default", "deployer",
                            "The Airflow connection the Iterations view opens S3 roots with.")
EPOCHS_PER_BATCH = _declare("ITERATIONS_EPOCHS_PER_BATCH", "int", None, "deployer",
                            "Overrides the epochs per batch of every iteration DAG.")
INPUT_POLL_SECONDS = _declare("ITERATIONS_INPUT_POLL_SECONDS", "float", 5.0, "deployer",
                              "Seconds between two looks for new input of the wait_input sensor.")
APPROVAL_TIMEOUT = _declare("ITERATIONS_APPROVAL_TIMEOUT", "float", None, "deployer",
                            "Overrides the approval_timeout (seconds) of every reviewed iteration DAG.")
COMMIT_IN_HEAD = _declare("ITERATIONS_COMMIT_IN_HEAD", "text", None, "deployer",
                          "1 or 0 (true, false): overrides iteration_dag(commit_in_head=...) of every iteration DAG.")
OVERLAP_COMMITS = _declare("ITERATIONS_OVERLAP_COMMITS", "text", None, "deployer",
                           "1 or 0 (true, false): overrides iteration_dag(overlap_commits=...) of every iteration DAG.")
COLLECT_AT_EXIT = _declare("ITERATIONS_COLLECT_AT_EXIT", "flag", False, "caller",
                           "Keep Python's garbage collection at interpreter exit (debugging).")

# --- the test suite
RETRIES = _declare("ITERATIONS_RETRIES", "int", None, "tests",
                   "Overrides the task retries of every iteration DAG.")
RETRY_DELAY_SECONDS = _declare("ITERATIONS_RETRY_DELAY_SECONDS", "float", 10.0, "tests",
                               "Seconds between a failed task's tries in every iteration DAG.")
FAILPOINTS = _declare("ITERATIONS_FAILPOINTS", "text", None, "tests", "Failure points: name[@key=value...]=action;...")
FAILPOINTS_FILE = _declare("ITERATIONS_FAILPOINTS_FILE", "text", None, "tests",
                           "A file the failure points are (also) read from, again whenever it changes.")
FAILPOINT_DIR = _declare("ITERATIONS_FAILPOINT_DIR", "text", None, "tests",
                         "Directory of the failure points' fired, held and release markers.")
S3_FAULTS = _declare("ITERATIONS_S3_FAULTS", "text", None, "tests", "Injected S3 faults: rate=, seed=, kinds=, lose_reply=.")
S3_FAULTS_LOG = _declare("ITERATIONS_S3_FAULTS_LOG", "text", None, "tests", "File each injected S3 fault is logged to.")
TRACE = _declare("ITERATIONS_TRACE", "text", None, "tests", "File the runtime appends trace events to (JSON lines).")
CLOCK_SKEW = _declare("ITERATIONS_CLOCK_SKEW", "float", 0.0, "tests",
                      "Seconds added to the informational wall-clock timestamps the runtime writes.")
TEST_DAG_GRANTS = _declare("ITERATIONS_TEST_DAG_GRANTS", "text", None, "tests",
                           "JSON user -> DAG ids of the test auth manager (tests/dags/dag_auth.py).")

# --- the project, for its own processes
DRIVER_PID = _declare("ITERATIONS_DRIVER_PID", "int", None, "internal", "The process the kill-driver action kills.")
DAGS_TEST_HANDOFF = _declare("ITERATIONS_DAGS_TEST_HANDOFF", "text", None, "internal",
                             "Where a continuation under `airflow dags test` hands the next batch's run over.")

# --- other programs' variables the project reads
SPARK_REMOTE = _declare("SPARK_REMOTE", "text", None, "caller", "Default of run_job --remote (sc://host:port).")
SPARK_MASTER = _declare("SPARK_MASTER", "text", None, "caller", "Master of a local session (default local[2]).")
SPARK_DRIVER_MEMORY = _declare("SPARK_DRIVER_MEMORY", "text", None, "deployer",
                               "Driver heap of a local session and of the embedded Spark Connect server.")
SPARK_UI_ENABLED = _declare("SPARK_UI_ENABLED", "text", "false", "caller", "spark.ui.enabled of a local session.")
SPARK_LOG_LEVEL = _declare("SPARK_LOG_LEVEL", "text", "ERROR", "caller", "Log level of a local session's SparkContext.")
PYSPARK_PYTHON = _declare("PYSPARK_PYTHON", "text", None, "caller", "Python of the Spark workers.")
PYSPARK_GATEWAY_PORT = _declare("PYSPARK_GATEWAY_PORT", "text", None, "internal",
                                "Set by spark-submit in the driver it launches (so its --master applies).")
AIRFLOW_HOME = _declare("AIRFLOW_HOME", "text", None, "caller", "Airflow home of ./run.sh demo.")
PATH = _declare("PATH", "text", "", "caller", "Where a spark-submit driver's tools are looked up.")
