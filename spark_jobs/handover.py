"""What one process hands on to the next through a shared Spark Connect session.

An Airflow batch's epochs run in successive task processes on one Spark Connect session; what
an epoch's tail kept in Spark (its variables, local-checkpointed) and what the body's ``load``
returned (its static data) stay on the server for the next process to take over, named in the
session's configuration. ``EpochExecutor(shared=True)`` names and takes them over through a
``SessionHandover``; everything here is best effort: a relation, a view or a session that is gone
means reading the checkpoint or loading the input again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Any, Mapping

from include.epoch import EpochPlan
from spark_jobs.executor_errors import first_line

log = logging.getLogger("iterations")

_STATIC_VIEW = re.compile(r"iterations_static_[0-9a-f]{32}_\d+")


class SessionHandover:
    """The names one Spark Connect session holds for the next process: kept variables and
    static data."""

    def __init__(self, spark):
        self.spark = spark

    # --- kept variables ----------------------------------------------------------------------
    # A local checkpoint of a Spark Connect session is a relation the server holds for the
    # session, by id, until a client releases it or the session ends. A process that kept one
    # names it in the session's configuration (a key per job and head: the relation's id and
    # the digest of the object keys the tail wrote with it); the next process on the session
    # takes it over when its plan restores exactly those objects (the committed checkpoint), and
    # frees a named relation its plan does not restore (an aborted attempt's).

    @staticmethod
    def kept_key(job_id: str, head: str) -> str:
        """The session's configuration key that names a job's kept ``head``."""
        digest = hashlib.sha256(json.dumps([job_id, head]).encode()).hexdigest()[:32]
        return f"iterations.kept.{digest}"

    @staticmethod
    def _keys_digest(keys: frozenset[str]) -> str:
        return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()

    def name_kept(self, job_id: str, head: str, keys: frozenset[str], schema: str, checkpointed) -> None:
        """Name the relation ``checkpointed`` holds (the tail wrote ``keys`` with it); a local
        frame (rows the driver held) has nothing on the server: any older name is dropped."""
        relation = getattr(getattr(checkpointed, "_plan", None), "_relation_id", None)
        if relation is None:
            self.unname_kept(job_id, head)
            return
        value = json.dumps({"job": job_id, "head": head, "keys": self._keys_digest(keys), "schema": schema,
                            "relation": relation})
        try:
            self.spark.conf.set(self.kept_key(job_id, head), value)
        except Exception as e:  # the session is gone: nothing to hand on
            log.info("job %s: could not name the kept %r in the session (%s)", job_id, head, type(e).__name__)

    def unname_kept(self, job_id: str, head: str) -> None:
        try:
            self.spark.conf.unset(self.kept_key(job_id, head))
        except Exception:
            pass

    def take_over_kept(self, plan: EpochPlan, head: str, ds, keys: frozenset[str]) -> tuple[Any, Any] | None:
        """Take over the relation an earlier process named for this job and head, if it holds
        exactly the objects ``keys`` of ``ds`` (the checkpoint the plan restores): (the records,
        the relation's frame, to release), or None."""
        key = self.kept_key(plan.job_id, head)
        try:
            named = self._conf_json(key)
            if named is None:
                return None
            relation = str(named["relation"])
            matches = (named.get("job") == plan.job_id and named.get("head") == head and named.get("schema") == ds.schema
                       and named.get("keys") == self._keys_digest(keys))
        except (ValueError, KeyError, TypeError):
            self.unname_kept(plan.job_id, head)
            return None
        from pyspark.sql.connect.dataframe import DataFrame
        from pyspark.sql.connect.plan import CachedRemoteRelation

        frame = DataFrame(CachedRemoteRelation(relation, self.spark), self.spark)
        if not matches:  # kept by an attempt that never committed: freed (when ``frame`` goes)
            log.info("job %s %s %d: the %r kept in the session is not checkpoint %s's: freed", plan.job_id,
                     plan.kind, plan.checkpoint_id, head, plan.parent_id)
            self.unname_kept(plan.job_id, head)
            return None
        try:
            from pyspark.sql.types import StructType

            from spark_jobs.storeio import sized_for_joins

            columns = [f.name for f in StructType.fromJson(json.loads(ds.schema)).fields]
            records = sized_for_joins(frame.select(*columns), ds.size)
            records.schema  # one round trip: the server still holds the relation
        except Exception as e:
            log.info("job %s %s %d: the %r kept in the session is gone (%s)", plan.job_id, plan.kind,
                     plan.checkpoint_id, head, first_line(e))
            self.unname_kept(plan.job_id, head)
            return None
        log.info("job %s %s %d: %r taken over from the Spark Connect session (kept by the attempt that wrote "
                 "checkpoint %s)", plan.job_id, plan.kind, plan.checkpoint_id, head, plan.parent_id)
        return records, frame

    # --- static data -------------------------------------------------------------------------
    # What a body's ``load`` returned, for the next process on the session: each DataFrame as a
    # temporary view of the session (its plan, so Spark's cache of it still serves it), the
    # other values as JSON, under a key per body, params and input, with the input's version
    # (its files' names, sizes and times) when it was loaded. The next process takes them over
    # instead of loading again when the input is still that version; anything else (another
    # version, a value that is not plain JSON, a view gone) means loading.

    @staticmethod
    def static_key(plan: EpochPlan) -> str:
        """What identifies a job's static data: its body, params and input."""
        return json.dumps([plan.body["name"], plan.body.get("params"), plan.input], sort_keys=True, default=str)

    @staticmethod
    def static_conf_key(key: str) -> str:
        """The session's configuration key that names the static data of ``key``."""
        return f"iterations.static.{hashlib.sha256(key.encode()).hexdigest()[:32]}"

    def name_static(self, plan: EpochPlan, key: str, version: str | None, data: Mapping[str, Any]) -> None:
        from pyspark.sql.connect.dataframe import DataFrame

        conf_key = self.static_conf_key(key)
        digest = conf_key.rsplit(".", 1)[1]
        frames, values = {}, {}
        for i, (name, value) in enumerate(sorted(data.items(), key=lambda item: str(item[0]))):
            if not isinstance(name, str):
                return
            if isinstance(value, DataFrame):
                frames[name] = f"iterations_static_{digest}_{i}"
            elif handed_on(value):
                values[name] = value
            else:
                log.info("job %s: the static data of body %r is not handed on to the next process: %r is a %s, "
                         "not a DataFrame or a JSON value (a number, a string, a boolean, None, or lists or dicts "
                         "of them)", plan.job_id, plan.body["name"], name, type(value).__name__)
                return
        try:
            for name, view in frames.items():
                data[name].createOrReplaceTempView(view)
            self.spark.conf.set(conf_key, json.dumps(
                {"key": key, "version": version, "frames": frames, "values": values}, sort_keys=True))
        except Exception as e:  # the session is gone: nothing to hand on
            log.info("job %s: could not name the static data in the session (%s)", plan.job_id, type(e).__name__)

    def static_named(self, plan: EpochPlan, key: str, version: str | None) -> dict[str, Any] | None:
        """The static data an earlier process named for ``key`` and this version of the input,
        or None."""
        try:
            named = self._conf_json(self.static_conf_key(key))
            if named is None:
                return None
            frames, values = dict(named["frames"]), dict(named["values"])
            valid = named["key"] == key and all(
                isinstance(n, str) and isinstance(v, str) and _STATIC_VIEW.fullmatch(v) for n, v in frames.items()) \
                and all(isinstance(n, str) and handed_on(v) for n, v in values.items())
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            self.unname_static(key)
            return None
        if named.get("version") != version:
            log.info("job %s %s %d: the input changed since the static data in the session was loaded: loading it "
                     "again", plan.job_id, plan.kind, plan.checkpoint_id)
            self.unname_static(key)
            return None
        try:
            data: dict[str, Any] = {name: self.spark.table(view) for name, view in frames.items()}
            for df in data.values():
                df.schema  # one round trip each: the session still holds the view
        except Exception as e:
            log.info("job %s %s %d: the static data named in the session is gone (%s): loading it again",
                     plan.job_id, plan.kind, plan.checkpoint_id, first_line(e))
            self.unname_static(key)
            return None
        return {**data, **values}

    def unname_static(self, key: str) -> None:
        conf_key = self.static_conf_key(key)
        try:
            named = self._conf_json(conf_key)
        except ValueError:  # not JSON: no view to drop
            named = None
        frames = named.get("frames") if isinstance(named, dict) else None
        try:
            self.spark.conf.unset(conf_key)
            for view in frames.values() if isinstance(frames, dict) else ():
                if isinstance(view, str) and _STATIC_VIEW.fullmatch(view):  # only ours
                    self.spark.catalog.dropTempView(view)
        except Exception:  # the session is gone: so is what it named
            pass

    def _conf_json(self, conf_key: str) -> Any:
        """The JSON value the session's configuration holds under ``conf_key``: None when it
        holds none or the session cannot be read; ValueError when it is not JSON."""
        try:
            text = self.spark.conf.get(conf_key, None)
        except Exception:
            return None
        return json.loads(text) if text else None


def handed_on(value: Any, depth: int = 0) -> bool:
    """Whether a value of a body's static data (what ``load`` returned, not a DataFrame) is
    handed on to the next process of a Spark Connect session: JSON that comes back from JSON as
    itself (a finite number, a string, a boolean, None, and lists of them or dicts of them by
    string keys, a few levels deep). A tuple, a numpy number, any other object: not."""
    if value is None or isinstance(value, (bool, str)) or type(value) is int:
        return True
    if type(value) is float:
        return value == value and value not in (float("inf"), float("-inf"))
    if depth >= 8:
        return False
    if type(value) is list:
        return all(handed_on(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and handed_on(v, depth + 1) for k, v in value.items())
    return False
