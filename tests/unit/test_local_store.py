"""The local-directory store: the embedded default, and the proof of single-winner commits."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from include.errors import ConfigError, ObjectNotFound, PermanentStoreError
from include.store import LocalStore, S3Store, open_store


def test_put_get_list_delete(tmp_path):
    store = LocalStore(tmp_path / "root")
    store.put("a/b/one.bin", b"1")
    store.put("a/b/two.bin", b"22")
    store.put("a/c.bin", b"333")
    assert store.get("a/b/two.bin") == b"22"
    assert [(o.key, o.size) for o in store.list("a/")] == [("a/b/one.bin", 1), ("a/b/two.bin", 2), ("a/c.bin", 3)]
    assert [o.key for o in store.list("a/b/t")] == ["a/b/two.bin"]
    assert store.info("a/c.bin").size == 3 and store.info("a/none") is None
    store.put("a/c.bin", b"x")  # replace
    assert store.get("a/c.bin") == b"x"
    store.delete(["a/b/one.bin", "a/b/two.bin", "a/missing"])
    assert [o.key for o in store.list("")] == ["a/c.bin"]
    assert not os.path.exists(tmp_path / "root" / "a" / "b"), "emptied directories are removed"
    with pytest.raises(ObjectNotFound, match="one.bin"):
        store.get("a/b/one.bin")


def test_put_if_absent_second_create_refused(tmp_path):
    store = LocalStore(tmp_path)
    assert store.put_if_absent("k/m.json", b"first") is True
    assert store.put_if_absent("k/m.json", b"second") is False
    assert store.get("k/m.json") == b"first"
    assert [o.key for o in store.list("k/")] == ["k/m.json"], "no temporary file is left behind"


@pytest.mark.parametrize("key", ["../escape", "/abs", "a/../../b", "a//b", "a/./b", "a\\b", "dir/", ""])
def test_keys_cannot_escape_the_root(tmp_path, key):
    store = LocalStore(tmp_path)
    with pytest.raises(PermanentStoreError, match="invalid object key"):
        store.put(key, b"x")


def _race(root: str, key: str, me: int, barrier, results) -> None:
    store = LocalStore(root)
    barrier.wait()
    results.put((me, store.put_if_absent(key, f"writer-{me}".encode())))


def test_single_winner_under_concurrent_writers(tmp_path):
    """16 processes create the same key at once, 20 rounds: exactly one wins each round, and
    the object holds the winner's complete content."""
    ctx = mp.get_context("fork")
    for round_ in range(20):
        key = f"checkpoints/{round_:04d}.json"
        barrier = ctx.Barrier(16)
        results = ctx.Queue()
        procs = [ctx.Process(target=_race, args=(str(tmp_path), key, i, barrier, results)) for i in range(16)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        outcomes = dict(results.get(timeout=5) for _ in procs)
        winners = [i for i, won in outcomes.items() if won]
        assert len(winners) == 1, f"round {round_}: winners {winners}"
        assert LocalStore(tmp_path).get(key) == f"writer-{winners[0]}".encode()


def test_open_store_urls(tmp_path):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    s3 = open_store("s3://my-bucket/some/prefix", endpoint_url="http://127.0.0.1:9")
    assert isinstance(s3, S3Store) and s3.bucket == "my-bucket" and s3.prefix == "some/prefix"
    with pytest.raises(ConfigError, match="no bucket"):
        open_store("s3:///x")
    with pytest.raises(ConfigError, match="unsupported store URL"):
        open_store("ftp://host/x")
    with pytest.raises(ConfigError, match="invalid S3 bucket name 'Bad_Bucket'"):
        open_store("s3://Bad_Bucket/x")


def test_spec_has_no_secrets():
    s3 = S3Store("bucket-a", "p", endpoint_url="http://e", access_key_id="AKIA_SECRET_ID",
                 secret_access_key="very-secret")
    text = repr(s3) + str(s3.spec())
    assert "very-secret" not in text and "AKIA_SECRET_ID" not in text


def test_open_an_existing_root_without_creating_it(tmp_path):
    missing = tmp_path / "no" / "such" / "root"
    for opener in (lambda: LocalStore(missing, create=False),
                   lambda: open_store(str(missing), create=False),
                   lambda: open_store(f"file://{missing}", create=False)):
        with pytest.raises(PermanentStoreError, match=f"local store root {missing} does not exist"):
            opener()
    assert not os.path.exists(tmp_path / "no"), "nothing is created"
    (tmp_path / "a-file").write_bytes(b"x")
    with pytest.raises(PermanentStoreError, match="a-file is not a directory"):
        open_store(str(tmp_path / "a-file"), create=False)

    (tmp_path / "root").mkdir()
    store = open_store(str(tmp_path / "root"), create=False, fsync=False,
                       endpoint_url="http://127.0.0.1:9", probe_conditional_writes=False)
    assert isinstance(store, LocalStore) and store.root == str(tmp_path / "root") and store.fsync is False
    store.put("k/x", b"1")
    assert store.get("k/x") == b"1"
    assert isinstance(open_store(str(tmp_path / "created"), create=True), LocalStore)
    assert os.path.isdir(tmp_path / "created"), "create=True (the default) still creates the root"
    # S3 accepts and ignores the local options, so one set of options serves both
    s3 = open_store("s3://my-bucket/p", endpoint_url="http://127.0.0.1:9", create=False, fsync=True)
    assert isinstance(s3, S3Store) and s3.bucket == "my-bucket"


def test_local_store_needs_no_conditional_write_probe(tmp_path):
    store = LocalStore(tmp_path)
    store.check_conditional_writes()
    store.check_conditional_writes()
    assert store.list("") == [], "nothing is written"
