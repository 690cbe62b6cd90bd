"""Publication of outputs (include.publication.outputs): a reader sees one whole version, never a mix."""

from __future__ import annotations

import json

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import FileRef
from include.checkpoints.manifest import DatasetRef
from include.errors import CheckpointCorrupted, OutputError
from include.publication.outputs import PUBLISHED, publish_dataset, published
from include.publication.publish import PublicationHistory
from include.store import STORE_MARKER, LocalStore, sha256_hex


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


def history(src, own: str, *family: str) -> PublicationHistory:
    """A generation's publication history: its own log, and those of the generations it replaces."""
    return PublicationHistory(CheckpointLog(src, own), [CheckpointLog(src, j) for j in family])


def versions(out) -> set[str]:
    return {o.key.split("/")[1] for o in out.list("ranks/") if not o.key.endswith(PUBLISHED)}


def test_republishing_replaces_in_one_step_and_keeps_one_previous_version(stores, tmp_path):
    src, out = stores
    publish_dataset(src, out, "ranks", staged(src, "j", [b"v1"]), stamp("j", 1), history=history(src, "j"))
    publish_dataset(src, out, "ranks", staged(src, "j.r1", [b"v2", b"v2b"]), stamp("j.r1", 1),
                    history=history(src, "j.r1", "j"))
    current = published(str(tmp_path / "out"), "ranks")
    assert current.job_id == "j.r1" and current.manifest["replaces"] == "v-j-1"
    assert versions(out) == {"v-j-1", "v-j.r1-1"}, "the replaced version stays for readers still on it"
    publish_dataset(src, out, "ranks", staged(src, "j.r2", [b"v3"]), stamp("j.r2", 1),
                    history=history(src, "j.r2", "j", "j.r1"))
    assert versions(out) == {"v-j.r1-1", "v-j.r2-1"}, "older versions of its history are deleted"


def test_publishing_never_deletes_a_file_it_did_not_write(stores, tmp_path):
    """The output location holds files of others (another job publishing there, a user's file, a
    version whose record points elsewhere): none of them is deleted, whatever the output's own
    manifests say; only the versions the publisher's history lists go."""
    src, out = stores
    out.put("ranks/v-other-7/part-00000.parquet", b"another job's version")
    out.put("ranks/notes.txt", b"a user's file")
    out.put("ranks/_increments/x.json", b"{}")
    publish_dataset(src, out, "ranks", staged(src, "j", [b"v1"]), stamp("j", 1), history=history(src, "j"))
    # a forged manifest naming someone else's files as the version it replaces
    forged = json.loads(out.get(f"ranks/{PUBLISHED}"))
    out.put(f"ranks/{PUBLISHED}", json.dumps({**forged, "version": "v-other-7",
                                               "files": [{"key": "ranks/notes.txt"}]}).encode())
    publish_dataset(src, out, "ranks", staged(src, "j.r1", [b"v2"]), stamp("j.r1", 1), history=history(src, "j.r1", "j"))
    publish_dataset(src, out, "ranks", staged(src, "j.r2", [b"v3"]), stamp("j.r2", 1),
                    history=history(src, "j.r2", "j", "j.r1"))
    assert out.get("ranks/v-other-7/part-00000.parquet") == b"another job's version"
    assert out.get("ranks/notes.txt") == b"a user's file" and out.exists("ranks/_increments/x.json")
    assert versions(out) == {"v-other-7", "notes.txt", "_increments", "v-j.r1-1", "v-j.r2-1"}
    # history read back from the store is checked too: a record listing keys outside its version
    log = CheckpointLog(src, "j.r3")
    log.publications.record_written(out.location(), "ranks", "v-j.r3-9", ["ranks/notes.txt", "../escape"])
    publish_dataset(src, out, "ranks", staged(src, "j.r4", [b"v4"]), stamp("j.r4", 1),
                    history=history(src, "j.r4", "j.r3"))
    assert out.get("ranks/notes.txt") == b"a user's file"


def test_without_a_history_nothing_is_deleted(stores):
    src, out = stores
    for job in ("j", "j.r1", "j.r2"):
        publish_dataset(src, out, "ranks", staged(src, job, [job.encode()]), stamp(job, 1))
    assert versions(out) == {"v-j-1", "v-j.r1-1", "v-j.r2-1"}


def test_bytes_that_fail_the_checkpoints_checksum_are_never_published(stores, tmp_path):
    src, out = stores
    ds = staged(src, "j", [b"good", b"bytes"])
    src.put(ds.files[1].key, b"BYTES")  # same size, other bytes: damaged after the commit
    with pytest.raises(CheckpointCorrupted, match="fails its checksum"):
        publish_dataset(src, out, "ranks", ds, stamp("j", 1))
    with pytest.raises(OutputError, match="no output 'ranks' is published"):
        published(str(tmp_path / "out"), "ranks")


def test_an_output_inside_a_checkpoint_store_is_refused(tmp_path):
    src = LocalStore(tmp_path / "ckpt")
    src.put(STORE_MARKER, b"{}")
    inside = LocalStore(tmp_path / "ckpt" / "jobs" / "other" / "checkpoints")
    with pytest.raises(OutputError, match="lies inside a checkpoint store"):
        publish_dataset(src, inside, "ranks", staged(src, "j", [b"x"]), stamp("j", 1))
    assert not inside.list(""), "nothing written there"


def test_an_older_checkpoint_of_a_job_never_replaces_a_newer_one(stores):
    src, out = stores
    publish_dataset(src, out, "ranks", staged(src, "j", [b"new"]), stamp("j", 5))
    with pytest.raises(OutputError, match="holds checkpoint 5 of job j: an older checkpoint \\(3\\)"):
        publish_dataset(src, out, "ranks", staged(src, "j", [b"old"]), stamp("j", 3))


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


@pytest.mark.parametrize("output_path", ["/data/out", "/data/a b/out/", "file:///data/out", "s3://bkt/pre/fix/",
                                         "s3a://bkt", "relative/out"])
def test_an_outputs_uri_is_its_stores_address_and_back(output_path):
    """The Asset URI of an output (computed from the text, as a DAG file does) names what the
    store publishes to, and gives the output back."""
    import pathlib

    from include.publication.outputs import output_of_uri, output_uri
    from include.store import open_store

    uri = output_uri(output_path, "ranks")
    where = open_store(output_path, create=False).url("ranks") if output_path.startswith("s3") else None
    if where is not None:
        assert uri == where
    else:
        local = output_path.removeprefix("file://")
        assert uri == pathlib.Path(local).absolute().joinpath("ranks").as_uri()
    back, name = output_of_uri(uri)
    assert name == "ranks" and output_uri(back, name) == uri


@pytest.mark.parametrize("uri", ["http://host/out/ranks", "s3://bucket-only", "s3:///no-bucket/x", "file://", "ranks"])
def test_what_is_not_an_outputs_uri_is_refused_naming_it(uri):
    from include.errors import ConfigError
    from include.publication.outputs import output_of_uri

    with pytest.raises(ConfigError, match="is not the URI of an output"):
        output_of_uri(uri)
