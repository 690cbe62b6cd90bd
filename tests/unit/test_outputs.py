"""Publication of outputs (include.outputs): a reader sees one whole version, never a mix."""

from __future__ import annotations

import json

import pytest

from include.checkpoint import DatasetRef
from include.errors import OutputError
from include.head import FileRef
from include.outputs import PUBLISHED, publish_dataset, published
from include.store import LocalStore, sha256_hex


def staged(store, job: str, blobs: list[bytes]) -> DatasetRef:
    refs = []
    for i, blob in enumerate(blobs):
        key = f"jobs/{job}/attempts/x/outputs/ranks/part-{i}.parquet"
        store.put(key, blob)
        refs.append((FileRef(key, len(blob), sha256_hex(blob), 1),))
    return DatasetRef("{}", tuple(refs))


def stamp(job: str, checkpoint: int) -> dict:
    return {"job_id": job, "checkpoint_id": checkpoint, "attempt_id": f"f{checkpoint}-abc"}


@pytest.fixture
def stores(tmp_path):
    return LocalStore(tmp_path / "ckpt"), LocalStore(tmp_path / "out")


def test_publish_then_read_through_the_manifest(stores, tmp_path):
    src, out = stores
    assert publish_dataset(src, out, "ranks", staged(src, "j", [b"a", b"bb"]), stamp("j", 4))
    current = published(str(tmp_path / "out"), "ranks")
    assert (current.job_id, current.checkpoint_id, current.rows) == ("j", 4, 2)
    assert [open(p, "rb").read() for p in current.locations] == [b"a", b"bb"]
    assert not publish_dataset(src, out, "ranks", staged(src, "j", [b"a", b"bb"]), stamp("j", 4)), \
        "the same checkpoint is published once"


def test_republishing_replaces_in_one_step_and_keeps_one_previous_version(stores, tmp_path):
    src, out = stores
    publish_dataset(src, out, "ranks", staged(src, "j", [b"v1"]), stamp("j", 1))
    publish_dataset(src, out, "ranks", staged(src, "j.r1", [b"v2", b"v2b"]), stamp("j.r1", 1))
    current = published(str(tmp_path / "out"), "ranks")
    assert current.job_id == "j.r1" and current.manifest["replaces"] == "v-j-1"
    versions = {o.key.split("/")[1] for o in out.list("ranks/") if not o.key.endswith(PUBLISHED)}
    assert versions == {"v-j-1", "v-j.r1-1"}, "the replaced version stays for readers still on it"
    publish_dataset(src, out, "ranks", staged(src, "j.r2", [b"v3"]), stamp("j.r2", 1))
    versions = {o.key.split("/")[1] for o in out.list("ranks/") if not o.key.endswith(PUBLISHED)}
    assert versions == {"v-j.r1-1", "v-j.r2-1"}, "older versions are deleted"


def test_a_publication_that_died_before_the_switch_is_invisible_then_redone(stores, tmp_path):
    src, out = stores
    publish_dataset(src, out, "ranks", staged(src, "j", [b"old"]), stamp("j", 1))
    out.put("ranks/v-j.r1-1/part-00000.parquet", b"half")  # copied, then the process died
    assert published(str(tmp_path / "out"), "ranks").job_id == "j"
    publish_dataset(src, out, "ranks", staged(src, "j.r1", [b"new"]), stamp("j.r1", 1))
    assert [open(p, "rb").read() for p in published(str(tmp_path / "out"), "ranks").locations] == [b"new"]


def test_missing_or_foreign_manifest_is_a_clear_error(stores, tmp_path):
    _, out = stores
    with pytest.raises(OutputError, match="no output 'ranks' is published"):
        published(str(tmp_path / "out"), "ranks")
    out.put(f"ranks/{PUBLISHED}", json.dumps({"format": "other"}).encode())
    with pytest.raises(OutputError, match="is not a publication manifest"):
        published(str(tmp_path / "out"), "ranks")
