"""Hook that runs one recorded attempt (an epoch or the finish step) as a Spark job.

Modes:
* ``connect`` (default): a warm session through Spark Connect. The URL comes from the Spark
  Connect connection (``spark_connect_default``, host and port); without one, the embedded
  server on loopback is started once and shared (``spark_jobs.connect_server``).
* ``submit``: ``spark-submit spark_jobs/epoch.py`` through the apache-spark provider's
  SparkSubmitHook and its ``spark_default`` connection (the conventional cluster path).

In connect mode the attempts of one batch (a DAG run) of a job share a Spark Connect session,
whose id is derived from the store, the job and the batch; its Spark jobs carry the attempt id
as a tag. Sharing it keeps what a session pays for once warm from epoch to epoch: the server's
Python workers for the session (seconds to start for a new session's first Python read, a
fraction of that after), the session's registered data sources. A retry of the task (its earlier try's
process died, the Spark job may still be running on the server) finds the session again and
interrupts the earlier attempt's jobs by their tag before it runs the epoch again
(``interrupt``): the same epoch never runs twice at once. If the batch's session is gone (the
server closed it after its idle time-out: a closed session id cannot be used again), the
attempt runs in a session of its own, derived from its attempt id, which ``interrupt`` also
reaches.

Within one process (``airflow dags test`` runs every task in one), the attempts of a batch also
share one ``EpochExecutor``, which keeps the static input loaded and hands the variables the
tail wrote to the next epoch when it restores exactly that checkpoint (``EpochExecutor``,
``handoff``); a task in a process of its own starts from the store.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import threading
import uuid
import weakref
from collections import OrderedDict
from typing import Any

from airflow.sdk import BaseHook

from include.process import PATH

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
    """The Spark Connect session of an attempt that cannot use its batch's session: any process
    can find it again."""
    return str(uuid.uuid5(_SESSION_NAMESPACE, attempt_id))


def batch_session_id(plan) -> str | None:
    """The Spark Connect session the attempts of a batch of a job share (None: the plan names
    no batch)."""
    if not plan.batch_id:
        return None
    key = json.dumps(["batch", plan.store, plan.job_id, plan.batch_id], sort_keys=True, default=str)
    return str(uuid.uuid5(_SESSION_NAMESPACE, key))


# (server URL, session id) -> (session, executor): the executors of this process, most recent
# last; a few are kept (one per batch running here), the oldest released beyond that
_EXECUTORS: "OrderedDict[tuple[str, str], tuple[Any, Any]]" = OrderedDict()
_EXECUTORS_LOCK = threading.Lock()
_MAX_EXECUTORS = 4


def _executor_for(url: str, session_id: str, spark, store_options: dict[str, Any]):
    """This process's executor for a session (made on first use, with the warm-session
    handoff)."""
    from spark_jobs.epoch import EpochExecutor

    released = []
    with _EXECUTORS_LOCK:
        key = (url, session_id)
        entry = _EXECUTORS.get(key)
        if entry is None or entry[1].store_options != dict(store_options):
            if entry is not None:
                released.append(entry[1])
            entry = (spark, EpochExecutor(spark, store_options, handoff=True, shared=True))
            _EXECUTORS[key] = entry
        _EXECUTORS.move_to_end(key)
        while len(_EXECUTORS) > _MAX_EXECUTORS:
            released.append(_EXECUTORS.popitem(last=False)[1][1])
    for executor in released:
        _release(executor)
    return entry


def _forget_executor(url: str, session_id: str) -> None:
    """Drop (and release) a session's executor: after a failed attempt, the next one starts
    from the store."""
    with _EXECUTORS_LOCK:
        entry = _EXECUTORS.pop((url, session_id), None)
    if entry is not None:
        _release(entry[1])


def _release(executor) -> None:
    try:
        executor.release()
    except Exception:  # the session is gone: so is what it held
        pass


# The Spark Connect clients this process opened, closed at exit: a client whose session the
# server closed can be left in reference cycles (the error that said so), and a gRPC channel
# the collector closes only during interpreter shutdown blocks the exit.
_CLIENTS: "weakref.WeakSet[Any]" = weakref.WeakSet()


@atexit.register
def _close_clients() -> None:
    for client in list(_CLIENTS):
        try:
            client.close()
        except Exception:
            pass


def _session_closed(error: Exception) -> bool:
    """Whether a Spark Connect call failed because the session is gone: closed by the server
    (idle time-out), or the server restarted (a new server answers SESSION_CHANGED; pyspark
    4.3's client then closes itself and reports NO_ACTIVE_SESSION instead, on this call and on
    every later one)."""
    text = str(error)
    return any(s in text for s in ("SESSION_CLOSED", "SESSION_CHANGED", "NO_ACTIVE_SESSION"))


def _usable(spark) -> bool:
    """Whether a Spark Connect session can be used (one round trip); a session that is gone is
    stopped, which also stops pyspark from taking it for the process's default one."""
    try:
        spark.conf.get("spark.sql.shuffle.partitions")
        return True
    except Exception as e:
        if not _session_closed(e):
            raise
    try:
        spark.stop()
    except Exception:
        pass
    return False


def attempt_tag(attempt_id: str) -> str:
    return f"iterations-{attempt_id}"


def epoch_script() -> str:
    """The file spark-submit runs: spark_jobs/epoch.py, where the project is installed (found
    without importing it: it imports pyspark)."""
    import importlib.util

    return importlib.util.find_spec("spark_jobs.epoch").origin


class SparkEpochHook(BaseHook):
    conn_name_attr = "conn_id"
    hook_name = "Spark epoch"

    def __init__(self, mode: str = "connect", conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if mode not in SPARK_MODES:
            raise ValueError(f"spark mode {mode!r} is not supported; accepted: {', '.join(SPARK_MODES)}")
        self.mode = mode
        self.conn_id = conn_id or ("spark_connect_default" if mode == "connect" else "spark_default")
        self._submitting: tuple[str, Any] | None = None  # (attempt id, its SparkSubmitHook) while it runs

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

    def _session(self, session_id: str, url: str | None = None):
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(f"{url or self.connect_url()}/;session_id={session_id}").create()
        _CLIENTS.add(spark.client)
        return spark

    def _attempt_session(self, url: str, plan) -> tuple[Any, str]:
        """(session, its id) for an attempt: its batch's session (the client this process kept,
        else a new one: the server may have restarted since), or, if the server has closed that
        session, one of the attempt's own."""
        batch = batch_session_id(plan)
        if batch is not None:
            with _EXECUTORS_LOCK:
                entry = _EXECUTORS.get((url, batch))
            if entry is not None:
                if _usable(entry[0]):
                    return entry[0], batch
                _forget_executor(url, batch)  # what it kept went with the session
                self.log.warning("the Spark Connect session of batch %s is gone (closed, or the server restarted): "
                                 "attempt %s opens it again and reads its variables from the checkpoint",
                                 plan.batch_id, plan.attempt_id)
            spark = self._session(batch, url)
            if _usable(spark):
                return spark, batch
            self.log.warning("the Spark Connect session of batch %s is closed: attempt %s runs in a "
                             "session of its own", plan.batch_id, plan.attempt_id)
        session_id = attempt_session_id(plan.attempt_id)
        return self._session(session_id, url), session_id

    def _run_connect(self, plan, store, store_options) -> None:
        url = self.connect_url()
        spark, session_id = self._attempt_session(url, plan)
        spark, executor = _executor_for(url, session_id, spark, store_options)
        spark.addTag(attempt_tag(plan.attempt_id))
        try:
            executor.run(plan, store)
        except BaseException:
            _forget_executor(url, session_id)  # nothing of a failed attempt is handed on
            raise
        finally:
            spark.clearTags()
        if plan.kind == "final":  # the job's last Spark step in this batch
            _forget_executor(url, session_id)

    def interrupt(self, plan) -> list[str]:
        """Interrupt whatever Spark work of an attempt (its plan) still runs (connect mode), in
        its batch's session and in a session of its own; returns the ids of the operations
        interrupted. In submit mode, the attempt's spark-submit when this hook runs it (its
        driver killed, on the cluster too); an earlier process's is out of reach, and the
        attempt stays fenced by its id (its files can never be committed)."""
        if self.mode != "connect":
            submitting = self._submitting
            if submitting is not None and submitting[0] == plan.attempt_id:
                self.log.warning("attempt %s: killing its spark-submit", plan.attempt_id)
                submitting[1].on_kill()
            return []
        url = self.connect_url()
        interrupted: list[str] = []
        for session_id in (batch_session_id(plan), attempt_session_id(plan.attempt_id)):
            if session_id is None:
                continue
            try:
                interrupted += self._session(session_id, url).interruptTag(attempt_tag(plan.attempt_id))
            except Exception as e:  # the session is gone (closed, server restarted): nothing runs there
                self.log.info("attempt %s: no Spark Connect session %s to interrupt (%s)", plan.attempt_id,
                              session_id, type(e).__name__)
        if interrupted:
            self.log.warning("attempt %s: interrupted %d Spark operation(s) still running from an earlier try",
                             plan.attempt_id, len(interrupted))
        return interrupted

    def _run_submit(self, plan, checkpoint_root: str, store_options: dict[str, Any]) -> None:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        args = submit_args(plan, checkpoint_root, store_options)
        env: dict[str, str] = {}
        if shutil.which("spark-submit") is None:  # not on PATH: the one pyspark installed next to Python
            env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), PATH.get()])
        for key, var in (("access_key_id", "AWS_ACCESS_KEY_ID"), ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                         ("session_token", "AWS_SESSION_TOKEN")):
            if store_options.get(key):
                env[var] = store_options[key]  # passed in the environment, never on the command line
        from include.contract import driver_memory
        from spark_jobs.session import driver_java_options

        memory, why = driver_memory(plan.input_spec(), store_options)  # the epoch's driver: from its input's size
        self.log.info("epoch %d of job %s: %s", plan.epoch, plan.job_id, why)
        hook = SparkSubmitHook(
            conn_id=self.conn_id,
            name=f"iterations-{plan.job_id}-{plan.checkpoint_id}",
            application_args=args,
            env_vars=env,
            conf={"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": driver_java_options()},
            driver_memory=memory,
        )
        self._submitting = (plan.attempt_id, hook)
        try:
            hook.submit(epoch_script())
        finally:
            self._submitting = None
