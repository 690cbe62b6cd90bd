"""A chaos run: three jobs at once on the native stack while a seeded schedule of faults hits
it (tests.chaos.faults), then the audit: every job equal to its failure-free run, every
checkpoint committed and every output published once with one asset event, every arriving
file taken once, no store file that no checkpoint references; per fault, the time to the next
committed epoch.

The jobs run in lanes, each a thread that starts its next job when the one before ended, until
the schedule is over: PageRank over three batches with continuations, its checkpoints and
outputs on S3; k-means over two batches, its store and outputs on a small filesystem of their
own (what ``disk-full`` fills); and one incremental gradient-descent job whose files keep
arriving until the schedule ends. A DAG run that fails (its retries spent while a fault lasted)
is triggered again, as an operator would: the job resumes from what committed, and the audit
says whether that held."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import threading
import time
import urllib.error
import urllib.parse
from pathlib import Path
from typing import Any, Callable

from include.checkpoints.head_state import HeadStatus
from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from stack.services import BUCKETS, S3_KEY_ID, Stack
from tests.chaos.faults import Fault, Injector
from tests.faults.sweep import (
    Outcome,
    Workload,
    audit,
    audit_store,
    environment,
    kmeans_workload,
    pagerank_workload,
    trace_events,
)

DAGS = {"pagerank": "iterate_pagerank", "kmeans": "iterate_kmeans", "sgd": "iterate_sgd_incremental"}
SMALL_FS_MIB = 64  # the k-means lane's filesystem
FILE_EVERY = 20.0  # seconds between two files of the incremental job
JOB_TIMEOUT = 1200.0  # a job not ended this long after the schedule is lost


@dataclasses.dataclass
class Job:
    lane: str
    job_id: str
    cfg: JobConfig
    workload: Workload | None  # None: the incremental job (audited by a replay of its files)
    conf: dict[str, Any]
    started: float = 0.0
    ended: float | None = None
    runs: int = 0  # DAG runs triggered by the lane (the continuations not counted)
    failed_runs: list[str] = dataclasses.field(default_factory=list)
    outcome: Outcome | None = None
    files: int = 0  # the incremental job's files
    retries: int = 0  # task tries after the first, over the job's DAG runs


class Chaos:
    def __init__(self, stack: Stack, work: str, seed: int, trace: str, log: Callable[[str], None] = print,
                 epochs_per_batch: int = 2):
        from tests.dags.airflow_server import StackApi

        self.stack, self.work, self.seed, self.trace, self.say = stack, Path(work), seed, Path(trace), log
        self.api = StackApi(stack)
        self.epochs_per_batch = epochs_per_batch
        self.jobs: list[Job] = []
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.small_fs: str | None = None
        self.lock = threading.Lock()

    # --- set-up -----------------------------------------------------------------------------------

    def mount_small_fs(self) -> None:
        """A tmpfs of ``SMALL_FS_MIB`` under the work folder (the stack's allowed roots), so that
        filling it fills nothing else of the machine; left unmounted when that is not allowed."""
        where = self.work / "small-fs"
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_FS_MIB}m", "chaos-small-fs", str(where)],
                              capture_output=True, text=True)
        if done.returncode == 0:
            self.small_fs = str(where)
        else:
            self.say(f"no small filesystem ({done.stderr.strip()}): the k-means store goes on the disk, no disk-full")

    def unmount_small_fs(self) -> None:
        if self.small_fs:
            subprocess.run(["umount", "-l", self.small_fs], capture_output=True)

    def s3_env(self):
        """This process reads the S3 stores (the audit) with the stack's credentials; put back after."""
        return environment(AWS_ENDPOINT_URL=self.stack.s3_endpoint, AWS_ACCESS_KEY_ID=S3_KEY_ID,
                           AWS_SECRET_ACCESS_KEY=self.stack.state["secrets"]["s3_secret"],
                           AWS_DEFAULT_REGION="us-east-1")

    # --- the REST API through faults ------------------------------------------------------------

    def call(self, fn: Callable[[], Any], what: str, timeout: float = 600) -> Any:
        """``fn()``, tried again while the API server, its database or the network is down."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn()
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
                if isinstance(e, urllib.error.HTTPError) and e.code < 500 and e.code not in (401, 403, 429):
                    raise
                if isinstance(e, urllib.error.HTTPError) and e.code in (401, 403):
                    self.api._token = None  # a new token after the API server restarted
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what}: the API did not answer for {timeout:.0f} s ({e})") from e
                time.sleep(2)

    def runs_of(self, job: Job) -> list[dict]:
        dag = DAGS[job.lane]
        got = self.call(lambda: self.api.get(f"/api/v2/dags/{dag}/dagRuns?limit=100&order_by=-run_after"),
                        f"the runs of {dag}")
        return [r for r in got["dag_runs"] if (r.get("conf") or {}).get("job_id") == job.job_id]

    # --- jobs -------------------------------------------------------------------------------------

    def new_job(self, lane: str, n: int) -> Job:
        job_id = f"chaos-{lane}-{self.seed}-{n}"
        work = self.work / job_id
        if lane == "pagerank":
            w = pagerank_workload(work, self.seed * 100 + n)
            cfg = JobConfig(job_id=job_id, body="pagerank", input=w.input,
                            checkpoint_root=f"s3://{BUCKETS[0]}/chaos", output_path=f"s3://{BUCKETS[1]}/chaos/{job_id}",
                            max_epochs=w.epochs, tolerance=0.0, num_partitions=3, body_params={})
        elif lane == "kmeans":
            w = kmeans_workload(work, self.seed * 100 + n)
            root = Path(self.small_fs) / job_id if self.small_fs else work
            cfg = w.config(root, job_id=job_id)
        else:
            w = None
            cfg = JobConfig(job_id=job_id, body="sgd", input=str(work / "incoming"),
                            checkpoint_root=str(work / "store"), output_path=str(work / "out"),
                            max_epochs=10_000, tolerance=0.0, num_partitions=2, body_params={"learning_rate": 0.05})
        conf = {"job_id": job_id, "input_path": cfg.input.path, "checkpoint_root": cfg.checkpoint_root,
                "output_path": cfg.output_path, "max_epochs": cfg.max_epochs, "tolerance": 0,
                "num_partitions": cfg.num_partitions, **cfg.body_params}
        return Job(lane, job_id, cfg, w, conf)

    def terminated(self, job: Job) -> bool:
        try:
            latest = IterationJob(job.cfg).log.latest(verify="none")
        except Exception:  # the store is not answering (S3 stopped): not yet
            return False
        return latest is not None and latest.head_state.status is HeadStatus.TERMINATED

    def drive(self, job: Job, deadline: Callable[[], float]) -> None:
        """Trigger the job and see it to its end: a DAG run that failed is triggered again."""
        dag = DAGS[job.lane]
        job.started = time.time()
        self.call(lambda: self.api.trigger(dag, job.conf), f"triggering {job.job_id}")
        job.runs += 1
        quiet_since: float | None = None
        while True:
            runs = self.runs_of(job)
            active = [r for r in runs if r["state"] in ("queued", "running")]
            failed = [r["dag_run_id"] for r in runs if r["state"] == "failed" and r["dag_run_id"] not in job.failed_runs]
            if failed:
                job.failed_runs += failed
                self.say(f"{job.job_id}: run(s) {failed} failed")
            if not active and runs:
                newest = max(runs, key=lambda r: r["run_after"])
                if newest["state"] == "success" and self.terminated(job):
                    job.ended = time.time()
                    job.retries = sum(max(ti.get("try_number", 1) - 1, 0) for r in runs for ti in self.call(
                        lambda r=r: self.api.task_instances(dag, r["dag_run_id"]), "task instances").values())
                    self.say(f"{job.job_id}: ended after {job.ended - job.started:.0f} s, {job.runs} run(s) "
                             f"triggered, {len(job.failed_runs)} failed, {job.retries} task retries")
                    return
                # a failed run, or a batch that succeeded and started no continuation (yet)
                quiet_since = quiet_since or time.monotonic()
                if newest["state"] == "failed" or time.monotonic() - quiet_since > 60:
                    self.say(f"{job.job_id}: triggered again (newest run {newest['dag_run_id']} {newest['state']})")
                    self.call(lambda: self.api.trigger(dag, job.conf), f"triggering {job.job_id} again")
                    job.runs += 1
                    quiet_since = None
            else:
                quiet_since = None
            if time.monotonic() > deadline():
                self.errors.append(f"{job.job_id} did not end: runs {[(r['dag_run_id'], r['state']) for r in runs]}")
                return
            time.sleep(3)

    def lane(self, name: str) -> None:
        """Jobs of one kind back to back until the schedule is over."""
        n = 0
        while not self.stopping.is_set():
            n += 1
            job = self.new_job(name, n)
            with self.lock:
                self.jobs.append(job)
            try:
                self.drive(job, self.job_deadline)
            except Exception as e:  # noqa: BLE001 - the run goes on; the audit counts the job
                self.errors.append(f"{job.job_id}: {type(e).__name__}: {e}")
                return

    def incremental_lane(self) -> None:
        """One incremental job; a file every ``FILE_EVERY`` seconds until the schedule is over,
        then the end marker."""
        from tests.integration.test_incremental import drop_file, end_input

        job = self.new_job("sgd", 1)
        inbox = job.cfg.input.path
        drop_file(inbox, 0)
        job.files = 1
        with self.lock:
            self.jobs.append(job)

        def feed() -> None:
            while not self.stopping.wait(FILE_EVERY):
                drop_file(inbox, job.files)
                job.files += 1
            end_input(inbox)

        feeder = threading.Thread(target=feed, name="chaos-files", daemon=True)
        feeder.start()
        try:
            self.drive(job, self.job_deadline)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"{job.job_id}: {type(e).__name__}: {e}")
        feeder.join(5)

    def job_deadline(self) -> float:
        return self.stopped_at + JOB_TIMEOUT if self.stopping.is_set() else math.inf

    # --- the run ----------------------------------------------------------------------------------

    def run(self, faults: list[Fault]) -> dict[str, Any]:
        """Run the lanes under ``faults``, then audit: the report (``report``)."""
        with self.s3_env():
            return self._run(faults)

    def _run(self, faults: list[Fault]) -> dict[str, Any]:
        self.mount_small_fs()
        try:
            for dag in DAGS.values():
                self.call(lambda dag=dag: self.api.unpause(dag), f"unpausing {dag}")
            self.stopped_at = math.inf
            lanes = [threading.Thread(target=self.lane, args=(n,), name=f"chaos-{n}", daemon=True)
                     for n in ("pagerank", "kmeans")]
            lanes.append(threading.Thread(target=self.incremental_lane, name="chaos-sgd", daemon=True))
            for t in lanes:
                t.start()
            injector = Injector(self.stack, self.small_fs, self.say)
            began = time.monotonic()
            for fault in faults:
                wait = fault.at - (time.monotonic() - began)
                if wait > 0:
                    time.sleep(wait)
                try:
                    injector.inject(fault)
                except Exception as e:  # noqa: BLE001 - a fault the run could not clear is a finding
                    self.errors.append(f"fault {fault.kind}: {type(e).__name__}: {e}")
                    self.say(f"fault {fault.kind} failed: {e}")
                began += (fault.cleared or time.time()) - (fault.started or time.time())  # gaps count from clearing
            self.say("schedule over: the lanes finish their jobs")
            self.stopped_at = time.monotonic()
            self.stopping.set()
            for t in lanes:
                t.join(JOB_TIMEOUT + 120)
            return self.audit(faults)
        finally:
            self.stopping.set()
            self.unmount_small_fs()

    # --- the audit --------------------------------------------------------------------------------

    def audit(self, faults: list[Fault]) -> dict[str, Any]:
        spark = self.spark()
        for job in self.jobs:
            out = Outcome(job.job_id, self.seed)
            out.runs = job.runs
            try:
                if job.workload is not None:
                    audit(out, spark, job.workload, job.cfg, self.trace, self.work / "reference" / job.job_id)
                else:
                    self._audit_incremental(job, out)
            except Exception as e:  # noqa: BLE001 - an audit that cannot read the outputs: lost
                out.lost += 1
                out.detail = f"{out.detail}; audit failed: {type(e).__name__}: {e}".strip("; ")
            self._audit_events(job, out)
            job.outcome = out
        return self.report(faults)

    def spark(self):
        from spark_jobs.session import get_spark

        return get_spark("iterations-chaos")

    def _audit_incremental(self, job: Job, out: Outcome) -> None:
        from tests.integration.test_incremental import check_exactly_once

        notes = audit_store(out, job.cfg, self.trace)
        if notes is None:
            return
        try:
            check_exactly_once(job.cfg.input.path, job.cfg.output_path, job.files)
        except AssertionError as e:
            out.wrong += 1
            notes.append(f"files or model: {str(e).splitlines()[0]}")
        out.detail = "; ".join(notes)

    def _audit_events(self, job: Job, out: Outcome) -> None:
        """One asset event per published output of the job (the finish's)."""
        got = self.call(lambda: self.api.get("/api/v2/assets/events?limit=1000&order_by=-timestamp"), "asset events")
        mine = [e for e in got["asset_events"] if (e.get("extra") or {}).get("job_id") == job.job_id]
        per_uri: dict[str, int] = {}
        for e in mine:
            per_uri[e["uri"]] = per_uri.get(e["uri"], 0) + 1
        twice = {u: n for u, n in per_uri.items() if n > 1}
        if twice:
            out.duplicated += sum(n - 1 for n in twice.values())
            out.detail = f"{out.detail}; asset events more than once {twice}".strip("; ")
        if not per_uri and job.ended:
            out.lost += 1
            out.detail = f"{out.detail}; no asset event".strip("; ")
        out.facts["asset_events"] = per_uri

    def _recovered_in(self, fault: Fault, commits: dict[str, list[float]]) -> float | None:
        """Seconds from the fault to the moment every job that ran through it had committed an
        epoch after it was cleared; None when one never did (or the fault was not injected)."""
        if fault.started is None or fault.cleared is None:
            return None
        through = [j for j in self.jobs if j.started and j.started < fault.started
                   and (j.ended is None or j.ended > fault.cleared)]
        last = fault.cleared
        for job in through:
            after = [t for t in commits.get(job.job_id, []) if t > fault.cleared]
            if not after:
                if job.ended:  # its last commit came before the clearing (its publication after)
                    continue
                return None
            last = max(last, min(after))
        return round(last - fault.started, 1)

    def report(self, faults: list[Fault]) -> dict[str, Any]:
        commits: dict[str, list[float]] = {}
        for e in trace_events(self.trace):
            if e["event"] == "checkpoint.committed" and "time" in e:
                commits.setdefault(e["job"], []).append(e["time"])
        rows = []
        for f in faults:
            rows.append({**f.to_json(), "recovered_in": self._recovered_in(f, commits)})
        jobs = [{"job": j.job_id, "lane": j.lane, "runs": j.runs, "failed_runs": len(j.failed_runs), "retries": j.retries,
                 "seconds": round(j.ended - j.started, 1) if j.ended else None, "files": j.files,
                 **{k: getattr(j.outcome, k) for k in ("lost", "duplicated", "wrong", "garbage")},
                 "detail": j.outcome.detail} for j in self.jobs if j.outcome]
        return {"seed": self.seed, "faults": rows, "jobs": jobs, "errors": list(self.errors),
                "lost": sum(j["lost"] for j in jobs), "duplicated": sum(j["duplicated"] for j in jobs),
                "wrong": sum(j["wrong"] for j in jobs), "garbage": sum(j["garbage"] for j in jobs)}


def leftovers(home: str) -> list[str]:
    """Processes whose command line names the stack's folder (after its stop: none may be)."""
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                argv = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ")
            except OSError:
                continue
            if home.encode() in argv:
                left.append(f"{entry}: {argv[:160].decode(errors='replace')}")
    return left


def table(report: dict[str, Any]) -> str:
    """The report as text: faults by kind (injected, recovered, time to the next commit), jobs."""
    lines = [f"seed {report['seed']}: {len(report['faults'])} faults, {len(report['jobs'])} jobs; "
             f"lost {report['lost']}, duplicated {report['duplicated']}, wrong {report['wrong']}, "
             f"garbage {report['garbage']}"]
    kinds: dict[str, list[dict]] = {}
    for f in report["faults"]:
        kinds.setdefault(f["kind"], []).append(f)
    lines.append(f"{'fault':16s} {'injected':>8s} {'recovered':>9s}  to the next commit, s")
    for kind, fs in sorted(kinds.items()):
        done = [f for f in fs if not f["skipped"]]
        rec = [f["recovered_in"] for f in done if f["recovered_in"] is not None]
        lines.append(f"{kind:16s} {len(done):8d} {len(rec):9d}  {', '.join(f'{r:.0f}' for r in rec)}"
                     + (f"  (skipped: {fs[0]['skipped']})" if len(done) < len(fs) else ""))
    lines.append(f"{'job':24s} {'runs':>4s} {'failed':>6s} {'retries':>7s} {'s':>6s} lost dup wrong garbage")
    for j in report["jobs"]:
        lines.append(f"{j['job']:24s} {j['runs']:4d} {j['failed_runs']:6d} {j['retries']:7d} "
                     f"{j['seconds'] or float('nan'):6.0f} "
                     f"{j['lost']:4d} {j['duplicated']:3d} {j['wrong']:5d} {j['garbage']:7d}"
                     + (f"  {j['detail']}" if j["detail"] else ""))
    for e in report["errors"]:
        lines.append(f"error: {e}")
    return "\n".join(lines)


def save(report: dict[str, Any], path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
