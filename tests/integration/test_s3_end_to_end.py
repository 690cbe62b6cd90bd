"""A whole PageRank job with its input, checkpoints and outputs on S3 (moto_server over HTTP),
read and written by Spark without any Hadoop S3 connector."""

from __future__ import annotations

import io

import boto3
import networkx as nx
import pyarrow.parquet as pq
import pytest

from include.epoch.job import IterationJob
from include.errors import CheckpointCorrupted, InputChanged
from include.publication.outputs import published
from spark_jobs.runner import IterationRunner
from tests.helpers import graph_with_dangling, pagerank_config, ranks_of

pytestmark = [pytest.mark.spark, pytest.mark.s3]


@pytest.mark.slow  # a whole PageRank job over moto_server's HTTP
def test_pagerank_on_s3(spark, tmp_path, moto_endpoint, bucket):
    graph = graph_with_dangling(25, 0.15, seed=4)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    body = "src,dst\n" + "".join(f"{u},{v}\n" for u, v in graph.edges())
    half = len(body) // 2
    cut = body.index("\n", half) + 1
    s3.put_object(Bucket=bucket, Key="input/edges/part-0.csv", Body=body[:cut].encode())
    s3.put_object(Bucket=bucket, Key="input/edges/part-1.csv", Body=("src,dst\n" + body[cut:]).encode())

    options = {"endpoint_url": moto_endpoint}
    cfg = pagerank_config(
        tmp_path,
        {"path": f"s3://{bucket}/input/edges/", "format": "csv"},
        checkpoint_root=f"s3://{bucket}/checkpoints",
        output_path=f"s3://{bucket}/results",
        body_params={"damping": 0.3},  # converges in about 19 epochs (0.6: 45, each a round of S3 calls)
        tolerance=1e-10,
        max_epochs=100,
    )
    first = IterationRunner(cfg, spark, store_options=options).run(max_epochs_in_batch=3)
    assert first.checkpoint_id == 2
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="checkpoints/jobs/pr/checkpoints/")["Contents"]]
    assert keys == [f"checkpoints/jobs/pr/checkpoints/{i:010d}.json" for i in range(3)]

    # an input object rewritten with the same size: its ETag tells, and the resume is refused
    original = ("src,dst\n" + body[cut:]).encode()
    swapped = original.replace(b"\n", b"\r", 1) if b"\n" in original else original
    s3.put_object(Bucket=bucket, Key="input/edges/part-1.csv", Body=swapped)
    with pytest.raises(InputChanged, match=f"s3://{bucket}/input/edges/part-1.csv was rewritten \\(same size; ETag"):
        IterationRunner(cfg, spark, store_options=options).run()
    s3.put_object(Bucket=bucket, Key="input/edges/part-1.csv", Body=original)  # put back: the same ETag

    result = IterationRunner(cfg, spark, store_options=options).run()
    assert result.restored_from == 2 and result.epochs_computed[0] == 3
    ours = ranks_of(result.outputs["ranks"])
    reference = nx.pagerank(graph, alpha=0.3, tol=1e-15, max_iter=10_000)
    assert max(abs(ours[n] - reference[n]) for n in reference) < 1e-9

    current = published(f"s3://{bucket}/results", "ranks", **options)
    assert current.checkpoint_id == result.checkpoint_id and current.rows == len(ours)
    assert all(loc.startswith(f"s3://{bucket}/results/ranks/v-pr-") for loc in current.locations)
    table_rows = {}
    for loc in current.locations:
        key = loc[len(f"s3://{bucket}/"):]
        t = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
        table_rows.update(zip(t.column("node").to_pylist(), t.column("rank").to_pylist()))
    assert table_rows == ours

    job = IterationJob(cfg, store_options=options)
    final = job.restorer.state().latest
    job.log.load(final.checkpoint_id, verify="full")
    victim = final.outputs["ranks"].files[0].key
    s3.put_object(Bucket=bucket, Key=f"checkpoints/{victim}", Body=b"garbage")
    with pytest.raises(CheckpointCorrupted, match="has 7 bytes"):
        job.log.load(final.checkpoint_id)
