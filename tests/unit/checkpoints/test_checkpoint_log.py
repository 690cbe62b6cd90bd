"""The checkpoint log's invariants (docs/design.md, "Rules of the store"), without Spark."""

from __future__ import annotations

import json
import logging
import os
import threading

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.head_state import AlignmentDecision, EpochReport, FileRef, HeadStatus, JobHeadState
from include.checkpoints.manifest import DatasetRef, Manifest
from include.errors import (
    CheckpointCorrupted,
    CheckpointError,
    CheckpointSuperseded,
    ConfigError,
)
from include.store import LocalStore, sha256_hex

P = 2


def write_attempt(log: CheckpointLog, epoch: int, attempt: str, parent: int | None, payload: bytes = b"data") -> Manifest:
    """What the tail of an attempt leaves behind, and the manifest that would commit it."""
    log.start_attempt(epoch, attempt, {"epoch": epoch})
    parts = []
    for p in range(P):
        key = f"{log.layout.attempt(epoch, attempt)}/ranks/part-{p:05d}-0.parquet"
        blob = payload + bytes([p])
        log.store.put(key, blob)
        parts.append((FileRef(key, len(blob), sha256_hex(blob), 1),))
    decision = AlignmentDecision(epoch, attempt, False, None, P, {})
    return Manifest(
        job_id=log.job_id, checkpoint_id=epoch, kind="epoch", epoch=epoch, parent_id=parent,
        attempt_id=attempt, batch_id=None, num_partitions=P, body={"name": "test"},
        head_state=JobHeadState.initial(["ranks"], P), decision=decision,
        variables={"ranks": DatasetRef("{}", tuple(parts))},
    )


@pytest.fixture
def log(tmp_path):
    return CheckpointLog(LocalStore(tmp_path), "job-1")


def test_commit_then_restore(log):
    m = write_attempt(log, 0, "a0", None)
    outcome = log.commit(m)
    assert outcome.first_write and log.latest_id() == 0
    restored = log.load(0, verify="full")
    assert restored.attempt_id == "a0" and restored.variables == m.variables
    assert restored.committed_at, "commit time is recorded (for people; never used for ordering)"


def test_commit_is_idempotent_for_the_same_attempt(log):
    m = write_attempt(log, 0, "a0", None)
    log.commit(m)
    again = log.commit(m)
    assert not again.first_write and log.checkpoint_ids() == [0]


def test_second_attempt_is_superseded(log):
    winner = write_attempt(log, 0, "a0", None)
    loser = write_attempt(log, 0, "b0", None)
    log.commit(winner)
    with pytest.raises(CheckpointSuperseded, match="committed by a0; attempt b0 is superseded"):
        log.commit(loser)
    assert log.load(0).attempt_id == "a0"


def test_concurrent_commits_have_one_winner(log):
    manifests = [write_attempt(log, 0, f"a{i}", None) for i in range(12)]
    results, barrier = {}, threading.Barrier(12)

    def commit(m):
        barrier.wait()
        try:
            log.commit(m)
            results[m.attempt_id] = "committed"
        except CheckpointSuperseded:
            results[m.attempt_id] = "superseded"

    threads = [threading.Thread(target=commit, args=(m,)) for m in manifests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results.values()).count("committed") == 1
    winner = next(a for a, r in results.items() if r == "committed")
    assert log.load(0).attempt_id == winner


def test_lost_response_retry_reads_back(log, monkeypatch):
    """The manifest write lands but the caller never hears it: the retry sees the key taken,
    reads it back, finds its own attempt, and succeeds without a second write."""
    m = write_attempt(log, 0, "a0", None)
    real = log.store.put_if_absent
    calls = []

    def lost_reply(key, data):
        calls.append(key)
        real(key, data)
        if len(calls) == 1:
            raise ConnectionError("reply lost")
        return real(key, data)

    monkeypatch.setattr(log.store, "put_if_absent", lost_reply)
    with pytest.raises(ConnectionError):
        log.commit(m)
    outcome = log.commit(m)
    assert outcome.first_write is False and log.load(0).attempt_id == "a0"


def test_chain_cannot_have_gaps(log):
    log.commit(write_attempt(log, 0, "a0", None))
    with pytest.raises(CheckpointError, match="planned on checkpoint None, but the latest committed is 0"):
        log.commit(write_attempt(log, 1, "a1", None))
    with pytest.raises(CheckpointError, match="the chain would have a gap"):
        log.commit(write_attempt(log, 2, "a2", 0))


def test_abort_is_idempotent_and_leaves_no_files(log):
    write_attempt(log, 0, "a0", None)
    assert log.abort(0, "a0", "test") is True
    assert log.abort(0, "a0") is True
    assert log.store.list(log.layout.attempt(0, "a0") + "/") == []
    assert log.is_aborted(0, "a0")
    log.commit(write_attempt(log, 0, "a1", None))  # an aborted attempt does not block the next
    assert log.load(0).attempt_id == "a1"


def test_abort_of_the_committed_attempt_is_a_no_op(log):
    m = write_attempt(log, 0, "a0", None)
    log.commit(m)
    assert log.abort(0, "a0") is False
    log.load(0, verify="full")


def test_damaged_object_is_refused(log):
    m = write_attempt(log, 0, "a0", None)
    log.commit(m)
    victim = m.variables["ranks"].partitions[1][0].key
    log.store.put(victim, b"dat\x00\x00")  # same size, other bytes
    log.load(0, verify="sizes")
    with pytest.raises(CheckpointCorrupted, match=r"part-00001-0.parquet fails its checksum"):
        log.load(0, verify="full")
    log.store.put(victim, b"longer than before")
    with pytest.raises(CheckpointCorrupted, match=r"part-00001-0.parquet has 18 bytes, the manifest says 5"):
        log.load(0)
    log.store.delete([victim])
    with pytest.raises(CheckpointCorrupted, match=r"part-00001-0.parquet is missing"):
        log.load(0)


def test_damaged_manifest_is_refused(log):
    log.commit(write_attempt(log, 0, "a0", None))
    key = log.layout.checkpoint(0)
    doc = json.loads(log.store.get(key))
    doc["epoch"] = 7
    log.store.put(key, json.dumps(doc).encode())
    with pytest.raises(CheckpointCorrupted, match="fails its own checksum"):
        log.load(0)


def test_retention_keeps_last_r_and_batch_finals(log):
    manifests = []
    for e in range(6):
        log.commit(write_attempt(log, e, f"a{e}", e - 1 if e else None))
        manifests.append(log.load(e))
        if e == 1:
            log.batches.record_final("batch-1", 1)
    report = log.retention.collect_garbage(retain_last=2)
    assert report.retired == [0, 2, 3]
    for cid in (0, 2, 3):  # the retired marker keeps the decision, for the job's history
        m, summary = manifests[cid], log.retention.retired_summary(cid)
        assert summary == {"checkpoint_id": cid, "kind": "epoch", "epoch": cid, "parent_id": m.parent_id,
                           "attempt_id": f"a{cid}", "batch_id": m.batch_id, "committed_at": m.committed_at,
                           "metrics": m.decision.metrics, "feedback_count": m.decision.feedback_count,
                           "terminated": m.decision.terminated, "reason": m.decision.reason,
                           "history": m.history}
    assert log.retention.retired_summary(4) is None
    assert log.checkpoint_ids() == [1, 4, 5]
    for cid in (1, 4, 5):
        log.load(cid, verify="full")
    with pytest.raises(CheckpointError, match="retired by retention"):
        log.load(3)
    # A zombie can never commit a retired id again: the key stays taken.
    with pytest.raises(CheckpointSuperseded):
        log.commit(write_attempt(log, 3, "zombie", 2))
    assert log.retention.collect_garbage(retain_last=2).retired == []


def test_gc_spares_live_attempts_and_deletes_superseded(log):
    log.commit(write_attempt(log, 0, "a0", None))
    write_attempt(log, 0, "late", None)  # superseded: epoch 0 is committed
    write_attempt(log, 1, "running", 0)  # live: may still commit checkpoint 1
    write_attempt(log, 1, "dead", 0)
    log.abort(1, "dead")
    report = log.retention.collect_garbage(retain_last=1)
    assert report.kept_live_attempts == ["1/running"]
    assert log.store.list(log.layout.attempt(0, "late") + "/") == []
    assert log.store.list(log.layout.attempt(1, "running") + "/")
    assert log.is_aborted(1, "dead"), "the abort mark stays while epoch 1 is open"
    log.load(0, verify="full")
    log.commit(write_attempt(log, 1, "next", 0))
    log.retention.collect_garbage(retain_last=1)
    assert not log.is_aborted(1, "dead"), "once epoch 1 is committed its abort marks are dropped"
    assert log.attempt_ids(1) == ["next"]


def test_retain_last_must_be_positive(log):
    with pytest.raises(ConfigError, match="retain_last must be >= 1, got 0"):
        log.retention.collect_garbage(0)


def test_head_state_round_trips_in_the_manifest(log):
    from include.checkpoints.head_state import EpochReport

    m = write_attempt(log, 0, "a0", None)
    reports = [EpochReport("ranks", p, 0, "a0", 3 + p) for p in range(P)]
    state = m.head_state.after(AlignmentDecision(0, "a0", True, "x", 7, {}), reports)
    m = Manifest(**{**m.__dict__, "head_state": state})
    log.commit(m)
    restored = log.load(0).head_state
    assert restored == state
    assert restored.status is HeadStatus.TERMINATING
    assert restored.feedback_counts() == {0: 7}


def test_rewind_rejects_later_checkpoints_and_fences_their_attempts(log):
    for e in range(4):
        log.commit(write_attempt(log, e, f"a{e}", e - 1 if e else None))
    log.batches.record_final("b1", 3)
    log.publications.record(3, "ranks", {"location": "x"})
    zombie = write_attempt(log, 2, "z2", 1)  # another attempt of a rejected epoch, still running

    rejected = log.retention.rewind(1, "checkpoint 2 is damaged (test)")

    assert rejected == [2, 3] and log.latest_id() == 1 and log.checkpoint_ids() == [0, 1]
    records = log.retention.rejected()
    assert sorted(records) == [2, 3] and records[2]["reason"] == "checkpoint 2 is damaged (test)"
    assert json.loads(records[3]["manifest"])["attempt_id"] == "a3", "the rejected manifest is kept as evidence"
    assert log.batches.finals() == {} and log.publications.of(3) == {}
    assert log.is_aborted(2, "a2") and log.is_aborted(2, "z2") and log.is_aborted(3, "a3")
    assert log.abort_reason(2, "z2").startswith("rejected: rewound to checkpoint 1")
    # the epochs after 1 are committed again, by new attempts, in order
    log.commit(write_attempt(log, 2, "n2", 1))
    assert log.latest_id() == 2 and log.committed_by(2) == "n2"
    assert zombie.attempt_id == "z2" and log.retention.rewind(2, "nothing later") == []


def test_rewind_needs_a_kept_checkpoint(log):
    log.commit(write_attempt(log, 0, "a0", None))
    with pytest.raises(CheckpointError, match="does not exist"):
        log.retention.rewind(5, "no such checkpoint")


def commit_as_the_runtime_does(log: CheckpointLog, m: Manifest) -> None:
    """Committer._commit_manifest: the attempt's fate claimed for the commit, then the
    single-winner manifest write."""
    log.claim_commit(m.checkpoint_id, m.attempt_id)
    log.commit(m)


def test_an_abort_after_the_commit_claimed_the_attempt_deletes_nothing(log):
    """The interleaving that lost a committed checkpoint's files: abort found the checkpoint not
    committed yet, commit found no abort mark, commit wrote its manifest, abort deleted the files.
    The attempt's fate is decided once: here the commit claimed it first."""
    m = write_attempt(log, 0, "a0", None)
    log.claim_commit(0, "a0")                              # commit: fate claimed
    assert log.abort(0, "a0", reason="a retry fenced it") is False  # abort: sees the claim, deletes nothing
    log.commit(m)                                          # commit: manifest written
    assert log.load(0, verify="full").attempt_id == "a0", "every file the checkpoint references is there"
    assert not log.is_aborted(0, "a0") and log.abort_reason(0, "a0") is None


def test_a_commit_after_the_abort_claimed_the_attempt_is_refused(log):
    m = write_attempt(log, 0, "a0", None)
    assert log.abort(0, "a0", reason="fenced by its retry") is True
    with pytest.raises(CheckpointSuperseded, match="a0 of checkpoint 0 .* was aborted \\(fenced by its retry\\)"):
        commit_as_the_runtime_does(log, m)
    assert log.latest_id() is None
    assert log.abort(0, "a0") is True, "abort stays idempotent"


def test_a_retried_commit_finds_its_own_claim(log):
    m = write_attempt(log, 0, "a0", None)
    log.claim_commit(0, "a0")  # the first try died after its claim
    commit_as_the_runtime_does(log, m)
    assert log.load(0, verify="full").attempt_id == "a0"


def test_abort_and_commit_racing_never_leave_a_checkpoint_without_its_files(log):
    """Abort and commit of one attempt in two threads, many times: exactly one wins, and a
    committed checkpoint always verifies in full."""
    outcomes = []
    for epoch in range(40):
        m = write_attempt(log, epoch, f"a{epoch}", epoch - 1 if epoch else None)
        barrier, result = threading.Barrier(2), {}

        def commit():
            barrier.wait()
            try:
                commit_as_the_runtime_does(log, m)
                result["commit"] = True
            except CheckpointSuperseded:
                result["commit"] = False

        def abort():
            barrier.wait()
            result["abort"] = log.abort(epoch, m.attempt_id, reason="raced")

        threads = [threading.Thread(target=commit), threading.Thread(target=abort)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert result["commit"] != result["abort"], result
        if result["commit"]:
            assert log.load(epoch, verify="full").attempt_id == m.attempt_id
        else:
            assert log.latest_id() == (epoch - 1 if epoch else None)
            twin = write_attempt(log, epoch, f"b{epoch}", epoch - 1 if epoch else None)
            commit_as_the_runtime_does(log, twin)  # the epoch goes on with another attempt
        outcomes.append(result["commit"])
    assert len(outcomes) == 40


def write_tail(job, plan) -> None:
    """What an epoch's Spark job leaves for the commit: a feedback file and a report per partition."""
    for p in range(plan.num_partitions):
        key = f"{job.log.layout.attempt(plan.epoch, plan.attempt_id)}/ranks/part-{p:05d}-0.parquet"
        job.store.put(key, b"ranks")
        job.store.put(job.log.layout.report(plan.epoch, plan.attempt_id, "ranks", p), EpochReport(
            "ranks", p, plan.epoch, plan.attempt_id, 5, {"delta": 1.0}, (FileRef(key, 5, sha256_hex(b"ranks"), 1),),
            "{}").to_json().encode())


@pytest.mark.parametrize("folder", ["aborted", "checks", "attempts"])
@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_stray_file_named_like_an_epoch_directory_is_reported_and_stepped_around(kind, folder, tmp_path, request,
                                                                                   caplog):
    """Issue 64: a file ``jobs/<job>/<folder>/<epoch>`` (written by hand, not by the store) failed
    every commit and abort of that epoch on a local store (FileExistsError, NotADirectoryError:
    the store could not make the directory). It is kept, reported naming its key, and the epoch
    aborts and commits; S3, where the key and the prefix coexist, behaves the same."""
    import networkx as nx

    from include.contract.config import JobConfig
    from include.epoch.job import IterationJob
    from tests.helpers import write_edges

    caplog.set_level(logging.WARNING)
    if kind == "s3":
        root, options = f"s3://{request.getfixturevalue('bucket')}/ckpt", \
            {"endpoint_url": request.getfixturevalue("moto_endpoint")}
    else:
        root, options = str(tmp_path / "store"), None
    edges = write_edges(tmp_path / "edges.csv", nx.DiGraph([(i, (i + 1) % 10) for i in range(10)]))
    job = IterationJob(JobConfig(job_id="pr", body="pagerank", input=str(edges), checkpoint_root=root,
                                 num_partitions=2), store_options=options)
    stray = f"{job.log.layout.root}/{folder}/0000000000"
    if kind == "local":  # a file put there by hand, where the store makes the epoch's directory
        os.makedirs(os.path.dirname(job.store.local_path(stray)))
        with open(job.store.local_path(stray), "wb") as f:
            f.write(b"not the store's")
    else:
        job.store.put(stray, b"not the store's")
    assert not job.log.has_started(), "a stray key is not an attempt"

    first = job.attempts.plan_epoch()
    assert job.attempts.abort(first, "its retry took over") is True
    assert job.log.abort_reason(0, first.attempt_id) == "its retry took over"
    plan = job.attempts.plan_epoch()
    assert plan.attempt_id != first.attempt_id
    write_tail(job, plan)
    assert job.committer.commit(plan).checkpoint_id == 0
    committed = job.log.load(0, verify="full")
    assert committed.attempt_id == plan.attempt_id
    assert [(a["attempt_id"], a["reason"]) for a in committed.history["attempts"]] == \
        [(first.attempt_id, "its retry took over")]
    assert job.log.attempt_ids(0) == [plan.attempt_id]  # the aborted one's files are deleted

    assert job.store.get(stray) == b"not the store's", "the stray key is kept, as it was"
    assert stray in {o.key for o in job.store.list(f"{job.log.layout.root}/{folder}/")}
    where = job.store.location(stray)
    assert any(r.getMessage().startswith(f"ignoring {where}: not an object the checkpoint store wrote")
               for r in caplog.records), [r.getMessage() for r in caplog.records]
