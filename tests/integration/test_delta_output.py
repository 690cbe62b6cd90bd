"""Outputs as a Delta Lake table (include.publication.outputs.publish_delta): one table version per
published checkpoint, never a duplicate, readable by deltalake and by Spark's Parquet reader."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from include.checkpoints.head_state import FileRef
from include.checkpoints.manifest import DatasetRef
from include.publication.outputs import publish_delta
from include.store import LocalStore, open_store, sha256_hex


def staged(store, job: str, rows: dict) -> DatasetRef:
    """Two staged Parquet files of ``rows`` split in halves, as a finish attempt leaves them."""
    table = pa.table(rows)
    half = table.num_rows // 2
    refs = []
    for i, part in enumerate((table.slice(0, half), table.slice(half))):
        buf = io.BytesIO()
        pq.write_table(part, buf)
        blob = buf.getvalue()
        key = f"jobs/{job}/attempts/f/outputs/ranks/part-{i:05d}.parquet"
        store.put(key, blob)
        refs.append((FileRef(key, len(blob), sha256_hex(blob), part.num_rows),))
    return DatasetRef("{}", tuple(refs))


def stamp(job: str, checkpoint: int) -> dict:
    return {"job_id": job, "checkpoint_id": checkpoint, "attempt_id": f"f{checkpoint}-0123456789ab"}


def test_one_version_per_published_checkpoint_and_none_twice(tmp_path, spark):
    from deltalake import DeltaTable

    src = LocalStore(tmp_path / "ckpt")
    uri = str(tmp_path / "tables" / "ranks")
    first = staged(src, "daily.d1", {"node": [1, 2, 3, 4], "rank": [0.1, 0.2, 0.3, 0.4]})
    assert publish_delta(src, uri, first, stamp("daily.d1", 7))
    assert not publish_delta(src, uri, first, stamp("daily.d1", 7)), "a re-published checkpoint adds no version"
    table = DeltaTable(uri)
    assert table.version() == 0
    assert sorted(table.to_pyarrow_table().to_pydict()["node"]) == [1, 2, 3, 4]

    recomputed = staged(src, "daily.d1.r1", {"node": [1, 2, 5], "rank": [0.5, 0.25, 0.25]})
    assert publish_delta(src, uri, recomputed, stamp("daily.d1.r1", 7))
    assert not publish_delta(src, uri, recomputed, stamp("daily.d1.r1", 7))
    table = DeltaTable(uri)
    assert table.version() == 1, "one version per published batch"
    assert dict(zip(*table.to_pyarrow_table().to_pydict().values())) == {1: 0.5, 2: 0.25, 5: 0.25}
    history = table.history()
    assert history[0]["iterations.job_id"] == "daily.d1.r1" and history[0]["iterations.checkpoint_id"] == "7"
    # the table's current files, read by Spark's plain Parquet reader
    rows = spark.read.parquet(*table.file_uris()).collect()
    assert {r["node"]: r["rank"] for r in rows} == {1: 0.5, 2: 0.25, 5: 0.25}
    # the previous version is still there for time travel
    assert sorted(DeltaTable(uri, version=0).to_pyarrow_table().to_pydict()["node"]) == [1, 2, 3, 4]


@pytest.mark.s3
def test_delta_table_on_s3(moto_endpoint, bucket):
    from deltalake import DeltaTable

    options = {"endpoint_url": moto_endpoint, "region": "us-east-1",
               "access_key_id": "testing-key-id", "secret_access_key": "testing-secret-key"}
    src = open_store(f"s3://{bucket}/ckpt", **options)
    uri = f"s3://{bucket}/tables/ranks"
    ds = staged(src, "j", {"node": ["a", "b"], "rank": [0.75, 0.25]})
    assert publish_delta(src, uri, ds, stamp("j", 3), store_options=options)
    assert not publish_delta(src, uri, ds, stamp("j", 3), store_options=options)
    storage = {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret-key"}
    table = DeltaTable(uri, storage_options=storage)
    assert table.version() == 0
    assert dict(zip(*table.to_pyarrow_table().to_pydict().values())) == {"a": 0.75, "b": 0.25}


def test_job_publishes_its_outputs_as_delta_tables_once(tmp_path, spark):
    """``output_format="delta"``: finish publishes each output as a Delta table; running the
    finished job again adds no version."""
    from deltalake import DeltaTable

    from spark_jobs.runner import IterationRunner
    from tests.helpers import (
        graph_with_dangling,
        pagerank_config,
        ranks_of,
        write_edges,
    )

    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(25, 0.15, seed=12))
    config = pagerank_config(tmp_path, edges, job_id="pr-delta", max_epochs=4, tolerance=0,
                             output_path=str(tmp_path / "out"), output_format="delta")
    result = IterationRunner(config, spark).run()
    assert result.published == {"ranks": str(tmp_path / "out" / "ranks")}
    table = DeltaTable(str(tmp_path / "out" / "ranks"))
    assert table.version() == 0
    assert dict(zip(*table.to_pyarrow_table().select(["node", "rank"]).to_pydict().values())) == \
        ranks_of(result.outputs["ranks"])
    IterationRunner(config, spark).run()
    assert DeltaTable(str(tmp_path / "out" / "ranks")).version() == 0
