"""The fault-injection sweep: scenarios, each run with a seeded random failure point, and an
audit of what the job left behind. Used by the CI subset (tests/faults/test_sweep.py, one
seed per scenario) and by the full sweep (``python -m tests.faults.report``, several seeds,
prints one row per scenario).

Every scenario returns an ``Outcome``:
- ``faults``: failures injected (a SIGKILL, an S3 error, a damaged object, a zombie...);
- ``lost``: committed work missing afterwards (a gap in the checkpoint chain, a kept checkpoint
  that no longer verifies in full, an output row or increment missing);
- ``duplicated``: work applied twice (a checkpoint id committed twice, an output published
  twice for one checkpoint, a duplicated row or increment);
- ``wrong``: results differing from a run without faults (PageRank bit for bit; k-means
  assignments exactly, centroids to 1e-9);
- ``refused``: what the system refused, as it must (a zombie's or a loser's commit, a damaged
  checkpoint, a commit that would leave a gap).
The counters come from the store and from the trace (``ITERATIONS_TRACE``) that the runtime
appends to at each first-write commit and publication, in every process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from include.checkpoints.head_state import HeadStatus
from include.contract.config import JobConfig
from include.epoch.job import IterationJob
from include.errors import CheckpointCorrupted, CheckpointError, CheckpointSuperseded
from include.process import failpoints
from include.runs.ownership import JobBusy
from spark_jobs.runner import IterationRunner
from tests.helpers import release_hold, wait_held

ROOT = str(Path(__file__).resolve().parents[2])
PAGERANK_EPOCHS = 5
KMEANS_EPOCHS = 3
# connected components settle by epoch 3 on components_workload's graph: the later epochs share
# every partition with the checkpoint before (docs/how-it-works.md#shared-files)
COMPONENTS_EPOCHS = 8
PARTITIONS = 3


@dataclasses.dataclass
class Outcome:
    scenario: str
    seed: int
    runs: int = 0  # job runs (processes or runners) it took
    faults: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    refused: int = 0
    recomputed: int = 0  # epochs a recovery computed again: at most the one in flight when it died
    garbage: int = 0  # objects under attempts/ no kept checkpoint references that GC leaves behind
    detail: str = ""
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)  # for the scenario's own asserts

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.wrong == 0


# --- workloads ------------------------------------------------------------------------------

_REFERENCES: dict[tuple, Any] = {}


@dataclasses.dataclass
class Workload:
    kind: str  # "pagerank", "kmeans" or "components"
    input: str
    epochs: int
    params: dict[str, Any]

    def config(self, root: Path, job_id: str = "job", **kw) -> JobConfig:
        return JobConfig(job_id=job_id, body=self.kind, input=self.input, checkpoint_root=str(root / "store"),
                         output_path=str(root / "out"), max_epochs=self.epochs, tolerance=0.0,
                         num_partitions=PARTITIONS, body_params=self.params, **kw)

    def argv(self, cfg: JobConfig) -> list[str]:
        args = [sys.executable, "-m", "spark_jobs.run_job", "--job-id", cfg.job_id, "--body", cfg.body,
                "--input", cfg.input.path, "--checkpoint-root", cfg.checkpoint_root,
                "--output-path", cfg.output_path, "--max-epochs", str(cfg.max_epochs),
                "--tolerance", "0", "--num-partitions", str(cfg.num_partitions),
                "--retain-last", str(cfg.retain_last)]
        for k, v in cfg.body_params.items():
            args += ["--param", f"{k}={json.dumps(v)}"]
        if cfg.on_damaged_checkpoint != "fail":
            args += ["--on-damaged-checkpoint", cfg.on_damaged_checkpoint]
        return args


def pagerank_workload(work: Path, seed: int) -> Workload:
    from tests.helpers import graph_with_dangling, write_edges

    edges = write_edges(work / "input" / "edges.csv", graph_with_dangling(40, 0.1, seed=seed))
    return Workload("pagerank", edges, PAGERANK_EPOCHS, {})


def kmeans_workload(work: Path, seed: int, spark_pass: bool = False) -> Workload:
    """90 points in 2 dimensions, k=3: Lloyd's pass runs on the driver. ``spark_pass``: 16,000
    points in 32 dimensions, k=600, a pass of more multiply-adds than the driver takes on
    (``kmeans.HELD_STEP_WORK``): it runs in Spark, in every process, at every epoch."""
    import numpy as np
    import pandas as pd

    from spark_jobs.bodies import kmeans

    rng = np.random.default_rng(seed)
    (work / "input").mkdir(parents=True, exist_ok=True)
    path = work / "input" / "points.parquet"
    if spark_pass:
        n, dim, k = 16_000, 32, 600
        assert n * dim * k > kmeans.HELD_STEP_WORK
        X = rng.normal(size=(n, dim)) + rng.integers(-5, 6, size=(n, 1))
        pd.DataFrame({"id": np.arange(n), "features": list(X)}).to_parquet(path)
        return Workload("kmeans", str(path), KMEANS_EPOCHS, {"k": k})
    X = rng.normal(size=(90, 2)) + np.repeat([[0, 0], [5, 5], [-5, 5]], 30, axis=0)
    pd.DataFrame({"id": np.arange(90), "x": X[:, 0], "y": X[:, 1]}).to_parquet(path)
    return Workload("kmeans", str(path), KMEANS_EPOCHS, {"k": 3})


def components_workload(work: Path, seed: int) -> Workload:
    """Stars, pairs and a short path: settled after a few epochs, then unchanged up to
    ``COMPONENTS_EPOCHS`` (the tolerance of 0 never ends it early)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    ids = rng.permutation(400)
    edges = [(int(ids[i]), int(ids[i + 1])) for i in range(12)]  # a path of 13 nodes
    edges += [(int(ids[20 + s * 10]), int(ids[20 + s * 10 + i])) for s in range(10) for i in range(1, 10)]
    edges += [(int(ids[200 + 2 * i]), int(ids[201 + 2 * i])) for i in range(40)]
    (work / "input").mkdir(parents=True, exist_ok=True)
    path = work / "input" / "edges.parquet"
    pd.DataFrame(edges, columns=["src", "dst"]).sample(frac=1, random_state=seed).to_parquet(path)
    return Workload("components", str(path), COMPONENTS_EPOCHS, {})


WORKLOADS = {"pagerank": pagerank_workload, "kmeans": kmeans_workload, "components": components_workload}


def _features(centroids) -> Any:
    """The centroids' coordinates as one matrix, a row per centroid."""
    import numpy as np

    columns = [c for c in centroids.columns if c != "cluster_id"]
    return np.column_stack([np.stack(centroids[c].to_numpy()) if centroids[c].dtype == object
                            else centroids[c].to_numpy() for c in columns])


def published_outputs(w: Workload, output_path: str) -> dict[str, Any]:
    from tests.helpers import read_published

    if w.kind == "pagerank":
        return {"ranks": read_published(output_path, "ranks")}
    if w.kind == "components":
        return {"components": read_published(output_path, "components")}
    return {name: read_published(output_path, name) for name in ("centroids", "assignments")}


def reference(spark, w: Workload, work: Path) -> dict[str, Any]:
    """The outputs of a run without faults (computed once per input in this process)."""
    key = (w.kind, Path(w.input).read_bytes(), w.epochs, json.dumps(w.params, sort_keys=True))
    if key not in _REFERENCES:
        cfg = w.config(work / "reference", job_id="reference")
        IterationRunner(cfg, spark).run()
        _REFERENCES[key] = published_outputs(w, cfg.output_path)
    return _REFERENCES[key]


# --- running ------------------------------------------------------------------------------------


def run_process(w: Workload, cfg: JobConfig, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``run_job`` in a process of its own session: a ``kill-driver`` failpoint kills the whole
    process group (driver, JVM, Python workers), as when the machine dies."""
    full = {k: v for k, v in os.environ.items()
            if k not in (failpoints.ENV, failpoints.DRIVER_PID_ENV, failpoints.SKEW_ENV)}
    full.update({"PYTHONPATH": ROOT, "PYSPARK_PYTHON": sys.executable, **env})
    return subprocess.run(w.argv(cfg), cwd=ROOT, env=full, capture_output=True, text=True, timeout=900,
                          start_new_session=True)


@contextlib.contextmanager
def environment(**values: str | None):
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def resume(spark, cfg: JobConfig, trace: Path, **runner_kw):
    """Run the job again in this process, on the warm session, until it terminates."""
    with environment(**{failpoints.TRACE_ENV: str(trace)}):
        return IterationRunner(cfg, spark, **runner_kw).run()


# --- the audit ------------------------------------------------------------------------------------


def trace_events(trace: Path) -> list[dict[str, Any]]:
    """The events every process appended to the trace (``include.process.failpoints.trace``)."""
    return [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []


def audit_store(out: Outcome, cfg: JobConfig, trace: Path, hole: set[int] = frozenset()) -> list[str] | None:
    """What any job's store and the trace must show once it terminated, counted into ``out``:
    no gap in the checkpoint chain, every kept checkpoint verifying in full after a garbage
    collection, no checkpoint committed and no output published twice, and (``out.garbage``) no
    object under attempts/ that no kept checkpoint references. The notes so far; None (and a lost
    job counted) when the job did not terminate."""
    notes: list[str] = []
    job = IterationJob(cfg)
    latest = job.log.latest(verify="none")
    if latest is None or latest.head_state.status is not HeadStatus.TERMINATED:
        out.lost += 1
        notes.append(f"job not terminated (latest {latest and latest.checkpoint_id})")
        out.detail = "; ".join([out.detail, *notes] if out.detail else notes)
        return None
    listed = {job.log.layout.parse_id(o.key) for o in job.store.list(f"{job.log.layout.root}/checkpoints/")}
    missing = set(range(latest.checkpoint_id + 1)) - listed - set(hole)
    if missing:
        out.lost += len(missing)
        notes.append(f"checkpoint ids missing {sorted(missing)}")
    job.log.retention.collect_garbage(cfg.retain_last)  # what a later commit's GC would do: leaks remain
    referenced: set[str] = set()
    for cid in job.log.checkpoint_ids():  # verified after that GC: it deleted nothing they need
        try:
            referenced.update(ref.key for ref in job.log.load(cid, verify="full").objects)
        except CheckpointError as e:
            out.lost += 1
            notes.append(f"checkpoint {cid} does not verify: {e}")
    events = trace_events(trace)
    commits = Counter(e["checkpoint"] for e in events if e["event"] == "checkpoint.committed" and e["job"] == cfg.job_id)
    rewound = [e for e in events if e["event"] == "checkpoint.rewound" and e["job"] == cfg.job_id]
    recommitted = {c for e in rewound for c in e["rejected"]}  # rejected by a rewind: committed again
    twice = {c: n for c, n in commits.items() if n > 1 + (c in recommitted)}
    if twice:
        out.duplicated += sum(n - 1 for n in twice.values())
        notes.append(f"checkpoints committed more than once {twice}")
    pubs = Counter((e["checkpoint"], e["output"]) for e in events
                   if e["event"] == "output.published" and e["job"] == cfg.job_id)
    again = {k: n for k, n in pubs.items() if n > 1 + (k[0] in recommitted)}
    if again:
        out.duplicated += sum(n - 1 for n in again.values())
        notes.append(f"outputs published more than once {again}")
    out.garbage = sum(1 for o in job.store.list(job.log.layout.attempts())
                      if o.key not in referenced and not o.key.endswith("/_PLAN.json"))
    return notes


def audit(out: Outcome, spark, w: Workload, cfg: JobConfig, trace: Path, work: Path,
          hole: set[int] = frozenset(), expected: dict[str, Any] | None = None) -> Outcome:
    """Count what was lost, duplicated or wrong once the job terminated. ``hole``: manifests
    the scenario itself deleted (not counted as lost). ``expected``: the outputs of a run
    without faults, when the caller has them (else computed once per input: ``reference``)."""
    notes = audit_store(out, cfg, trace, hole)
    if notes is None:
        return out
    if expected is None:
        expected = reference(spark, w, work)
    try:
        got = published_outputs(w, cfg.output_path)
    except Exception as e:  # nothing published
        out.lost += 1
        notes.append(f"outputs not published: {e}")
        got = None
    if got is not None:
        key = "node" if w.kind in ("pagerank", "components") else None
        for name, frame in expected.items():
            mine = got[name]
            k = key or ("cluster_id" if name == "centroids" else "id")
            dup = int(mine[k].duplicated().sum())
            lost = len(set(frame[k]) - set(mine[k]))
            out.duplicated += dup
            out.lost += lost
            a = frame.sort_values(k).reset_index(drop=True)
            b = mine.drop_duplicates(k).sort_values(k).reset_index(drop=True)
            if w.kind == "kmeans" and name == "centroids":  # feature columns, or one column of arrays
                same = len(a) == len(b) and (abs(_features(a) - _features(b)) <= 1e-9).all()
            else:
                same = len(a) == len(b) and a.equals(b[a.columns])
            if not same:
                out.wrong += 1
                notes.append(f"output {name} differs from the run without faults")
            if dup or lost:
                notes.append(f"output {name}: {dup} duplicated, {lost} missing rows")
        if w.kind == "kmeans":
            from include.publication.outputs import published_increments

            inc = published_increments(cfg.output_path, "centroid_history").checkpoints
            want = tuple((cfg.job_id, e) for e in range(w.epochs))
            if inc != want:
                counts = Counter(inc)
                out.duplicated += sum(n - 1 for n in counts.values())
                out.lost += len(set(want) - set(inc))
                notes.append(f"increments {inc}, expected {want}")
    out.detail = "; ".join([out.detail] + notes if out.detail else notes)
    return out


def shared_files(cfg: JobConfig) -> int:
    """How many files the job's kept epoch checkpoints reference that an earlier epoch wrote."""
    log = IterationJob(cfg).log
    count = 0
    for cid in log.checkpoint_ids():
        m = log.load(cid, verify="none")
        own = f"{log.layout.attempt(m.checkpoint_id, m.attempt_id)}/"
        count += sum(1 for ds in m.variables.values() for f in ds.files if not f.key.startswith(own)) \
            if m.kind == "epoch" else 0
    return count


# --- scenarios ------------------------------------------------------------------------------------

KILL_POINTS = {
    # name: (workload, seeded failpoint spec)
    "kill in epoch": ("pagerank", lambda rng: "tail.partition_written@epoch={e}@partition={p}=kill-driver".format(
        e=rng.randrange(1, PAGERANK_EPOCHS - 1), p=rng.randrange(PARTITIONS))),
    "kill before alignment": ("pagerank", lambda rng: f"epoch.before_align@epoch={rng.randrange(0, PAGERANK_EPOCHS)}=kill"),
    "kill in commit": ("pagerank", lambda rng: "{pt}@epoch={e}=kill".format(
        pt=rng.choice(["commit.before_write", "commit.after_write"]), e=rng.randrange(0, PAGERANK_EPOCHS))),
    "kill after commit": ("pagerank", lambda rng: f"commit.after_release@epoch={rng.randrange(0, PAGERANK_EPOCHS - 1)}=kill"),
    "kill in finish/publication": ("kmeans", lambda rng: rng.choice([
        "finish.before_final_checkpoint=kill",
        "finish.after_final_checkpoint=kill",
        f"publish.before_output@checkpoint={KMEANS_EPOCHS}@output={rng.choice(['centroids', 'assignments'])}=kill",
        f"publish.after_output@checkpoint={KMEANS_EPOCHS}@output={rng.choice(['centroids', 'assignments'])}=kill",
        f"publish.after_output@checkpoint={rng.randrange(KMEANS_EPOCHS)}@output=centroid_history=kill",
    ])),
    # a crash while epoch e's commit runs behind epoch e+1 (include.runs.epoch_run.commit_behind):
    # e held before or after its manifest's write until e+1's attempt has run (or is dying in its
    # Spark job), then the process killed
    "kill in the overlap": ("pagerank", lambda rng: _in_the_overlap(rng, rng.randrange(0, PAGERANK_EPOCHS - 1))),
    # an epoch whose checkpoint shares the files of settled partitions with the one before, while
    # retention (retain_last 3) retires the epochs that wrote them
    "kill in a sharing epoch": ("components", lambda rng: rng.choice([
        "tail.partition_written@epoch={e}@partition={p}=kill-driver",
        "commit.before_write@epoch={e}=kill", "commit.after_write@epoch={e}=kill",
        "commit.after_release@epoch={e}=kill",
    ]).format(e=rng.randrange(4, COMPONENTS_EPOCHS - 1), p=rng.randrange(PARTITIONS))),
}


def _in_the_overlap(rng: random.Random, e: int) -> str:
    return rng.choice([
        "commit.before_write@epoch={e}=hold;epoch.before_land@epoch={e}=kill",
        "commit.after_write@epoch={e}=hold;epoch.before_land@epoch={e}=kill",
        "commit.before_write@epoch={e}=hold;tail.partition_written@epoch={f}@partition={p}=kill-driver",
    ]).format(e=e, f=e + 1, p=rng.randrange(PARTITIONS))


def _killed_at(point: str, w: Workload) -> int:
    """The epoch the dying run was in at ``point``: an epoch's failure point names it
    (``@epoch=``), a publication its checkpoint (``@checkpoint=``); the finish comes after the
    last epoch."""
    for key in ("@epoch=", "@checkpoint="):
        if key in point:
            return int(point.split(key)[1].split("@")[0].split("=")[0])
    if point.startswith("finish."):
        return w.epochs - 1
    raise AssertionError(f"no epoch known for the failure point {point!r}")


def kill_scenario(name: str) -> Callable:
    kind, pick = KILL_POINTS[name]

    def scenario(spark, work: Path, seed: int) -> Outcome:
        rng = random.Random(f"{name}:{seed}")
        w = WORKLOADS[kind](work, seed)
        cfg = w.config(work)
        trace = work / "trace.jsonl"
        point = pick(rng)
        out = Outcome(name, seed, detail=point)
        holds = work / "holds"
        holds.mkdir(exist_ok=True)
        killed = run_process(w, cfg, {failpoints.ENV: point, failpoints.TRACE_ENV: str(trace),
                                      failpoints.DIR_ENV: str(holds)})
        out.runs += 1
        if killed.returncode != -signal.SIGKILL:
            raise AssertionError(f"{name} seed {seed}: {point} did not kill the run "
                                 f"(exit {killed.returncode}): {killed.stderr[-2000:]}")
        out.faults += 1
        before = IterationJob(cfg).log.latest_id()
        result = resume(spark, cfg, trace)
        out.runs += 1
        redone = [e for e in result.epochs_computed if before is not None and e <= before]
        if redone:  # a committed epoch computed again
            out.duplicated += len(redone)
        killed_at = _killed_at(point, w)
        # epochs the dead run had started that were computed again (not adopted)
        out.recomputed = len([e for e in result.epochs_computed if e <= killed_at])
        out.facts = {"restored_from": result.restored_from, "epochs_computed": result.epochs_computed,
                     "epochs_adopted": result.epochs_adopted, "killed_at": killed_at}
        out = audit(out, spark, w, cfg, trace, work)
        out.facts["shared"] = shared_files(cfg)
        return out

    scenario.__name__ = name
    return scenario


def zombie(spark, work: Path, seed: int) -> Outcome:
    """An attempt of epoch k (and one of the finish step) that is still running when its retry
    commits: it then finishes its Spark job and tries to commit. Refused both times; with
    ``fenced`` the retry first aborted the earlier attempt, as the Airflow head does."""
    from spark_jobs.epoch import EpochExecutor

    rng = random.Random(f"zombie:{seed}")
    w = pagerank_workload(work, seed)
    cfg = w.config(work)
    trace = work / "trace.jsonl"
    k, fenced = rng.randrange(1, PAGERANK_EPOCHS - 1), rng.random() < 0.5
    out = Outcome("zombie attempt", seed, detail=f"epoch {k}, {'fenced' if fenced else 'not fenced'}")
    executor = EpochExecutor(spark)
    with environment(**{failpoints.TRACE_ENV: str(trace)}):
        IterationRunner(cfg, spark).run(max_epochs_in_batch=k)
        out.runs += 1
        for kind in ("epoch", "final"):
            slow, retry = IterationJob(cfg), IterationJob(cfg)
            plan_of = (lambda j: j.attempts.plan_epoch()) if kind == "epoch" else (lambda j: j.attempts.plan_finish())
            zplan = plan_of(slow)  # recorded; its Spark job is "still running"
            rplan = plan_of(retry)
            assert rplan.attempt_id != zplan.attempt_id
            if fenced:
                retry.attempts.abort(zplan, reason="fenced by its retry")
            executor.run(rplan, retry.store)
            (retry.committer.commit(rplan) if kind == "epoch" else retry.committer.commit_finish(rplan))
            out.runs += 1
            executor.run(zplan, slow.store)  # the zombie's job ends now, after the commit
            out.faults += 1
            try:
                (slow.committer.commit(zplan) if kind == "epoch" else slow.committer.commit_finish(zplan))
            except CheckpointSuperseded as e:
                if "superseded" not in str(e):
                    raise AssertionError(f"unclear refusal: {e}")
                out.refused += 1
            if kind == "epoch":  # the epochs after k, by hand (a runner would go on to finish)
                job = IterationJob(cfg)
                for _ in range(k + 1, PAGERANK_EPOCHS):
                    plan = job.attempts.plan_epoch()
                    executor.run(plan, job.store)
                    job.committer.commit(plan)
        result = IterationRunner(cfg, spark).run()  # publishes (the zombie never can: it has no checkpoint)
        out.runs += 1
    if result.status is not HeadStatus.TERMINATED:
        out.lost += 1
    return audit(out, spark, w, cfg, trace, work)


def two_at_once(run: Callable[[float], None], delay: float, *, timeout: float) -> None:
    """``run(0)`` and ``run(delay)`` in two threads (``run`` sleeps its argument first)."""
    threads = [threading.Thread(target=run, args=(d,)) for d in (0.0, delay)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


def concurrent_runs(spark, work: Path, seed: int) -> Outcome:
    """Two runners of the same job and batch at once (threads on one warm session): the first is
    held in the middle of a seeded epoch, holding the job, while the second starts. The second
    must stop at once with JobBusy naming the first (include.runs.ownership) instead of the two
    aborting each other's attempts; the first, released, finishes the job; nothing is committed
    twice. (A second runner that starts after the first finished finds the job done.)"""

    rng = random.Random(f"concurrent:{seed}")
    w = pagerank_workload(work, seed)
    cfg = w.config(work)
    trace = work / "trace.jsonl"
    point = f"epoch.before_write@epoch={rng.randrange(0, PAGERANK_EPOCHS)}"
    holds = work / "holds"
    holds.mkdir()
    out = Outcome("two runs at once", seed, detail=f"second starts while the first is held at {point}")
    errors: dict[str, BaseException] = {}

    def run(name: str) -> None:
        try:
            IterationRunner(cfg, spark).run(batch_id="b1")
        except BaseException as e:  # noqa: BLE001 - recorded and judged below
            errors[name] = e

    with environment(**{failpoints.TRACE_ENV: str(trace), failpoints.DIR_ENV: str(holds)}):
        failpoints.configure(f"{point}=hold")
        first = threading.Thread(target=run, args=("first",))
        try:
            first.start()
            wait_held(holds, point, alive=first.is_alive, context=lambda: str(errors), poll=0.05)
            run("second")  # here, while the first holds the job
        finally:
            release_hold(holds, point)
            first.join(600)
            failpoints.configure("")
    out.runs += 2
    out.faults += 1
    second = errors.pop("second", None)
    if isinstance(second, JobBusy) and "is being run by process" in str(second):
        out.refused += 1
    elif second is not None:
        raise AssertionError(f"the second run failed otherwise: {type(second).__name__}: {second}")
    if errors:
        raise AssertionError(f"the run that held the job failed: {errors}")
    job = IterationJob(cfg)
    if job.log.latest(verify="none").head_state.status is not HeadStatus.TERMINATED:
        raise AssertionError("the run that held the job did not finish it")
    out.detail += f"; {out.refused} run(s) refused as busy"
    return audit(out, spark, w, cfg, trace, work)


def concurrent_processes(spark, work: Path, seed: int) -> Outcome:
    """Two ``run_job`` processes of the same job and batch at once (the full sweep only)."""
    import time

    rng = random.Random(f"concurrent-processes:{seed}")
    w = pagerank_workload(work, seed)
    cfg = w.config(work)
    trace = work / "trace.jsonl"
    delay = rng.uniform(0, 3)
    out = Outcome("two run processes at once", seed, detail=f"second starts after {delay:.2f}s")
    results: list[subprocess.CompletedProcess] = []
    env = {failpoints.TRACE_ENV: str(trace)}

    def run(wait: float) -> None:
        time.sleep(wait)
        results.append(run_process(w, cfg, env))

    two_at_once(run, delay, timeout=900)
    out.runs += 2
    out.faults += 1
    for r in results:
        if r.returncode != 0:
            if "is being run by process" not in r.stderr or "one run of a job at a time" not in r.stderr:
                raise AssertionError(f"a concurrent run failed otherwise: {r.stderr[-2000:]}")
            out.refused += 1
    if IterationJob(cfg).log.latest(verify="none").head_state.status is not HeadStatus.TERMINATED:
        resume(spark, cfg, trace)
        out.runs += 1
    return audit(out, spark, w, cfg, trace, work)


DAMAGES = ("delete a state file", "truncate a state file", "flip a byte of a state file", "damage the manifest")


def damaged_checkpoint(spark, work: Path, seed: int) -> Outcome:
    """The latest checkpoint is damaged after a crash: restoring refuses it with an error naming
    the object; asked to (``on_damaged_checkpoint="previous"``), the job falls back to the
    checkpoint before it and recomputes from there."""
    rng = random.Random(f"damaged:{seed}")
    w = pagerank_workload(work, seed)
    cfg = w.config(work)
    trace = work / "trace.jsonl"
    k, damage = rng.randrange(1, PAGERANK_EPOCHS - 1), rng.choice(DAMAGES)
    out = Outcome("damaged checkpoint", seed, detail=f"checkpoint {k}: {damage}")
    with environment(**{failpoints.TRACE_ENV: str(trace)}):
        IterationRunner(cfg, spark).run(max_epochs_in_batch=k + 1)
    out.runs += 1
    job = IterationJob(cfg)
    manifest = job.log.load(k)
    root = Path(cfg.checkpoint_root)
    if damage == "damage the manifest":
        victim = root / job.log.layout.checkpoint(k)
    else:
        victim = root / rng.choice(manifest.state_objects).key
    data = victim.read_bytes()
    if damage == "delete a state file":
        victim.unlink()
    elif damage == "truncate a state file":
        victim.write_bytes(data[: len(data) // 2])
    else:
        i = rng.randrange(len(data))
        victim.write_bytes(data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1:])
    out.faults += 1
    try:
        resume(spark, cfg, trace)
        raise AssertionError(f"the damaged checkpoint was used: {out.detail}")
    except CheckpointCorrupted as e:
        if "damaged" not in str(e) or "on_damaged_checkpoint='previous'" not in str(e):
            raise AssertionError(f"unclear refusal: {e}")
        out.refused += 1
    out.runs += 1
    fallback = dataclasses.replace(cfg, on_damaged_checkpoint="previous")
    result = resume(spark, fallback, trace)
    out.runs += 1
    if result.restored_from != k - 1 or IterationJob(cfg).log.retention.rejected().keys() != {k}:
        out.lost += 1
        out.detail += f"; fell back to {result.restored_from}, rejected {sorted(IterationJob(cfg).log.retention.rejected())}"
    return audit(out, spark, w, cfg, trace, work)


def chain_gap(spark, work: Path, seed: int) -> Outcome:
    """Holes in the checkpoint chain: a manifest in the middle deleted (the latest one is whole,
    so the job goes on from it; nobody can commit into the hole), or the newest manifest lost
    (the job goes on from the one before and computes the lost epoch again), and an
    attempt planned on an older checkpoint than the latest (its commit would leave a gap)."""
    from include.checkpoints.manifest import Manifest

    rng = random.Random(f"gap:{seed}")
    w = pagerank_workload(work, seed)
    cfg = w.config(work, retain_last=PAGERANK_EPOCHS)
    trace = work / "trace.jsonl"
    k = rng.randrange(1, PAGERANK_EPOCHS - 2)  # checkpoints 0..k+1 committed, the job still running
    which = ("middle", "newest")[seed % 2]  # CI runs one seed of each (tests/faults/test_sweep.py)
    out = Outcome("gap in the chain", seed, detail=f"{which} manifest of {k + 1} deleted")
    with environment(**{failpoints.TRACE_ENV: str(trace)}):
        IterationRunner(cfg, spark).run(max_epochs_in_batch=k + 1)
    out.runs += 1
    job = IterationJob(cfg)
    stale = job.attempts.plan_epoch()  # planned on checkpoint k ...
    IterationRunner(cfg, spark).run(max_epochs_in_batch=1)  # ... which is no longer the latest
    out.runs += 1
    try:
        job.log.commit(Manifest(**{**job.log.load(k, verify="none").__dict__, "checkpoint_id": k + 2,
                                   "parent_id": k, "attempt_id": stale.attempt_id}))
        raise AssertionError("a commit that leaves a gap was accepted")
    except CheckpointError as e:
        out.refused += 1 if "gap" in str(e) else 0
    out.faults += 1
    hole: set[int] = set()
    if which == "middle":
        victim = rng.randrange(1, k + 1)
        job.store.delete([job.log.layout.checkpoint(victim)])
        hole.add(victim)
        try:  # a zombie of the deleted checkpoint cannot fill the hole
            job.log.commit(Manifest(**{**job.log.load(k + 1, verify="none").__dict__, "checkpoint_id": victim,
                                       "parent_id": victim - 1, "attempt_id": "zombie"}))
            out.duplicated += 1
        except CheckpointSuperseded:
            out.refused += 1
    else:
        job.store.delete([job.log.layout.checkpoint(k + 1)])
    out.faults += 1
    result = resume(spark, cfg, trace)
    out.runs += 1
    if which == "newest":  # its attempt's plan and reports went with the commit's GC: computed again
        out.recomputed = int(k + 1 in result.epochs_computed)
        if result.restored_from != k:
            out.lost += 1
            out.detail += f"; resumed from {result.restored_from}, not {k}"
    out = audit(out, spark, w, cfg, trace, work, hole=hole)
    if which == "newest":  # the lost manifest's id was committed again (it was gone): not a duplicate
        out.duplicated = max(0, out.duplicated - 1)
    return out


def clock_skew(spark, work: Path, seed: int) -> Outcome:
    """The run that dies has a clock 10 minutes ahead (or behind) of the run that resumes:
    timestamps go backwards across the restart, ordering by checkpoint id does not."""
    rng = random.Random(f"skew:{seed}")
    w = pagerank_workload(work, seed)
    cfg = w.config(work)
    trace = work / "trace.jsonl"
    sign = rng.choice([+1, -1])
    k = rng.randrange(1, PAGERANK_EPOCHS - 1)
    out = Outcome("clock skew +-10 min", seed, detail=f"dying run {sign * 600:+d}s, resuming run {-sign * 600:+d}s")
    killed = run_process(w, cfg, {failpoints.ENV: f"commit.after_release@epoch={k}=kill",
                                  failpoints.SKEW_ENV: str(sign * 600), failpoints.TRACE_ENV: str(trace)})
    out.runs += 1
    out.faults += 1
    if killed.returncode != -signal.SIGKILL:
        raise AssertionError(f"clock skew run was not killed: {killed.stderr[-2000:]}")
    before = IterationJob(cfg).log.latest_id()
    with environment(**{failpoints.SKEW_ENV: str(-sign * 600)}):
        result = resume(spark, cfg, trace)
    out.runs += 1
    # as a kill scenario counts them (the kill after commit's, at a seeded epoch)
    out.duplicated += len([e for e in result.epochs_computed if before is not None and e <= before])
    out.recomputed = len([e for e in result.epochs_computed if e <= k])
    from datetime import datetime

    stamps = {e["checkpoint"]: datetime.fromisoformat(e["at"])
              for e in trace_events(trace) if e["event"] == "checkpoint.committed"}
    # checkpoint k was the dying run's last, k + 1 the resuming run's first: between their
    # stamps, the two clocks' difference (backwards for a dying run ahead, 20 minutes forwards
    # for one behind) plus the real time the restart took
    real = (stamps[k + 1] - stamps[k]).total_seconds() + 2 * sign * 600
    if not 0 <= real < 600:
        raise AssertionError(f"the skew did not show in the timestamps of checkpoints {k} and {k + 1}: "
                             f"{stamps[k].isoformat()} then {stamps[k + 1].isoformat()}")
    out.facts = {"sign": sign, "restart_seconds": round(real, 1), "restored_from": result.restored_from,
                 "epochs_computed": result.epochs_computed, "killed_at": k}
    return audit(out, spark, w, cfg, trace, work)


def s3_faults(spark, work: Path, seed: int, *, moto_endpoint: str, bucket: str) -> Outcome:
    """A whole run on S3 (moto_server) with 5-10% of all calls failing (500, 503, SlowDown,
    time-out) in the driver and the Spark workers, and the first manifest write's reply lost."""
    from include.store import S3Store
    from tests.conftest import S3_ENV

    rng = random.Random(f"s3:{seed}")
    rate = round(rng.uniform(0.05, 0.10), 3)
    w = pagerank_workload(work, seed)
    prefix = f"sweep-{seed}-{rng.randrange(1 << 30)}"
    cfg = dataclasses.replace(w.config(work), checkpoint_root=f"s3://{bucket}/{prefix}", retain_last=2)
    trace, fault_log = work / "trace.jsonl", work / "s3-faults.log"
    out = Outcome("S3 faults + lost commit reply", seed, detail=f"rate {rate}")
    done = run_process(w, cfg, {**S3_ENV, "ITERATIONS_S3_FAULTS": f"rate={rate},seed={seed},lose_reply=/checkpoints/",
                                "ITERATIONS_S3_FAULTS_LOG": str(fault_log), failpoints.TRACE_ENV: str(trace),
                                "AWS_ENDPOINT_URL": moto_endpoint})
    out.runs += 1
    faults = fault_log.read_text().splitlines() if fault_log.exists() else []
    out.faults += len(faults)
    if done.returncode != 0:
        out.lost += 1
        out.detail += f"; run failed: {done.stderr[-1500:]}"
        return out
    if not any(" lost-reply " in f for f in faults):
        raise AssertionError("the commit reply was not lost")
    store = S3Store(bucket, prefix, endpoint_url=moto_endpoint)
    job = IterationJob(cfg, store, store_options={"endpoint_url": moto_endpoint})
    audit_cfg = cfg
    with environment(AWS_ENDPOINT_URL=moto_endpoint, **S3_ENV):
        out = audit(out, spark, w, audit_cfg, trace, work)
    out.detail += f"; {len(faults)} S3 faults, kept checkpoints {job.log.checkpoint_ids()}"
    installed = {e["pid"] for e in trace_events(trace) if e["event"] == "s3_faults.installed"}
    out.facts = {"fault_processes": len({f.split()[0] for f in faults}), "installed_processes": len(installed),
                 "retried": "transient error" in done.stderr,
                 "kinds": sorted({f.split()[1] for f in faults}), "kept": job.log.checkpoint_ids()}
    return out


FINISH_POINTS = ("publish.after_output@checkpoint={e}@output=centroid_history",
                 "publish.before_output@checkpoint={e}@output=centroid_history",
                 "finish.before_final_checkpoint", "finish.after_final_checkpoint",
                 "publish.before_output@checkpoint={f}@output=centroids",
                 "publish.after_output@checkpoint={f}@output=assignments")


def finish_failures(spark, work: Path, seed: int) -> Outcome:
    """The finish lifecycle's failure points (issue 5), rerun here: the runner fails (an error
    raised in the process) at a seeded step of the outputs' two-phase commit; the next run
    publishes what is left, exactly once."""
    rng = random.Random(f"finish:{seed}")
    w = kmeans_workload(work, seed)
    cfg = w.config(work)
    trace = work / "trace.jsonl"
    point = rng.choice(FINISH_POINTS).format(e=rng.randrange(KMEANS_EPOCHS), f=KMEANS_EPOCHS)
    out = Outcome("finish/publication failures", seed, detail=point)
    failpoints.configure(f"{point}=raise")
    try:
        resume(spark, cfg, trace)
        raise AssertionError(f"{point} did not fail the run")
    except failpoints.FailpointError:
        out.faults += 1
    finally:
        failpoints.configure("")
    out.runs += 1
    resume(spark, cfg, trace)
    out.runs += 1
    return audit(out, spark, w, cfg, trace, work)


def coordinator_events(spark, work: Path, seed: int) -> Outcome:
    """The coordinator events test (issue 4), rerun here: two coordinators send 0..n-1 across
    epochs while failures hit seeded points (triggered, in the epoch, before/after the commit
    write, after the release, a refused check); the receiving side must see each once, in order."""
    from tests.integration.test_coordinator_events import (
        N_FAST,
        N_SLOW,
        received_sequences,
        run_with_failures,
    )

    runner, result, fired = run_with_failures(spark, work, seed)
    out = Outcome("coordinator events", seed, runs=len(fired) + 1, faults=len(fired),
                  detail=", ".join(f"{p}@{e}" for p, e in fired))
    got = received_sequences(runner)
    for name, n in (("fast", N_FAST), ("slow", N_SLOW)):
        seq = got[name]
        out.lost += len(set(range(n)) - set(seq))
        out.duplicated += len(seq) - len(set(seq))
        out.wrong += int(seq != sorted(seq) or seq != list(range(n)))
    return out


SCENARIOS: dict[str, Callable] = {
    **{name: kill_scenario(name) for name in KILL_POINTS},
    "zombie attempt": zombie,
    "two runs at once": concurrent_runs,
    "damaged checkpoint": damaged_checkpoint,
    "gap in the chain": chain_gap,
    "clock skew +-10 min": clock_skew,
    "finish/publication failures": finish_failures,
    "coordinator events": coordinator_events,
}
# slower: S3 (moto_server) and two Spark processes at once; in the full sweep
S3_SCENARIO = "S3 faults + lost commit reply"
PROCESS_SCENARIOS: dict[str, Callable] = {"two run processes at once": concurrent_processes}
