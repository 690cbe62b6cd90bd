"""Copying a checkpoint's file to an output (include.store.transfer): verified against the
checkpoint's size and SHA-256, never a whole file in memory, inside S3 where it can be."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from include.checkpoints.head_state import FileRef
from include.errors import CheckpointCorrupted, ObjectNotFound
from include.store import LocalStore, S3Store, sha256_hex
from include.store.transfer import copy_verified, verified_file

pytestmark = pytest.mark.s3

MIB = 1 << 20


def _blob(mib: int) -> bytes:
    return os.urandom(mib * MIB)


def _ref(store, key: str, data: bytes) -> FileRef:
    store.put(key, data)
    return FileRef(key, len(data), sha256_hex(data), 1)


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def s3(moto_endpoint, bucket):
    def store(prefix: str, **creds) -> S3Store:
        s = S3Store(bucket, prefix, endpoint_url=moto_endpoint, region="us-east-1", **creds)
        s.client  # noqa: B018 - made before any peak is taken: a client is not data
        return s
    return store


def test_local_to_local_is_copied_by_the_kernel_and_refuses_bytes_the_checkpoint_does_not_vouch_for(tmp_path):
    src, out = LocalStore(tmp_path / "ckpt"), LocalStore(tmp_path / "out")
    data = _blob(24)
    ref = _ref(src, "jobs/j/part-0.parquet", data)
    how = []
    peak = _peak(lambda: how.append(copy_verified(src, out, ref, "ranks/v-j-1/part-00000.parquet")))
    assert how == ["by the kernel"] and out.get("ranks/v-j-1/part-00000.parquet") == data
    assert peak < 3 * MIB, f"{peak} bytes held to copy a 24 MiB file"
    src.put(ref.key, data[:-1] + bytes([data[-1] ^ 1]))  # damaged after the checkpoint vouched for it
    with pytest.raises(CheckpointCorrupted, match="fails its checksum"):
        copy_verified(src, out, ref, "ranks/v-j-2/part-00000.parquet")
    assert out.list("ranks/v-j-2/") == [] and not [n for n in os.listdir(tmp_path / "out" / "ranks") if ".tmp-" in n]
    src.delete([ref.key])
    with pytest.raises(ObjectNotFound):
        copy_verified(src, out, ref, "ranks/v-j-3/part-00000.parquet")
    assert out.list("ranks/v-j-3/") == []


def test_s3_to_s3_is_copied_by_the_service_and_checked_by_its_checksum(s3):
    src, out = s3("ckpt"), s3("out")
    data = _blob(16)
    ref = _ref(src, "jobs/j/part-0.parquet", data)
    how = []
    peak = _peak(lambda: how.append(copy_verified(src, out, ref, "ranks/v-j-1/part-00000.parquet")))
    assert how == ["server-side"] and peak < MIB, f"{peak} bytes passed through the process"
    assert out.get("ranks/v-j-1/part-00000.parquet") == data
    wrong = FileRef(ref.key, ref.size, sha256_hex(b"another file"), 1)
    with pytest.raises(CheckpointCorrupted, match="fails its checksum"):
        copy_verified(src, out, wrong, "ranks/v-j-2/part-00000.parquet")
    assert out.info("ranks/v-j-2/part-00000.parquet") is None, "a copy that does not match is deleted"


def test_s3_to_s3_part_by_part_above_the_copy_limit_then_read_back(s3, monkeypatch):
    """An object over CopyObject's limit is copied with UploadPartCopy (the limit lowered here to
    5 MiB, S3's smallest part): no whole-object checksum comes back, so the copy is read back and
    hashed, a block at a time."""
    import include.store.s3 as s3_module

    monkeypatch.setattr(s3_module, "COPY_LIMIT", 5 * MIB)
    src, out = s3("ckpt"), s3("out")
    data = _blob(12)
    ref = _ref(src, "jobs/j/part-0.parquet", data)
    assert copy_verified(src, out, ref, "ranks/v-j-1/part-00000.parquet") == "server-side"
    assert out.get("ranks/v-j-1/part-00000.parquet") == data


def test_to_and_from_s3_of_another_account_streams_through_a_multipart_upload(s3, tmp_path):
    """Another account's store (other credentials) or a local one: streamed, one part of
    PART_SIZE in memory at a time; an upload that does not match is aborted: nothing appears."""
    from include.store.s3 import PART_SIZE

    local = LocalStore(tmp_path / "ckpt")
    data = _blob(20)
    ref = _ref(local, "jobs/j/part-0.parquet", data)
    out = s3("out")
    how = []
    peak = _peak(lambda: how.append(copy_verified(local, out, ref, "ranks/v-j-1/part-00000.parquet")))
    assert how == ["streamed"] and out.get("ranks/v-j-1/part-00000.parquet") == data
    assert peak < 2 * PART_SIZE + 2 * MIB, f"{peak} bytes held to upload a 20 MiB file"
    other = s3("out", access_key_id="another-account", secret_access_key="x")
    assert copy_verified(out, other, FileRef("ranks/v-j-1/part-00000.parquet", ref.size, ref.sha256, 1),
                         "ranks/v-j-3/part-00000.parquet") == "streamed"
    local.put(ref.key, data[:-1])
    with pytest.raises(CheckpointCorrupted, match=f"has {len(data) - 1} bytes, the manifest says {len(data)}"):
        copy_verified(local, out, ref, "ranks/v-j-2/part-00000.parquet")
    assert out.info("ranks/v-j-2/part-00000.parquet") is None
    assert out.client.list_multipart_uploads(Bucket=out.bucket).get("Uploads", []) == [], "the upload was aborted"
    back = LocalStore(tmp_path / "back")
    assert copy_verified(out, back, FileRef("ranks/v-j-1/part-00000.parquet", ref.size, ref.sha256, 1),
                         "x/part-00000.parquet") == "streamed" and back.get("x/part-00000.parquet") == data


def test_a_verified_file_is_checked_before_it_is_given(s3, tmp_path):
    local, remote = LocalStore(tmp_path / "ckpt"), s3("ckpt")
    data = _blob(2)
    for store in (local, remote):
        ref = _ref(store, "jobs/j/part-0.parquet", data)
        with verified_file(store, ref) as path:
            assert open(path, "rb").read() == data
        bad = FileRef(ref.key, ref.size, sha256_hex(b"x"), 1)
        with pytest.raises(CheckpointCorrupted):
            with verified_file(store, bad):
                pytest.fail("a file that does not match is never given")


def test_publication_memory_does_not_grow_with_the_output(moto_endpoint, bucket):
    """bench.publication_memory's probe, each publication in a fresh process: 1M then 4M rows of
    (node, rank), as Parquet to a local output (copied by the kernel), to S3 from an S3 store (copied by the
    service), to S3 from a local store (multipart, one file of 1M or 4M rows: parts), and as a
    Delta table (record batches). The Python heap's peak stays where it was for an output four
    times larger, and Arrow's under the table's size; a publication that held a file or the table
    whole would not (before streaming: 24 and 71 MiB at 4M rows, bench/RESULTS.md)."""
    from bench.publication_memory import probe
    from include.store.s3 import PART_SIZE

    for mode, parts in (("parquet-local", 2), ("parquet-s3", 2), ("parquet-to-s3", 1), ("delta-local", 2)):
        small, large = (probe(mode, rows, parts, moto_endpoint, bucket) for rows in (1_000_000, 4_000_000))
        assert large["bytes"] > 3 * small["bytes"] > 30 * MIB
        assert large["py_peak"] <= small["py_peak"] + 3 * MIB, (mode, small, large)
        # the rows in Arrow (8-byte node and rank), which a publication that read them whole held
        # (and more: 71 MiB at 4M rows); the Delta writer keeps some batches, more when the
        # machine is busy (26 MiB at 4M rows alone, 37 MiB under the whole suite), never the table
        assert large["arrow_peak"] < 0.8 * large["rows"] * 16, (mode, small, large)
        bound = 2.5 * PART_SIZE if mode == "parquet-to-s3" else large["bytes"] / 8  # one part at a time
        assert large["py_peak"] < bound, (mode, large)
        assert large["how"] == {"parquet-s3": "server-side", "delta-local": "record batches",
                                "parquet-local": "by the kernel"}.get(mode, "streamed")
