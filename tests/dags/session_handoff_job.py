"""Run by tests/dags/test_session_handoff.py in a process of its own (a Spark Connect session in the
test process would switch pyspark's functions to Spark Connect for the other tests).

Runs one PageRank job on a Spark Connect server with every epoch on a new ``EpochExecutor`` of
one shared session, as an Airflow batch's run tasks are: each in a process of its own, each
leaving what its tail kept in the session when it ends (the earlier executors are kept alive
here, so nothing of theirs is freed by the collector: as under ``os._exit``). Between epochs it
tampers with what the session names, as a failure would leave it:

* before epoch 3: the name points at another relation for other objects (an attempt whose
  checkpoint never committed);
* before epoch 4: the name's objects match, its relation is gone (released by another client).

And with what the session names of the static data (``load``'s result): before epoch 2 a view
is dropped, before epoch 4 the name points at a table that is not one of ours, before epoch 5
the input file gets a new modification time (the same bytes: still the input the job pinned).

Then the same job again with nothing kept (``handoff=False``, every epoch read from the
checkpoint). Prints one JSON line: per job, the variables' and the static data's origin per epoch, every
checkpoint's SHA-256s; whether the stale relation of epoch 3 was freed.

    python tests/dags/session_handoff_job.py sc://host:port EDGES ROOT
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid


def main(url: str, edges: str, root: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import CachedRemoteRelation

    from include.contract.config import JobConfig
    from include.epoch.job import IterationJob
    from spark_jobs.epoch import EpochExecutor
    from spark_jobs.runner import IterationRunner

    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logging.getLogger("iterations").addHandler(Collect())
    logging.getLogger("iterations").setLevel(logging.INFO)

    spark = SparkSession.builder.remote(f"{url}/;session_id={uuid.uuid4()}").create()
    ended: list = []  # the executors of "processes" that ended: never released
    stale: dict[str, str] = {}
    out: dict = {}
    for job_id, shared in (("pr-shared", True), ("pr-read", False)):
        cfg = JobConfig(job_id=job_id, body="pagerank", input=edges, checkpoint_root=f"{root}/store",
                        max_epochs=6, tolerance=0.0, num_partitions=3, retain_last=10)
        runner = IterationRunner(cfg, spark, handoff=False)

        def execute(plan, runner=runner, shared=shared, job_id=job_id):
            ended.append(runner._executor)
            runner._executor = executor = EpochExecutor(spark, runner.store_options, handoff=shared, shared=shared)
            key = executor.handover.kept_key(job_id, "ranks")
            if shared and plan.epoch == 3:
                other = spark.range(5).localCheckpoint()
                stale["relation"] = other._plan._relation_id
                named = json.loads(spark.conf.get(key))
                spark.conf.set(key, json.dumps({**named, "keys": "0" * 64, "relation": stale["relation"]}))
                del other
            if shared and plan.epoch == 4:
                named = json.loads(spark.conf.get(key))
                spark.conf.set(key, json.dumps({**named, "relation": str(uuid.uuid4())}))
            static = executor.handover.static_conf_key(executor.handover.static_key(plan))
            if shared and plan.kind == "epoch" and plan.epoch in (2, 4, 5):
                named = json.loads(spark.conf.get(static))
                if plan.epoch == 2:  # a view gone (dropped by another client)
                    spark.catalog.dropTempView(sorted(named["frames"].values())[0])
                if plan.epoch == 4:  # a name that is not one of ours
                    spark.conf.set(static, json.dumps({**named, "frames": {"edges": "default.other_table"}}))
                if plan.epoch == 5:  # touched since it was loaded (the same bytes, a new time)
                    os.utime(edges, (os.stat(edges).st_atime, os.stat(edges).st_mtime + 10))
            return executor.run(plan, runner.job.store)

        runner._execute = execute
        runner.run()
        log = IterationJob(cfg).log
        out[job_id] = {
            "lines": [m for m in lines if m.startswith(f"job {job_id} ") and ("variables" in m or "kept in the session" in m
                                                                          or "taken over" in m)],
            "static": [m for m in lines if m.startswith(f"job {job_id} ") and "static" in m],
            "digests": {e: [f.sha256 for f in log.load(e, verify="full").variables["ranks"].files] for e in range(7)},
        }
        runner._executor = None
    ended.clear()
    try:
        DataFrame(CachedRemoteRelation(stale["relation"], spark), spark).schema
        out["stale_freed"] = False
    except Exception as e:
        out["stale_freed"] = "DATAFRAME_NOT_FOUND" in str(e)
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
