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


@pytest.mark.parametrize("write", ["put", "put_if_absent", "write_stream"])
def test_a_key_may_be_an_object_and_a_prefix_as_in_s3(tmp_path, write, caplog):
    """Issue 64: a file where the store needs a directory (``aborted/<epoch>`` written by hand)
    failed every write under it (FileExistsError, NotADirectoryError). As in S3, ``a/b`` and
    ``a/b/c`` coexist: the file is kept as object ``a/b``, named in a warning, and the write goes on."""
    store = LocalStore(tmp_path)
    os.makedirs(tmp_path / "a")
    (tmp_path / "a" / "b").write_bytes(b"stray")
    with pytest.raises(ObjectNotFound):  # under a file: nothing, not NotADirectoryError
        store.get("a/b/c/d.json")
    assert store.info("a/b/c/d.json") is None
    writes = {"put": lambda k, v: store.put(k, v), "put_if_absent": lambda k, v: store.put_if_absent(k, v),
              "write_stream": lambda k, v: store.write_stream(k, iter([v]), verify=lambda: None)}
    writes[write]("a/b/c/d.json", b"mine")
    assert any(f"{tmp_path / 'a' / 'b'} is a file where the store needs a directory" in r.getMessage()
               and "kept as object 'a/b'" in r.getMessage() for r in caplog.records)
    assert store.get("a/b/c/d.json") == b"mine" and store.get("a/b") == b"stray"
    assert [(o.key, o.size) for o in store.list("a/")] == [("a/b", 5), ("a/b/c/d.json", 4)]
    assert [o.key for o in store.list("a/b/")] == ["a/b/c/d.json"], "a prefix lists what is under it, as S3's"
    assert store.info("a/b").size == 5 and store.info("a/b/c") is None, "a directory alone is no object"
    with open(store.local_path("a/b"), "rb") as f:
        assert f.read() == b"stray"
    assert store.put_if_absent("a/b", b"again") is False, "the key is taken"
    store.put("a/b", b"replaced")
    assert store.get("a/b") == b"replaced"
    store.delete(["a/b"])
    assert store.get("a/b/c/d.json") == b"mine" and store.info("a/b") is None
    store.delete(["a/b/c/d.json"])
    assert store.list("") == [] and os.listdir(tmp_path) == [], "emptied directories are removed"


def test_a_directory_where_an_object_goes_does_not_take_its_key(tmp_path):
    """The converse: a directory (made by hand) at a key the store writes, say a checkpoint's
    manifest: the create-if-absent write still decides, once."""
    store = LocalStore(tmp_path)
    os.makedirs(tmp_path / "checkpoints" / "0000000000.json")
    (tmp_path / "checkpoints" / "0000000000.json" / "junk").write_bytes(b"j")
    assert store.info("checkpoints/0000000000.json") is None
    with pytest.raises(ObjectNotFound):
        store.get("checkpoints/0000000000.json")
    assert store.put_if_absent("checkpoints/0000000000.json", b"manifest") is True
    assert store.put_if_absent("checkpoints/0000000000.json", b"another") is False
    assert store.get("checkpoints/0000000000.json") == b"manifest"
    assert [o.key for o in store.list("checkpoints/")] == ["checkpoints/0000000000.json",
                                                           "checkpoints/0000000000.json/junk"]


def test_writers_racing_past_a_stray_file_all_land_and_keep_it(tmp_path):
    """Several processes writing under one stray file at once: every write lands, the file is
    moved into its directory once and never lost."""
    (tmp_path / "aborted").write_bytes(b"stray")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_put_under, args=(str(tmp_path), f"aborted/0000000001/a{i}")) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    store = LocalStore(tmp_path)
    assert [o.key for o in store.list("")] == ["aborted", *(f"aborted/0000000001/a{i}" for i in range(4))]
    assert store.get("aborted") == b"stray" and not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def _put_under(root: str, key: str) -> None:
    LocalStore(root).put(key, key.encode())


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


@pytest.fixture
def full_filesystem(tmp_path):
    """A 1 MiB tmpfs (needs root: skipped elsewhere, as the chaos run's disk-full), unmounted after."""
    import subprocess

    where = tmp_path / "small"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "test-small", str(where)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.parametrize("write", ["put", "put_if_absent"])
def test_a_full_filesystem_is_named_and_leaves_no_partial_file(full_filesystem, write):
    """Found by the chaos run's disk-full: a write to a full filesystem failed with a bare
    "[Errno 28] No space left on device" from a lease's acquisition, naming no path, and left
    its partial temporary file behind. Now StoreFull names the key's path, the store and its
    free space; nothing of the write is left; once space is freed the same write lands."""
    from include.errors import StoreFull

    store = LocalStore(str(full_filesystem / "store"))
    store.put("jobs/a/small.json", b"{}")
    with pytest.raises(StoreFull, match=r"cannot write 2,097,152 bytes to .*jobs/a/leases/big: No space left on "
                                        r"device \(the local store at .*store; [0-9,]+ bytes free of [0-9,]+\)"):
        getattr(store, write)("jobs/a/leases/big", b"x" * (2 << 20))
    leftover = [os.path.join(d, f) for d, _, files in os.walk(full_filesystem) for f in files]
    assert leftover == [str(full_filesystem / "store" / "jobs" / "a" / "small.json")], leftover
    assert getattr(store, write)("jobs/a/leases/big", b"x" * (512 << 10)) in (None, True)
    assert store.get("jobs/a/small.json") == b"{}"
