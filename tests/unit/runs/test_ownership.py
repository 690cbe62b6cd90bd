"""Job ownership and the job lease (include.runs.ownership): a job belongs to the DAG, body, input
and output that started it; one run writes it at a time, fenced by the lease's token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from include.errors import CheckpointCorrupted
from include.runs.leases import Holder, JobLease
from include.runs.ownership import (
    JobBusy,
    JobOwner,
    LeaseLost,
    OwnershipError,
    check_claim,
    claim,
    read_owner,
)
from include.store import LocalStore

INPUT = {"path": "/data/edges.csv", "format": "csv", "options": {}}
PAGERANK = "spark_jobs.bodies.pagerank:PageRank"


def owner(**changes) -> JobOwner:
    base = {"dag_id": "iterate_pagerank", "body": PAGERANK, "input": INPUT, "output_path": "/out/pr"}
    return JobOwner(**{**base, **changes})


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "store")


def test_the_first_claim_records_the_owner_and_the_same_owner_continues(store):
    assert read_owner(store, "pr") is None
    assert claim(store, "pr", owner()) == owner()
    assert read_owner(store, "pr") == owner()
    assert claim(store, "pr", owner()) == owner(), "the same DAG, body, input and output continue the job"


@pytest.mark.parametrize("field,value", [
    ("dag_id", "other_dag"), ("dag_id", None), ("body", "spark_jobs.bodies.kmeans:KMeans"),
    ("input", {**INPUT, "path": "/data/other.csv"}), ("output_path", "/out/elsewhere")])
def test_a_run_that_differs_from_the_owner_is_refused_naming_the_owner_and_the_difference(store, field, value):
    claim(store, "pr", owner())
    with pytest.raises(OwnershipError) as e:
        claim(store, "pr", owner(**{field: value}))
    text = str(e.value)
    assert "job pr belongs to DAG iterate_pagerank" in text and f"{field} " in text and repr(value) in text, text
    assert "take_over" in text, "says how to take it over"
    assert read_owner(store, "pr") == owner(), "the owner is unchanged"


def test_taking_a_job_over_replaces_the_owner_and_keeps_the_earlier_one(store):
    claim(store, "pr", owner())
    new = owner(output_path="/out/elsewhere")
    assert claim(store, "pr", new, take_over=True, claimed_by="DAG run r1 of iterate_pagerank") == new
    assert read_owner(store, "pr") == new
    record = json.loads(store.get("jobs/pr/owner.json"))
    assert [p["owner"]["output_path"] for p in record["previous"]] == [owner().output_path]
    with pytest.raises(OwnershipError, match="belongs to DAG iterate_pagerank, body"):
        claim(store, "pr", owner())
    # a job run outside Airflow may be made a DAG's
    claim(store, "lib", owner(dag_id=None))
    assert claim(store, "lib", owner(), take_over=True) == owner()


def test_a_take_over_never_crosses_dags(store):
    """A DAG whose author allows take-overs takes over its own jobs, never another DAG's: its
    readers would see that job's whole history."""
    claim(store, "pr", owner())
    other = owner(dag_id="iterate_kmeans")
    for attempt in (lambda: check_claim(store, "pr", other, take_over=True),
                    lambda: claim(store, "pr", other, take_over=True)):
        with pytest.raises(OwnershipError) as refused:
            attempt()
        assert "job pr belongs to DAG iterate_pagerank" in str(refused.value)
        assert "a run of DAG iterate_kmeans cannot take it over" in str(refused.value)
    assert read_owner(store, "pr") == owner(), "the owner is unchanged"


def test_a_damaged_owner_record_is_refused(store):
    store.put("jobs/pr/owner.json", b'{"format": "iterations.owner/1", "job_id": "pr", "owner": {"dag_id": "<x>"}}')
    with pytest.raises(CheckpointCorrupted, match="owner record .* is damaged"):
        read_owner(store, "pr")
    store.put("jobs/pr/owner.json", json.dumps({"format": "iterations.owner/1", "job_id": "other",
                                                 "owner": owner().to_dict()}).encode())
    with pytest.raises(CheckpointCorrupted, match="job 'other'"):
        read_owner(store, "pr")


# --- the lease --------------------------------------------------------------------------------


RUN_A = Holder.dag_run("iterate_pagerank", "manual__a")
RUN_B = Holder.dag_run("iterate_pagerank", "manual__b")


def test_one_run_holds_the_job_the_second_fails_naming_the_first(store):
    lease = JobLease(store, "pr").acquire(RUN_A)
    assert lease.token == 0
    with pytest.raises(JobBusy) as e:
        JobLease(store, "pr").acquire(RUN_B, alive=lambda h: True)
    assert "DAG run 'manual__a' of iterate_pagerank" in str(e.value) and "one run of a job at a time" in str(e.value)
    again = JobLease(store, "pr").acquire(RUN_A)  # another task (or a retry) of the same run
    assert again.token == 0
    lease.check()


def test_the_second_run_waits_for_the_first_to_release(store):
    lease = JobLease(store, "pr").acquire(RUN_A)
    threading.Timer(0.5, lease.release).start()
    started = time.monotonic()
    second = JobLease(store, "pr").acquire(RUN_B, wait=30, poll=0.05, alive=lambda h: True)
    assert second.token == 1 and 0.4 < time.monotonic() - started < 10


def test_a_lease_of_a_run_that_ended_is_taken_and_the_old_holder_is_fenced(store):
    old = JobLease(store, "pr").acquire(RUN_A)
    new = JobLease(store, "pr").acquire(RUN_B, alive=lambda h: h != RUN_A)  # run a failed: it has ended
    assert new.token == old.token + 1
    with pytest.raises(LeaseLost, match="no longer holds the job .*held by DAG run 'manual__b'"):
        old.check()
    with pytest.raises(LeaseLost):
        old.renew()
    old.release()  # a no-op: it does not hold the job
    new.check()


def test_a_process_holder_that_is_gone_is_stale_one_that_lives_is_not(store):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = Holder("process", host=Holder.this_process().host, pid=int(gone.stdout), nonce="x")
    JobLease(store, "pr").acquire(dead)
    assert JobLease(store, "pr").acquire(Holder.this_process()).token == 1
    other = JobLease(store, "other")
    other.acquire(Holder.this_process())  # this process: alive
    with pytest.raises(JobBusy, match=f"process {os.getpid()} on"):
        other.acquire(Holder.this_process())  # another runner of this process


def test_a_holder_nobody_can_see_expires_after_its_time_to_live(store):
    elsewhere = Holder("process", host="another-host", pid=1, nonce="y")
    JobLease(store, "pr", ttl=0.3).acquire(elsewhere)
    with pytest.raises(JobBusy):
        JobLease(store, "pr").acquire(RUN_B)
    time.sleep(0.4)
    assert JobLease(store, "pr").acquire(RUN_B).token == 1


def test_renewing_in_the_background_keeps_the_lease(store):
    lease = JobLease(store, "pr", ttl=0.6).acquire(Holder("process", host="another-host", pid=1, nonce="z"))
    lease.renew_every(0.1)
    try:
        time.sleep(1.0)
        with pytest.raises(JobBusy):
            JobLease(store, "pr").acquire(RUN_B)
    finally:
        lease.release()
    assert JobLease(store, "pr").acquire(RUN_B).token == 1, "released: free at once"


def test_concurrent_acquirers_get_one_token_each_and_one_holder(store):
    holders = [Holder.dag_run("d", f"r{i}") for i in range(8)]
    won, busy = [], []

    def go(h):
        try:
            won.append(JobLease(store, "pr").acquire(h, alive=lambda x: True))
        except JobBusy:
            busy.append(h)

    threads = [threading.Thread(target=go, args=(h,)) for h in holders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(busy) == 7


def test_a_damaged_lease_record_is_refused(store):
    JobLease(store, "pr").acquire(RUN_A)
    store.put("jobs/pr/lease/0000000000.json", b'{"format": "iterations.lease/1", "holder": 3}')
    with pytest.raises(CheckpointCorrupted, match="lease record .* is damaged"):
        JobLease(store, "pr").acquire(RUN_B)
