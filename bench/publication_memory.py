"""How much memory publishing an output takes, by output size: it must not grow with the output.

For each size, a fresh process builds a checkpoint-like source (Parquet part files of a
``node``/``rank`` table, as a body's output is staged) and publishes it, measuring:

- ``py peak``: the Python heap's peak during the publication (tracemalloc: every ``bytes`` a
  get, a put or a copy holds);
- ``arrow peak``: Arrow's memory pool's peak (a table or record batches read from the files);
- ``rss +``: the process's peak resident memory above what it had before publishing (everything,
  Rust's Delta writer and boto3 included; coarse: the allocator keeps what it got);
- ``how``: how the files reached the output ("server-side": the S3 service copied them;
  "by the kernel": the kernel copied them, local to local, and the copy was read back and hashed;
  "streamed": a block at a time through this process).

Modes: ``parquet-local`` (local store to a local output), ``parquet-s3`` (S3 checkpoint store to
an S3 output on the same endpoint: server-side copies), ``parquet-to-s3`` (local store to an S3
output: streamed multipart uploads), ``delta-local`` (a Delta table written from a stream of
record batches). S3 is a moto_server started here.

    python -m bench.publication_memory                # 100k and 1M rows
    python -m bench.publication_memory --rows 1000000 20000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

MODES = ("parquet-local", "parquet-s3", "parquet-to-s3", "delta-local")


def _stage(store, rows: int, parts: int):
    """``rows`` rows of (node, rank) as ``parts`` Parquet files in ``store``, written a slice at
    a time; their DatasetRef."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from include.checkpoints import DatasetRef, FileRef

    refs = []
    per = -(-rows // parts)
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(parts):
            n = max(0, min(per, rows - i * per))
            path = os.path.join(scratch, f"part-{i}.parquet")
            with pq.ParquetWriter(path, pa.schema([("node", pa.int64()), ("rank", pa.float64())])) as w:
                for start in range(0, n, 1_000_000):
                    m = min(1_000_000, n - start)
                    nodes = np.arange(i * per + start, i * per + start + m, dtype=np.int64)
                    w.write_table(pa.table({"node": nodes, "rank": np.random.default_rng(i).random(m)}))
            import hashlib

            h = hashlib.sha256()
            with open(path, "rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
            key = f"jobs/bench/attempts/x/outputs/ranks/part-{i}.parquet"
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                store.write_stream(key, iter(lambda: f.read(1 << 20), b""), verify=lambda: None)
            refs.append((FileRef(key, size, h.hexdigest(), n),))
    return DatasetRef("{}", tuple(refs))


def _stores(mode: str, work: str, endpoint: str | None, bucket: str):
    from include.store import LocalStore, open_store

    options = {"endpoint_url": endpoint} if endpoint else {}
    bucket = f"s3://{bucket}/{os.path.basename(work)}"
    source = open_store(f"{bucket}/ckpt", **options) if mode == "parquet-s3" else LocalStore(os.path.join(work, "ckpt"))
    out_url = f"{bucket}/out" if mode in ("parquet-s3", "parquet-to-s3") else os.path.join(work, "out")
    return source, out_url, options


def stage(mode: str, rows: int, parts: int, endpoint: str | None, work: str, bucket: str) -> dict:
    """In this process: the source of ``mode``'s publication, as its DatasetRef's dict."""
    source, _, _ = _stores(mode, work, endpoint, bucket)
    return _stage(source, rows, parts).to_dict()


def measure(mode: str, endpoint: str | None, work: str, staged: dict, bucket: str) -> dict:
    """In this process (a fresh one: its peaks start empty): publish ``staged`` once under the
    probes; the figures."""
    import logging
    import resource
    import tracemalloc

    import pyarrow as pa

    from include.checkpoints import DatasetRef
    from include.publication import publish_dataset, publish_delta
    from include.store import open_store

    source, out_url, options = _stores(mode, work, endpoint, bucket)
    ds = DatasetRef.from_dict(staged)
    stamp = {"job_id": "bench", "checkpoint_id": 1, "attempt_id": "f1-abc"}
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    logging.getLogger("iterations").addHandler(handler)
    logging.getLogger("iterations").setLevel(logging.INFO)
    out = None if mode == "delta-local" else open_store(out_url, **options)
    for store in (source, out):  # S3 clients made before the peaks are taken: they are not data
        if hasattr(store, "client"):
            store.client  # noqa: B018
    if mode == "delta-local":
        import deltalake  # noqa: F401 - its runtime loaded before the peaks are taken
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    if mode == "delta-local":
        publish_delta(source, out_url, ds, stamp)
    else:
        publish_dataset(source, out, "ranks", ds, stamp)
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    how = next((m.rsplit(" copied ", 1)[1] for m in records if " copied " in m), "record batches")
    return {"mode": mode, "rows": ds.rows, "bytes": ds.size, "py_peak": py_peak,
            "arrow_peak": pa.default_memory_pool().max_memory(),
            "rss_growth": max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024, "how": how}


def _child(call: str) -> dict:
    code = f"import json; from bench.publication_memory import stage, measure; print(json.dumps({call}))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_root(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=_root())
    if done.returncode != 0:
        raise RuntimeError(f"{call[:60]} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def probe(mode: str, rows: int, parts: int = 4, endpoint: str | None = None, bucket: str = "bench") -> dict:
    """Stage ``rows`` rows in ``parts`` files in one process, publish them in a fresh one (S3:
    under ``bucket`` at ``endpoint``)."""
    work = tempfile.mkdtemp(prefix="pubmem-")
    try:
        staged = _child(f"stage({mode!r}, {rows}, {parts}, {endpoint!r}, {work!r}, {bucket!r})")
        return _child(f"measure({mode!r}, {endpoint!r}, {work!r}, {staged!r}, {bucket!r})")
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = parser.parse_args(argv)
    from bench.common import start_moto

    proc, endpoint = start_moto()
    try:
        mib = 1 << 20
        print(f"{'mode':14} {'rows':>11} {'output MiB':>10} {'py peak MiB':>11} {'arrow peak MiB':>14} "
              f"{'rss + MiB':>9}  how")
        for mode in args.modes:
            for rows in args.rows:
                r = probe(mode, rows, args.parts, endpoint)
                print(f"{mode:14} {rows:>11,} {r['bytes'] / mib:>10.1f} {r['py_peak'] / mib:>11.2f} "
                      f"{r['arrow_peak'] / mib:>14.2f} {r['rss_growth'] / mib:>9.1f}  {r['how']}", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
