"""Hook that runs one recorded attempt (an epoch or the finish step) as a Spark job.

Modes:
* ``connect`` (default): a warm session through Spark Connect. The URL comes from the Spark
  Connect connection (``spark_connect_default``, host and port); without one, the embedded
  server on loopback is started once and shared (``spark_jobs.connect_server``).
* ``submit``: ``spark-submit spark_jobs/epoch.py`` through the apache-spark provider's
  SparkSubmitHook and its ``spark_default`` connection (the conventional cluster path).

In connect mode every attempt runs in a Spark Connect session of its own, whose id is derived
from the attempt id, and its Spark jobs carry the attempt id as a tag. A retry of the task
(its earlier try's process died, the Spark job may still be running on the server) can so
reconnect to the earlier attempt's session and interrupt its jobs before it runs the epoch
again (``interrupt``): the same epoch never runs twice at once.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from typing import Any

from airflow.sdk import BaseHook

SPARK_MODES = ("connect", "submit")
_SESSION_NAMESPACE = uuid.UUID("5b0f6c1e-7d0a-4f5e-9c55-2f1d8a3c9e41")


def submit_args(plan, checkpoint_root: str, store_options: dict[str, Any]) -> list[str]:
    """The epoch application's arguments for spark-submit: a list, one element per value (the
    provider's hook runs spark-submit without a shell), no credentials (they go in the
    environment)."""
    args = ["--checkpoint-root", checkpoint_root, "--job-id", plan.job_id,
            "--checkpoint-id", str(plan.checkpoint_id), "--attempt-id", plan.attempt_id]
    if store_options.get("endpoint_url"):
        args += ["--endpoint-url", store_options["endpoint_url"]]
    return args


def attempt_session_id(attempt_id: str) -> str:
    """The Spark Connect session an attempt runs in: any process can find it again."""
    return str(uuid.uuid5(_SESSION_NAMESPACE, attempt_id))


def attempt_tag(attempt_id: str) -> str:
    return f"iterations-{attempt_id}"
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class SparkEpochHook(BaseHook):
    conn_name_attr = "conn_id"
    hook_name = "Spark epoch"

    def __init__(self, mode: str = "connect", conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if mode not in SPARK_MODES:
            raise ValueError(f"spark mode {mode!r} is not supported; accepted: {', '.join(SPARK_MODES)}")
        self.mode = mode
        self.conn_id = conn_id or ("spark_connect_default" if mode == "connect" else "spark_default")

    def connect_url(self) -> str:
        try:
            conn = self.get_connection(self.conn_id)
        except Exception:
            from spark_jobs import connect_server

            url = connect_server.ensure()
            self.log.info("no connection %r: using the embedded Spark Connect server %s", self.conn_id, url)
            return url
        url = f"sc://{conn.host}:{conn.port or 15002}"
        self.log.info("Spark Connect server from connection %r: %s", self.conn_id, url)
        return url

    def run_attempt(self, plan, store, store_options: dict[str, Any], checkpoint_root: str) -> None:
        if self.mode == "connect":
            self._run_connect(plan, store, store_options)
        else:
            self._run_submit(plan, checkpoint_root, store_options)

    def _session(self, attempt_id: str):
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(f"{self.connect_url()}/;session_id={attempt_session_id(attempt_id)}").create()

    def _run_connect(self, plan, store, store_options) -> None:
        from spark_jobs.epoch import EpochExecutor

        spark = self._session(plan.attempt_id)
        spark.addTag(attempt_tag(plan.attempt_id))
        try:
            EpochExecutor(spark, store_options).run(plan, store)
        finally:
            spark.clearTags()

    def interrupt(self, attempt_id: str) -> list[str]:
        """Interrupt whatever Spark work of an attempt still runs (connect mode); returns the
        ids of the operations interrupted. In submit mode there is nothing to reach: the
        attempt stays fenced by its id (its files can never be committed)."""
        if self.mode != "connect":
            return []
        try:
            interrupted = self._session(attempt_id).interruptTag(attempt_tag(attempt_id))
        except Exception as e:  # the session is gone (server restarted): nothing runs there
            self.log.info("attempt %s: no Spark Connect session to interrupt (%s)", attempt_id, type(e).__name__)
            return []
        if interrupted:
            self.log.warning("attempt %s: interrupted %d Spark operation(s) still running from an earlier try",
                             attempt_id, len(interrupted))
        return list(interrupted)

    def _run_submit(self, plan, checkpoint_root: str, store_options: dict[str, Any]) -> None:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        args = submit_args(plan, checkpoint_root, store_options)
        env = {"PYTHONPATH": PROJECT_ROOT}
        if shutil.which("spark-submit") is None:  # not on PATH: the one pyspark installed next to Python
            env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        for key, var in (("access_key_id", "AWS_ACCESS_KEY_ID"), ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                         ("session_token", "AWS_SESSION_TOKEN")):
            if store_options.get(key):
                env[var] = store_options[key]  # passed in the environment, never on the command line
        hook = SparkSubmitHook(
            conn_id=self.conn_id,
            name=f"iterations-{plan.job_id}-{plan.checkpoint_id}",
            application_args=args,
            env_vars=env,
            conf={"spark.ui.enabled": "false"},
        )
        hook.submit(os.path.join(PROJECT_ROOT, "spark_jobs", "epoch.py"))
