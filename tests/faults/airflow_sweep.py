"""The fault sweep through the Airflow path: the k-means DAG (``iterate_kmeans``: per-epoch
outputs and final outputs, so every protocol step has work) run with ``airflow dags test`` and
task retries, with failure points at every step of the epoch protocol - head (plan, Spark job),
tail (the Spark job's partitions), align, commit (before and after the manifest write, after the
release), publish (an epoch's outputs, the final outputs) and finish (plan, Spark job, final
checkpoint) - each firing once (``raise-once``): the task fails, Airflow retries it, and the run
must end equal to the failure-free run with every checkpoint committed once (``sweep.audit``),
and every publication the job's store records named, at its version, by an OpenLineage event
of the task that published it (``unannounced``): by its retry when the failure came between a
commit and its publication.

The failure points are written to the file ``ITERATIONS_FAILPOINTS_FILE`` names, which every
process of the run reads, the Spark Connect server's Python workers included (for the tail's
points); ``ITERATIONS_FAILPOINT_DIR`` holds the markers of the points that fired.

Used by tests/dags/test_fault_sweep.py (the CI subset: the points grouped so that one DAG run
fails each of several tasks once) and ``python -m tests.faults.report --airflow`` (each point
alone, over seeds).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from include.process import failpoints
from tests import warm_airflow
from tests.faults.sweep import KMEANS_EPOCHS, Outcome, audit, kmeans_workload

F = KMEANS_EPOCHS  # the final checkpoint's id

#: every failure point of the epoch protocol, with the task of the DAG it fails
POINTS: dict[str, str] = {
    "head.before_plan@epoch={e}": "epoch_{e}.run",
    "head.after_plan@epoch={e}": "epoch_{e}.run",
    "epoch.before_write@epoch={e}": "epoch_{e}.run",
    "tail.partition_written@epoch={e}@partition={p}": "epoch_{e}.run",
    "head.after_run@epoch={e}": "epoch_{e}.run",
    "align.before_read@epoch={e}": "epoch_{e}.align",
    "align.before_decide@epoch={e}": "epoch_{e}.align",
    "commit.before_write@epoch={e}": "epoch_{e}.commit",
    "commit.after_write@epoch={e}": "epoch_{e}.commit",
    "commit.after_release@epoch={e}": "epoch_{e}.commit",
    "epoch.before_land@epoch={e}": "epoch_{e}.commit",
    "publish.before_output@checkpoint={e}@output=centroid_history": "epoch_{e}.commit",
    "publish.after_output@checkpoint={e}@output=centroid_history": "epoch_{e}.commit",
    "finish.before_plan": "finish",
    "finish.after_plan": "finish",
    "finish.after_run@epoch=" + str(F): "finish",
    "finish.before_final_checkpoint": "finish",
    "finish.after_final_checkpoint": "finish",
    "publish.before_output@checkpoint=" + str(F) + "@output=centroids": "finish",
    "publish.after_output@checkpoint=" + str(F) + "@output=assignments": "finish",
}

#: points in the alignment sensor: reached only when the sensor runs, which with
#: ``commit_in_head`` on (every report there as the Spark job ends) it never does
SENSOR_POINTS = ("align.before_read",)

#: points reached only with ``overlap_commits``: a head landing the commit of the epoch before
#: its own, which ran behind its Spark job (never the last epoch's: it commits in its own task)
OVERLAP_POINTS = ("epoch.before_land",)

#: the CI subset: every point once, grouped in two DAG runs; within a run each task fails at
#: most once per point it carries (epoch 2's and the finish carry several: retried once per point)
GROUPS: dict[str, list[str]] = {
    "head, tail, align, commit": [
        "head.before_plan@epoch=0", "head.after_plan@epoch=1", "tail.partition_written@epoch=2@partition=1",
        "align.before_read@epoch=1", "align.before_decide@epoch=0", "commit.before_write@epoch=0",
        "commit.after_write@epoch=1", "commit.after_release@epoch=2", "finish.before_plan",
        "epoch.before_land@epoch=0",
    ],
    "tail, align, publish (epochs and the last one's), finish and publication": [
        "epoch.before_write@epoch=0", "head.after_run@epoch=1", "align.before_decide@epoch=2",
        "publish.before_output@checkpoint=0@output=centroid_history",
        "publish.after_output@checkpoint=1@output=centroid_history", "commit.after_write@epoch=" + str(F - 1),
        "publish.before_output@checkpoint=" + str(F - 1) + "@output=centroid_history",
        "finish.after_plan", "finish.after_run@epoch=" + str(F), "finish.before_final_checkpoint",
        "finish.after_final_checkpoint", "publish.before_output@checkpoint=" + str(F) + "@output=centroids",
        "publish.after_output@checkpoint=" + str(F) + "@output=assignments",
    ],
}

#: retries of every task in the sweep's runs (finish may fail once per point it carries)
RETRIES = 8


#: the DAG's shapes the sweep runs: (commit_in_head, overlap_commits)
SHAPES: dict[str, tuple[bool, bool]] = {
    "default shape": (True, False),
    "commit tasks": (False, False),
    "overlapped commits": (True, True),
}


def reached(points: list[str], commit_in_head: bool, overlap_commits: bool = False) -> list[str]:
    """The points of ``points`` a run of that DAG shape reaches (``SENSOR_POINTS``,
    ``OVERLAP_POINTS``)."""
    return [p for p in points if not (commit_in_head and p.split("@")[0] in SENSOR_POINTS)
            and (overlap_commits or p.split("@")[0] not in OVERLAP_POINTS)]


def task_of(point: str, commit_in_head: bool = False, overlap_commits: bool = False) -> str:
    """The task of the DAG a failure point fails; with ``commit_in_head`` an epoch's run task
    aligns and commits it (its reports are all there as its Spark job ends); with
    ``overlap_commits`` too, epoch e's checks, commit and publication run in epoch e+1's run
    task, behind that epoch's Spark job (but the last epoch's: it decides termination)."""
    for template, task in POINTS.items():
        for e in range(F + 1):
            for p in range(3):
                if template.format(e=e, p=p) == point:
                    if commit_in_head and task.endswith((".align", ".commit")):
                        behind = overlap_commits and task.endswith(".commit") and e < F - 1  # in the next head
                        return f"epoch_{e + 1 if behind else e}.run"
                    return task.format(e=e)
    raise KeyError(f"no task for failure point {point!r}")


def airflow_bin() -> str:
    return os.path.join(os.path.dirname(sys.executable), "airflow")


def point_for(template: str, rng: random.Random) -> str:
    """A template of ``POINTS`` with a seeded epoch and partition (an ``OVERLAP_POINTS`` one's
    epoch is one whose commit runs behind the next: not the last)."""
    epochs = KMEANS_EPOCHS - 1 if template.split("@")[0] in OVERLAP_POINTS else KMEANS_EPOCHS
    return template.format(e=rng.randrange(epochs), p=rng.randrange(3))


def run_dag(env: dict[str, str], work: Path, seed: int, points: list[str], name: str,
            timeout: float = 900, commit_in_head: bool = False, spark_pass: bool = False,
            overlap_commits: bool = False) -> Outcome:
    """One ``airflow dags test iterate_kmeans`` run of a fresh job with ``points`` armed (each
    fires once); the outcome audited against the failure-free run (``sweep.audit``).
    ``commit_in_head``, ``overlap_commits``: the DAG's options of those names on
    (ITERATIONS_COMMIT_IN_HEAD, ITERATIONS_OVERLAP_COMMITS).
    ``spark_pass``: an input whose Lloyd's pass runs in Spark (``sweep.kmeans_workload``); the
    epochs' passes (from the k-means log lines) are in ``facts["passes"]``."""
    from spark_jobs.session import get_spark

    w = kmeans_workload(work, seed, spark_pass)
    cfg = w.config(work)
    trace = work / "trace.jsonl"
    fired_dir = Path(env[failpoints.DIR_ENV])
    for old in fired_dir.glob("*.fired"):
        old.unlink()
    armed = Path(env[failpoints.FILE_ENV])
    armed.write_text(";".join(f"{p}=raise-once" for p in points))
    conf = {"job_id": cfg.job_id, "input_path": cfg.input.path, "checkpoint_root": cfg.checkpoint_root,
            "output_path": cfg.output_path, "max_epochs": cfg.max_epochs, "tolerance": 0,
            "num_partitions": cfg.num_partitions, **cfg.body_params, "continuation": False}
    lineage = work / "openlineage.jsonl"
    run_env = {**env, failpoints.TRACE_ENV: str(trace), "ITERATIONS_RETRY_DELAY_SECONDS": "1",
               "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage),
                                                              "append": True}),
               "AIRFLOW__OPENLINEAGE__NAMESPACE": "iterations-sweep",
               "ITERATIONS_RETRIES": str(RETRIES), "ITERATIONS_COMMIT_IN_HEAD": "1" if commit_in_head else "0",
               "ITERATIONS_OVERLAP_COMMITS": "1" if overlap_commits else "0"}
    try:
        done = warm_airflow.run(run_env, "dags", "test", "iterate_kmeans", "--conf", json.dumps(conf),
                                cwd=str(Path(__file__).resolve().parents[2]), timeout=timeout)
    finally:
        armed.write_text("")
    log = done.stdout + done.stderr
    out = Outcome(name, seed, runs=1, detail=", ".join(points))
    fired = sorted(p.name[:-len(".fired")] for p in fired_dir.glob("*.fired"))
    out.faults = len(fired)
    out.facts = {"fired": fired, "log": log, "returncode": done.returncode,
                 "succeeded": done.returncode == 0 and "state=success" in log,
                 "passes": set(re.findall(r"k-means epoch \d+: Lloyd's pass (in Spark|on the driver)", log))}
    if not out.facts["succeeded"]:
        out.lost += 1
        out.detail += f"; the run failed (exit {done.returncode}): {log[-3000:]}"
        return out
    out.facts["unannounced"] = unannounced(cfg, lineage)
    if out.facts["unannounced"]:
        out.detail += f"; published, in no task's lineage: {out.facts['unannounced']}"
    return audit(out, get_spark("iterations-sweep"), w, cfg, trace, work)


def unannounced(cfg, lineage: Path) -> list[str]:
    """The publications the job's store records (output, checkpoint) that no OpenLineage event
    of the run's tasks names as an output at that publication's version (COMPLETE, or FAIL for
    a try that published before it failed)."""
    from include.epoch.job import IterationJob
    from include.publication.outputs import version_of
    from tests.helpers import lineage_events

    named = {(o["name"].rsplit("/", 1)[-1], o["facets"]["version"]["datasetVersion"])
             for e in lineage_events(lineage) if e["eventType"] in ("COMPLETE", "FAIL")
             for o in e.get("outputs") or []}
    job = IterationJob(cfg)
    missing = []
    for cid in range(job.log.latest_id() + 1):
        for name in sorted(job.log.publications.of(cid)):
            if (name, version_of({"job_id": cfg.job_id, "checkpoint_id": cid})) not in named:
                missing.append(f"{name}@{cid}")
    return missing


def task_tries(log: str) -> dict[str, int]:
    """How many times ``dags test`` started each task (its ``[DAG TEST] starting task_id=`` lines)."""
    out: dict[str, int] = {}
    for line in log.splitlines():
        if "[DAG TEST] starting task_id=" in line:
            task = line.split("task_id=", 1)[1].split()[0]
            out[task] = out.get(task, 0) + 1
    return out


def airflow_env(home: Path, connect_dir: Path, fired: Path, armed: Path) -> dict[str, Any]:
    """An isolated Airflow home for the full sweep (``tests.faults.report --airflow``), as the DAG
    tests' fixture makes it."""
    from tests.conftest import ROOT, free_port

    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(ROOT, "dags"),
           "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__UNIT_TEST_MODE": "False", "PYTHONPATH": ROOT, "PYSPARK_PYTHON": sys.executable,
           "ITERATIONS_SPARK_CONNECT_PORT": str(free_port()), "ITERATIONS_SPARK_CONNECT_DIR": str(connect_dir),
           failpoints.FILE_ENV: str(armed), failpoints.DIR_ENV: str(fired)}
    env.pop(failpoints.DRIVER_PID_ENV, None)
    subprocess.run([airflow_bin(), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


# --- coordinator events through a DAG -------------------------------------------------------

#: the DAG of the coordinator-events scenario (a DAGs folder of its own: the job's body is the
#: tests' DagReceiver, tests/coordinator_events.py)
EVENTS_DAG = '''# an Airflow DAG (Airflow's safe mode parses files that say "airflow" and "dag")
from iterations.dag_factory import iteration_dag, job_params

dag = iteration_dag(
    dag_id="coordinator_events",
    body="tests.coordinator_events:DagReceiver",
    params=job_params(job_id="events", input_path={input!r}, output_path={output!r},
                      checkpoint_root={store!r}, max_epochs=20, tolerance=0.5, num_partitions=2),
    epochs_per_batch=8,
    attempt_retries=1,
)
'''
EVENTS_FAST, EVENTS_SLOW = 16, 3  # the fast coordinator asks 4 an epoch (epochs 0-3), the slow 1 every 2


def events_faults(seed: int) -> tuple[int, int]:
    """The seeded epochs of the two failures: partition 1's (an epoch where the slow coordinator
    sends, after a checkpoint: 2 or 4) and the fast coordinator's (one where it sends: 1-3)."""
    rng = random.Random(f"coordinator events:{seed}")
    return rng.choice([2, 4]), rng.randrange(1, 4)


def run_events_dag(env: dict[str, str], work: Path, seed: int, commit_in_head: bool = True,
                   name: str = "airflow: coordinator events", timeout: float = 900,
                   overlap_commits: bool = False) -> Outcome:
    """``airflow dags test`` of the coordinator-events DAG with a subtask-only failure (partition
    1's Spark task, once, in a seeded epoch: the head runs the attempt again in its process) and a
    coordinator-only failure (the fast coordinator raises handling a seeded epoch's report: the
    task fails and Airflow retries it). Counted: each coordinator's numbers the receiving side
    did not get (lost), got twice (duplicated) or out of order (wrong), checkpoint ids missing
    from the chain (lost) or committed twice (duplicated). ``facts``: what each fault recorded
    when it fired (``records``), the tasks' tries, the log, the epochs of the two failures."""
    from include.contract.config import JobConfig
    from include.epoch.job import IterationJob
    from spark_jobs.session import get_spark
    from spark_jobs.storeio import read_dataset
    from tests.coordinator_events import received_sequences
    from tests.faults.sweep import trace_events

    poison_epoch, coordinator_epoch = events_faults(seed)
    (work / "markers").mkdir()
    (work / "dags").mkdir()  # a DAGs folder of its own (the warm Airflow reads it from the env)
    poison, flag, records, trace = work / "poison", work / "coordinator_fails", work / "records.jsonl", work / "trace"
    poison.write_text("armed")
    flag.write_text("armed")
    (work / "dags" / "coordinator_events_dag.py").write_text(EVENTS_DAG.format(
        input=str(work / "no-input"), output=str(work / "out"), store=str(work / "store")))
    conf = {"n_fast": EVENTS_FAST, "n_slow": EVENTS_SLOW, "poison": str(poison), "poison_epoch": poison_epoch,
            "fail_coordinator_epoch": coordinator_epoch, "fail_flag": str(flag), "record_file": str(records),
            "marker_dir": str(work / "markers"), "retain_last": 50, "continuation": False}
    run_env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": str(work / "dags"), failpoints.TRACE_ENV: str(trace),
               "ITERATIONS_COMMIT_IN_HEAD": "1" if commit_in_head else "0",
               "ITERATIONS_OVERLAP_COMMITS": "1" if overlap_commits else "0"}
    done = warm_airflow.run(run_env, "dags", "test", "coordinator_events", "--conf", json.dumps(conf),
                            cwd=str(Path(__file__).resolve().parents[2]), timeout=timeout)
    log = done.stdout + done.stderr
    out = Outcome(name, seed, runs=1, detail=f"partition 1 fails in epoch {poison_epoch}, "
                                              f"the coordinator in epoch {coordinator_epoch}")
    out.faults = int(not poison.exists()) + int(not flag.exists())
    out.facts = {"log": log, "tries": task_tries(log), "poison_epoch": poison_epoch,
                 "coordinator_epoch": coordinator_epoch, "poisoned": not poison.exists(),
                 "coordinator_failed": not flag.exists(),
                 "records": [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else [],
                 "succeeded": done.returncode == 0 and "state=success" in log}
    if not out.facts["succeeded"]:
        out.lost += 1
        out.detail += f"; the run failed (exit {done.returncode}): {log[-3000:]}"
        return out
    job = IterationJob(JobConfig(job_id="events", body="tests.coordinator_events:DagReceiver",
                                 input=str(work / "no-input"), checkpoint_root=str(work / "store")))
    ids = job.log.checkpoint_ids()
    missing = sorted(set(range(ids[-1] + 1)) - set(ids)) if ids else [0]
    out.lost += len(missing)
    commits: dict[int, int] = {}
    for e in trace_events(trace):
        if e["event"] == "checkpoint.committed" and e["job"] == "events":
            commits[e["checkpoint"]] = commits.get(e["checkpoint"], 0) + 1
    out.duplicated += sum(n - 1 for n in commits.values() if n > 1)
    final = job.log.load(ids[-1])
    out.facts["final"] = final
    if final.kind != "final":
        out.lost += 1
        out.detail += f"; the job did not finish (latest checkpoint {final.checkpoint_id} is {final.kind})"
        return out
    rows = read_dataset(get_spark("iterations-sweep"), job.store, final.variables["received"], 2).collect()
    got = received_sequences(rows)
    out.facts["sequences"], out.facts["rows"] = got, rows
    for coordinator, n in (("fast", EVENTS_FAST), ("slow", EVENTS_SLOW)):
        seq = got[coordinator]
        out.lost += len(set(range(n)) - set(seq))
        out.duplicated += len(seq) - len(set(seq))
        out.wrong += int(len(seq) == len(set(seq)) and seq != sorted(seq))
    if missing or not out.ok:
        out.detail += f"; checkpoints missing {missing}, commits {commits}, received {got}"
    return out
