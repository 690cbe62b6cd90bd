"""Inputs and reference results shared by the integration tests."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Mapping

from include.contract.config import JobConfig


def graph_with_dangling(n: int = 40, p: float = 0.1, seed: int = 1):
    import networkx as nx

    g = nx.gnp_random_graph(n, p, seed=seed, directed=True)
    g.add_edge(0, n)  # n and n+1 have no out-edges
    g.add_edge(1, n + 1)
    g.add_edge(n + 1 - 2, n + 1)
    return g


def write_edges(path, graph) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("src,dst\n")
        for u, v in graph.edges():
            f.write(f"{u},{v}\n")
    return str(path)


def ranks_of(df) -> dict:
    return {row["node"]: row["rank"] for row in df.collect()}


def pagerank_config(tmp_path, edges_path, **kw) -> JobConfig:
    defaults = dict(
        job_id="pr",
        body="pagerank",
        input=edges_path if isinstance(edges_path, dict) else str(edges_path),
        checkpoint_root=str(tmp_path / "store"),
        max_epochs=40,
        tolerance=1e-9,
        num_partitions=3,
    )
    defaults.update(kw)
    return JobConfig(**defaults)


def failure_free_ranks(spark, edges, epochs: int, tmp_path, partitions: int) -> dict:
    """PageRank's ranks from the library runner with no fault: what a DAG run's must equal."""
    from spark_jobs.runner import IterationRunner

    reference = JobConfig(job_id="pr-ref", body="pagerank", input=edges, checkpoint_root=str(tmp_path / "ref"),
                          max_epochs=epochs, tolerance=0.0, num_partitions=partitions)
    return ranks_of(IterationRunner(reference, spark).run().outputs["ranks"])


def s3_checkpoint_ids(endpoint: str, bucket: str, job: str) -> list[int]:
    """The committed checkpoint ids of ``job`` in a store at ``s3://<bucket>/ckpt``."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"ckpt/jobs/{job}/checkpoints/") for o in page.get("Contents", [])]
    return sorted(int(k.rsplit("/", 1)[1][:-5]) for k in keys)


def s3_published_ranks(endpoint: str, prefix: str) -> dict:
    """The published ``ranks`` output under an S3 ``prefix``, node -> rank."""
    import io

    import boto3
    import pandas as pd

    from include.publication.outputs import published

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    current = published(prefix, "ranks", endpoint_url=endpoint)
    got = pd.concat([pd.read_parquet(io.BytesIO(s3.get_object(Bucket=loc.split("/")[2], Key=loc.split("/", 3)[3])
                                                ["Body"].read())) for loc in current.locations])
    return dict(zip(got["node"], got["rank"]))


def write_dag_file(folder, dag_id: str, body: str, *, epochs_per_batch: int, dag_options: Mapping[str, Any] = {},
                   **params: Any) -> str:
    """A DAG file of one ``iteration_dag`` in the DAGs folder ``folder`` (made if missing),
    ``<dag_id>_dag.py``, its ``job_params`` the keywords ``params`` and its other arguments
    ``dag_options``, written as literals; the folder's path (a test's ``AIRFLOW__CORE__DAGS_FOLDER``)."""
    os.makedirs(folder, exist_ok=True)
    args = ", ".join(f"{k}={v!r}" for k, v in params.items())
    options = "".join(f", {k}={v!r}" for k, v in dag_options.items())
    with open(os.path.join(folder, f"{dag_id}_dag.py"), "w") as f:
        f.write('# an Airflow DAG (Airflow\'s safe mode parses files that say "airflow" and "dag")\n'
                "from iterations.dag_factory import iteration_dag, job_params\n\n"
                f"dag = iteration_dag(dag_id={dag_id!r}, body={body!r}, params=job_params({args}),\n"
                f"                    epochs_per_batch={epochs_per_batch}{options})\n")
    return str(folder)


def read_published(output_path, name, **store_options):
    """The current published version of an output as one pandas DataFrame (a local store, or S3
    at ``endpoint_url`` or AWS_ENDPOINT_URL with the environment's credentials)."""
    import io

    import pandas as pd

    from include.publication.outputs import published

    def read(location: str) -> pd.DataFrame:
        if not location.startswith("s3://"):
            return pd.read_parquet(location)
        import boto3

        bucket, key = location[len("s3://"):].split("/", 1)
        s3 = boto3.client("s3", endpoint_url=store_options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL"),
                          region_name="us-east-1")
        return pd.read_parquet(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))

    return pd.concat([read(f) for f in published(str(output_path), name, **store_options).locations],
                     ignore_index=True)


@dataclass
class ViewStores:
    """Checkpoint stores filled by real PageRank runs, for the Iterations view's tests.

    ``finished`` (job ``pr-view``): two batches, ``b1`` (epochs 0-2) then ``b2`` (resumed from
    checkpoint 2, to convergence and publication), every checkpoint kept. ``refused`` (job
    ``pr-refused``): epochs 0-2 committed with ``retain_last=2`` (epoch 0 retired), then epoch 3's
    NaN ranks refused by the data checks (its attempt aborted, the report kept)."""

    root: str
    output_path: str
    finished: Any  # spark_jobs.runner.RunResult of the last batch
    batches: dict[str, Any]  # batch id -> RunResult
    refused_attempt: str
    refused_epoch: int


FINISHED_JOB = "pr-view"
B1_EPOCHS = 3  # batch b1 of the finished job: epochs 0..2
REFUSED_JOB = "pr-refused"


def fill_view_stores(spark, tmp_path) -> ViewStores:
    from include.epoch.job import DataCheckFailed
    from spark_jobs.runner import IterationRunner

    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(60, 0.08, seed=5))
    root, out = tmp_path / "store", tmp_path / "out"
    config = pagerank_config(tmp_path, edges, job_id=FINISHED_JOB, tolerance=1e-3, max_epochs=40,
                             body_params={"damping": 0.5}, retain_last=100, output_path=str(out))
    batches = {"b1": IterationRunner(config, spark).run(batch_id="b1", max_epochs_in_batch=B1_EPOCHS)}
    batches["b2"] = IterationRunner(config, spark).run(batch_id="b2")

    marker = tmp_path / "bad-input"
    marker.write_text("the input is bad while this file exists")
    refused = pagerank_config(tmp_path, edges, job_id=REFUSED_JOB, body="tests.faulty_bodies:FaultyPageRank",
                              tolerance=0.0, max_epochs=10, retain_last=2,
                              body_params={"fault": "nan", "at_epoch": 3, "while_exists": str(marker)})
    try:
        IterationRunner(refused, spark).run(batch_id="r1")
        raise AssertionError("the NaN ranks of epoch 3 were not refused")
    except DataCheckFailed as e:
        attempt = e.report.attempt_id
    return ViewStores(str(root), str(out), batches["b2"], batches, attempt, 3)


def tree(root: str) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``root`` with its size (-1 for a directory) and
    modification time: equal before and after means nothing was written there."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            out[os.path.relpath(path, root)] = (st.st_size if name in filenames else -1, st.st_mtime_ns)
    return out


class StatsdListener:
    """A StatsD server on loopback UDP: every metric line it receives (``name:value|type``)."""

    def __init__(self):
        import socket
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self):
        import socket

        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            self.lines += [line for line in data.decode(errors="replace").splitlines() if line]

    def env(self, prefix: str = "airflow") -> dict[str, str]:
        """Airflow's [metrics] settings that send StatsD here."""
        return {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(self.port), "AIRFLOW__METRICS__STATSD_PREFIX": prefix}

    def values(self, name: str, kind: str) -> list[float]:
        """The values received for metric ``name`` of StatsD type ``kind`` (``g``, ``ms``, ``c``), in order."""
        found = []
        for line in list(self.lines):
            stat, _, rest = line.partition(":")
            value, _, typ = rest.partition("|")
            if stat == name and typ.split("|")[0] == kind:
                found.append(float(value))
        return found

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def wait_held(holds, point: str, *, alive=lambda: True, context=lambda: "", timeout: float = 600,
              poll: float = 0.2) -> int:
    """Wait until a process stops at failure point ``point`` armed to ``hold`` (its ``.held`` file
    in the directory ``holds``); the pid of the process holding. Fails as soon as ``alive()`` is
    false (the run ended first) or after ``timeout`` seconds, with ``context()`` (a log's tail)."""
    import time

    path = os.path.join(holds, f"{point}.held")
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if not alive():
            raise AssertionError(f"the run ended before {point} was reached:\n{context()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{point} not reached in {timeout:.0f}s:\n{context()}")
        time.sleep(poll)
    return int(open(path).read())


def release_hold(holds, point: str) -> None:
    """Let the process held at failure point ``point`` go on."""
    open(os.path.join(holds, f"{point}.release"), "w").close()


@contextlib.contextmanager
def armed(holds: str, point: str, action: str = "hold"):
    """Failure point ``point`` armed with ``action`` (by default to hold where it is reached) for
    the block, in the file ``<holds>/armed`` that the processes read (``ITERATIONS_FAILPOINTS_FILE``,
    as the native stack's tests start its services); then disarmed, and whatever it holds
    released."""
    path = os.path.join(holds, "armed")
    with open(path, "w") as f:
        f.write(f"{point}={action}")
    try:
        yield point
    finally:
        open(path, "w").close()
        if action == "hold":
            release_hold(holds, point)


def lineage_events(path) -> list[dict]:
    """The OpenLineage events the provider's file transport wrote to ``path``, of the iteration
    tasks (those with the ``iterations`` run facet)."""
    import json

    if not os.path.exists(path):
        return []
    events = [json.loads(line) for line in open(path) if line.strip()]
    return [e for e in events if "iterations" in (e.get("run", {}).get("facets") or {})]


def publish_edges(output_path: str, graph, *, job: str, checkpoint: int, parts: int = 2) -> dict:
    """Publish ``graph``'s edges (src, dst) as output ``edges`` under local ``output_path``, as an
    upstream iteration job's finish does (include.publication.outputs.publish_dataset: a version of
    ``parts`` Parquet files, then the manifest), from a scratch store beside it; its manifest."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from include.checkpoints.head_state import FileRef
    from include.checkpoints.manifest import DatasetRef
    from include.publication.outputs import PUBLISHED, publish_dataset
    from include.store import LocalStore, sha256_hex

    edges = sorted(graph.edges())
    source = LocalStore(os.path.join(os.path.dirname(output_path.rstrip("/")), f".staging-{job}-{checkpoint}"))
    out = LocalStore(output_path)
    files = []
    for i in range(parts):
        chunk = edges[i::parts]
        buf = io.BytesIO()
        pq.write_table(pa.table({"src": [u for u, _ in chunk], "dst": [v for _, v in chunk]},
                                schema=pa.schema([("src", pa.int64()), ("dst", pa.int64())])), buf)
        blob = buf.getvalue()
        key = f"jobs/{job}/staged/edges/part-{i}.parquet"
        source.put(key, blob)
        files.append((FileRef(key, len(blob), sha256_hex(blob), len(chunk)),))
    publish_dataset(source, out, "edges", DatasetRef("{}", tuple(files)),
                    {"job_id": job, "checkpoint_id": checkpoint, "attempt_id": f"f{checkpoint}-abc"})
    return json.loads(out.get(f"edges/{PUBLISHED}"))


def tree_digest(root) -> dict[str, str]:
    """Every file under the directory ``root`` (relative path) with the SHA-256 of its bytes;
    empty when there is no such directory."""
    import hashlib

    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out
