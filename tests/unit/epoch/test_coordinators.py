"""The valve (a port of OperatorEventValveTest) and a coordinator holder's checkpoint protocol."""

from __future__ import annotations

import threading

import pytest

from include.epoch.coordinators import (
    AlignmentCoordinator,
    Coordinator,
    CoordinatorError,
    CoordinatorHolder,
    Coordinators,
)
from include.epoch.valve import Event, Valve


def ev(partition: int, seq: int) -> Event:
    return Event("c", partition, seq, {"n": seq})


def make():
    delivered: list[Event] = []
    return Valve(delivered.append), delivered


def test_events_pass_through_an_open_valve():
    valve, delivered = make()
    d = valve.send(ev(11, 0))
    assert delivered == [ev(11, 0)] and d.state == "sent" and d.delivered


def test_events_are_held_by_a_shut_valve():
    valve, delivered = make()
    valve.shut()
    d = valve.send(ev(1, 0))
    assert delivered == [] and d.state == "blocked" and not d.delivered
    assert valve.is_shut and valve.blocked() == [ev(1, 0)]


def test_opening_releases_in_send_order_across_partitions():
    valve, delivered = make()
    valve.shut()
    sent = [ev(1, 0), ev(2, 1), ev(1, 2), ev(0, 3), ev(2, 4)]
    handles = [valve.send(e) for e in sent]
    assert valve.open() == sent
    assert delivered == sent, "released in the order they were sent (so in order per partition)"
    assert all(h.state == "released" for h in handles) and not valve.is_shut
    assert valve.open() == [], "opening an open valve releases nothing"


def test_reset_drops_everything_held_and_opens():
    valve, delivered = make()
    valve.shut()
    handles = [valve.send(ev(p, i)) for i, p in enumerate([0, 1, 0])]
    assert valve.reset() == [ev(0, 0), ev(1, 1), ev(0, 2)]
    assert delivered == [] and all(h.state == "dropped" for h in handles)
    assert not valve.is_shut
    valve.send(ev(0, 3))
    assert delivered == [ev(0, 3)], "open after a reset"


def test_reset_of_one_partition_drops_only_its_events():
    valve, delivered = make()
    valve.shut()
    a, b, c = valve.send(ev(0, 0)), valve.send(ev(1, 1)), valve.send(ev(0, 2))
    assert valve.reset_partition(0) == [ev(0, 0), ev(0, 2)]
    assert (a.state, b.state, c.state) == ("dropped", "blocked", "dropped")
    assert valve.is_shut, "the valve stays shut"
    assert valve.open() == [ev(1, 1)] and delivered == [ev(1, 1)]


def test_no_event_slips_between_release_and_reopen():
    """Senders racing with open(): every event is delivered exactly once, per-sender order kept."""
    valve, delivered = make()
    valve.shut()
    seqs = iter(range(10_000))
    lock = threading.Lock()

    def sender(partition):
        for _ in range(500):
            with lock:
                seq = next(seqs)
                valve.send(ev(partition, seq))  # under the lock: seq order == send order

    threads = [threading.Thread(target=sender, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    valve.open()
    for t in threads:
        t.join()
    assert sorted(e.seq for e in delivered) == list(range(2000))
    assert [e.seq for e in delivered] == sorted(e.seq for e in delivered)


class Counter(Coordinator):
    """Sends 0, 1, 2... to partition 0, one per call of ``tick``."""

    def __init__(self):
        self.next = 0
        self.ctx = None

    def start(self, ctx):
        self.ctx = ctx

    def tick(self):
        d = self.ctx.send(0, self.next)
        self.next += 1
        return d

    def partition_failed(self, epoch, partition, dropped, ctx):
        if dropped:
            self.next = min(e.payload for e in dropped)  # send the lost ones again

    def snapshot(self):
        return {"next": self.next}

    def reset_to(self, state):
        self.next = 0 if state is None else state["next"]


def test_released_events_whose_forwarding_fails_are_marked_and_the_rest_released():
    """OperatorEventValveTest.releasedEventsForwardSendFailures: a held event whose delivery
    raises when the valve opens is ``failed`` with the error (the sender's to handle); the
    events after it are still released in order, the valve opens, and no event is delivered twice."""
    delivered: list[Event] = []

    def deliver(e: Event) -> None:
        if e.seq == 1:
            raise ConnectionError("partition 3 is gone")
        delivered.append(e)

    valve = Valve(deliver)
    valve.shut()
    sends = [valve.send(ev(3, 0)), valve.send(ev(3, 1)), valve.send(ev(4, 2))]
    released = valve.open()
    assert [e.seq for e in released] == [0, 2] and [e.seq for e in delivered] == [0, 2]
    assert [d.state for d in sends] == ["released", "failed", "released"]
    assert isinstance(sends[1].error, ConnectionError) and not sends[1].delivered
    assert not valve.is_shut and valve.blocked() == []
    valve.shut()
    assert valve.open() == [] and [e.seq for e in delivered] == [0, 2], "nothing delivered twice"


class Flaky(Counter):
    """A Counter whose snapshot fails (raises, or is not JSON-able) until ``healed``."""

    def __init__(self, how: str):
        super().__init__()
        self.how, self.healed = how, False

    def snapshot(self):
        if self.healed:
            return super().snapshot()
        if self.how == "raises":
            raise RuntimeError("snapshot store unavailable")
        return {"next": object()}


@pytest.mark.parametrize("how", ["raises", "not JSON-able"])
def test_a_failed_trigger_loses_no_event_of_any_coordinator(how):
    """abortCurrentTriggering with two coordinators: the second one's snapshot fails after the
    first was triggered. The trigger is refused naming the coordinator; the first's inbox is
    back and its valve open as before, so the retry in this process hands every event out once,
    in order, with the events sent between the two triggers after them."""
    good, flaky = Counter(), Flaky(how)
    coords = Coordinators({"good": CoordinatorHolder("good", good, 2), "flaky": CoordinatorHolder("flaky", flaky, 2)})
    coords.restore(None, None, next_epoch=0)
    good.tick(), good.tick(), flaky.tick()
    with pytest.raises(CoordinatorError, match="coordinator 'flaky'"):
        coords.trigger(0)
    assert coords.pending_trigger is None
    between = good.tick()
    assert between.state == "sent", "the good coordinator's valve is open again"
    flaky.healed = True
    inboxes, snapshots = coords.trigger(0)
    assert [e.payload for e in inboxes["good"]] == [0, 1, 2] and [e.payload for e in inboxes["flaky"]] == [0]
    assert snapshots["good"]["seq"] == 3 and snapshots["flaky"]["state"] == {"next": 1}
    assert good.tick().state == "blocked", "shut by the trigger that succeeded"


def test_a_single_coordinator_whose_snapshot_fails_keeps_its_inbox():
    flaky = Flaky("raises")
    h = CoordinatorHolder("flaky", flaky, 2)
    h.restore(None, next_epoch=0)
    flaky.tick()
    with pytest.raises(CoordinatorError, match="snapshot of epoch 0 failed: snapshot store unavailable"):
        h.trigger(0)
    assert not h.valve.is_shut and [e.payload for e in h.pending()] == [0]


def test_holder_checkpoint_protocol():
    coord = Counter()
    h = CoordinatorHolder("counter", coord, num_partitions=2)
    h.restore(None, next_epoch=0)
    coord.tick(), coord.tick()
    inbox0, snap0 = h.trigger(0)  # checkpoint 0 triggered: 0 and 1 go to epoch 0
    assert [e.payload for e in inbox0] == [0, 1] and snap0["state"] == {"next": 2} and snap0["seq"] == 2
    blocked = coord.tick()  # while epoch 0 runs: held
    assert blocked.state == "blocked" and h.pending() == []
    assert [e.payload for e in h.committed()] == [2], "released when checkpoint 0 commits"
    coord.tick()  # open: straight into the next inbox
    inbox1, snap1 = h.trigger(1)
    assert [e.payload for e in inbox1] == [2, 3] and [e.seq for e in inbox1] == [2, 3]

    # the checkpoint aborts / the job resets to checkpoint 0: held events dropped, state back
    held = coord.tick()
    h.restore(snap1, next_epoch=1)
    assert held.state == "dropped" and coord.next == 4 and h.pending() == []
    coord.tick()
    assert [e.seq for e in h.pending()] == [4], "seq numbering restored with the snapshot"


class SendsOnStart(Counter):
    """Sends what it owes (up to ``target``) as soon as it starts, as a coordinator reset to a
    snapshot sends again what it sent after it."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def start(self, ctx):
        super().start(ctx)
        self.sent = [self.tick() for _ in range(self.next, self.target)]


def test_a_restore_for_a_commit_in_another_process_holds_what_the_coordinator_sends_on_start():
    """A commit task restores the coordinators to the trigger's snapshot of a checkpoint that
    has not committed: what they send once started is held until it commits (as it would have
    been in the process that triggered it), not put in the next inbox as if sent before."""
    coord = SendsOnStart(target=3)
    h = CoordinatorHolder("owed", coord, num_partitions=1)
    h.restore({"seq": 1, "state": {"next": 1}}, next_epoch=2, shut=True)
    assert [d.state for d in coord.sent] == ["blocked", "blocked"] and h.pending() == []
    assert [e.payload for e in h.committed()] == [1, 2], "released when the checkpoint commits"

    again = SendsOnStart(target=3)  # a restore to a committed checkpoint: straight into the inbox
    h2 = CoordinatorHolder("owed", again, num_partitions=1)
    h2.restore({"seq": 1, "state": {"next": 1}}, next_epoch=2)
    assert [d.state for d in again.sent] == ["sent", "sent"] and [e.payload for e in h2.pending()] == [1, 2]


def test_partition_failure_drops_only_that_partition_and_keeps_the_coordinator():
    coord = Counter()
    h = CoordinatorHolder("counter", coord, num_partitions=2)
    h.restore(None, next_epoch=0)
    h.trigger(0)
    coord.tick(), coord.tick()  # 0, 1 held for partition 0
    other = h.send(1, "x")  # held for partition 1
    dropped = h.partition_failed(0, 0)
    assert [e.payload for e in dropped] == [0, 1] and other.state == "blocked"
    assert coord.next == 0, "the coordinator was told and sends the lost events again"
    coord.tick()
    assert [e.payload for e in h.committed()] == ["x", 0]


def test_bad_sends_are_refused():
    h = CoordinatorHolder("c", Counter(), num_partitions=2)
    h.restore(None, 0)
    with pytest.raises(CoordinatorError, match="partition 2 is not in 0..1"):
        h.send(2, 1)
    with pytest.raises(CoordinatorError, match="not JSON-able"):
        h.send(0, object())
    with pytest.raises(Exception, match="invalid coordinator name"):
        CoordinatorHolder("a/b", Counter(), 1)


def test_alignment_decision_is_an_event_through_the_valve():
    align = AlignmentCoordinator({"ranks": 2}, decide=lambda e: (e == 1, "max epochs" if e == 1 else ""))
    h = CoordinatorHolder("alignment", align, num_partitions=2)
    h.restore(None, 0)
    h.trigger(0)
    h.reports(0, [(0, {"head": "ranks"})])
    assert h.valve.blocked() == [], "not aligned until every partition reported"
    h.reports(0, [(1, {"head": "ranks"})])
    assert [e.payload for e in h.valve.blocked()] == [{"type": "globally_aligned", "epoch": 0, "terminated": False,
                                                      "reason": ""}] * 2
    h.reports(0, [(1, {"head": "ranks"})])  # a re-report of a decided epoch sends nothing again
    assert len(h.valve.blocked()) == 2
    h.committed()
    inbox, snap = h.trigger(1)
    assert [(e.partition, e.payload["epoch"]) for e in inbox] == [(0, 0), (1, 0)]
    assert snap["state"] == {"latest_aligned": 0}


def test_a_rescale_is_refused_unless_the_coordinator_says_how():
    """A snapshot taken with 2 partitions restored into holders of 3: the alignment's state
    (an epoch) goes on; a coordinator that does not override ``rescale`` is refused, naming
    itself and both numbers, before any holder changed; one that overrides it gets its say."""
    from include.errors import ConfigError

    class Spread(Counter):
        def rescale(self, state, old, new):
            return {"next": state["next"] * new // old}

    align, counter, spread = AlignmentCoordinator({"h": 3}), Counter(), Spread()
    coords = Coordinators({"alignment": CoordinatorHolder("alignment", align, 3),
                           "counter": CoordinatorHolder("counter", counter, 3),
                           "spread": CoordinatorHolder("spread", spread, 3)})
    snapshots = {"alignment": {"seq": 4, "state": {"latest_aligned": 4}},
                 "counter": {"seq": 7, "state": {"next": 7}}, "spread": {"seq": 2, "state": {"next": 2}}}
    with pytest.raises(ConfigError, match=r"num_partitions=3 is refused: the checkpoint's state of coordinator "
                                          r"'counter' was taken with 2 partitions and it cannot be rescaled "
                                          r"\(Counter does not say how.*resume with num_partitions=2"):
        coords.restore(snapshots, 4, 5, partitions=2)
    assert align.latest_aligned == -1 and spread.next == 0, "nothing restored: the refusal came first"

    del coords.holders["counter"]
    coords.restore(snapshots, 4, 5, partitions=2)
    assert align.latest_aligned == 4 and spread.next == 3
    coords.restore(snapshots, 4, 5, partitions=3)  # the same number: the state as it is
    assert spread.next == 2


def test_an_unexpected_epoch_report_or_a_stale_decision_is_refused_naming_both_epochs():
    """flink-ml's head refuses an epoch watermark or a globally aligned event it does not
    expect; here the alignment coordinator does: a report of an epoch older than the one it
    decided last, and complete reports of another epoch than the decision it was given (which
    it would otherwise send under the wrong epoch). Nothing is sent for either; a re-report of
    the epoch decided last (a retry, a restore) is taken and sends nothing again."""
    from include.checkpoints.head_state import AlignmentDecision, UnexpectedEpoch

    align = AlignmentCoordinator({"ranks": 2})
    h = CoordinatorHolder("alignment", align, num_partitions=2)
    h.restore({"seq": 0, "state": {"latest_aligned": 2}}, next_epoch=3)
    with pytest.raises(UnexpectedEpoch, match="unexpected report of epoch 1 from partition 0: epoch 2 is decided, "
                                              "so the reports expected are of epoch 3 or later"):
        h.reports(1, [(0, {"head": "ranks"})])
    h.reports(2, [(0, {"head": "ranks"}), (1, {"head": "ranks"})])  # a re-report of epoch 2: nothing again
    assert h.pending() == [] and align.latest_aligned == 2

    align.decide_with(AlignmentDecision(3, "a3", True, "max epochs reached (4)", 2, {}))
    with pytest.raises(UnexpectedEpoch, match="the reports of epoch 4 are complete, but the decision given is on "
                                              "epoch 3: expected the reports of epoch 3"):
        h.reports(4, [(0, {"head": "ranks"}), (1, {"head": "ranks"})])
    assert h.pending() == [] and align.latest_aligned == 2, "no stale decision sent"
    h.reports(3, [(0, {"head": "ranks"}), (1, {"head": "ranks"})])
    assert [e.payload for e in h.pending()] == [{"type": "globally_aligned", "epoch": 3, "terminated": True,
                                                 "reason": "max epochs reached (4)"}] * 2


def test_one_checkpoint_is_triggered_at_a_time():
    """OperatorCoordinatorHolder's checkCheckpointAlreadyHappening: while checkpoint 0 is
    triggered and neither committed nor aborted, a trigger of checkpoint 1 is refused, naming
    both, before anything changes (the events held for 0 stay held; released into epoch 1's
    inbox once 0 commits). After a commit, an aborted trigger or a reset, the next one goes."""
    coord = Counter()
    h = CoordinatorHolder("counter", coord, num_partitions=1)
    h.restore(None, next_epoch=0)
    h.trigger(0)
    coord.tick()  # held for epoch 1
    with pytest.raises(CoordinatorError, match="checkpoint 1 triggered while checkpoint 0 is being taken"):
        h.trigger(1)
    assert h.valve.is_shut and [e.payload for e in h.valve.blocked()] == [0] and h.next_epoch == 1
    h.committed()
    inbox, snapshot = h.trigger(1)
    assert [e.payload for e in inbox] == [0] and snapshot["state"] == {"next": 1}

    h.restore(snapshot, next_epoch=1)  # checkpoint 1 aborted: the job resets to its trigger's snapshot
    h.trigger(1)
    h.abort_trigger(1, [])  # another coordinator's snapshot failed: this trigger is undone
    h.trigger(1)
    h.restore(snapshot, next_epoch=2, shut=True)  # a commit task: checkpoint 1 is being taken
    with pytest.raises(CoordinatorError, match="checkpoint 2 triggered while checkpoint 1 is being taken"):
        h.trigger(2)


def test_an_aborted_checkpoint_drops_its_alignment_decision_and_the_retry_sends_it_once():
    """HeadOperatorCheckpointAligner.onCheckpointAborted releases the globally aligned events
    it held for an aborted checkpoint; here the decision is itself an event held by the shut
    valve, so an abort drops it with the other held events and resets the alignment to the
    trigger's snapshot, and the retry of the epoch decides again: epoch 1 receives exactly one
    decision on epoch 0 per partition, however many attempts of epoch 0 were aborted."""
    align = AlignmentCoordinator({"ranks": 2})
    h = CoordinatorHolder("alignment", align, num_partitions=2)
    h.restore(None, next_epoch=0)
    _, snapshot = h.trigger(0)
    for attempt in range(3):
        h.reports(0, [(0, {"head": "ranks"}), (1, {"head": "ranks"})])
        assert [e.payload["epoch"] for e in h.valve.blocked()] == [0, 0], f"attempt {attempt}: held"
        if attempt < 2:  # checkpoint 0 aborts: reset to its trigger's snapshot, triggered again
            h.restore(snapshot, next_epoch=0)
            assert h.valve.blocked() == [] and align.latest_aligned == -1, "the held decision is dropped"
            h.trigger(0)
    h.committed()
    inbox, _ = h.trigger(1)
    assert [(e.partition, e.payload["epoch"]) for e in inbox] == [(0, 0), (1, 0)]
