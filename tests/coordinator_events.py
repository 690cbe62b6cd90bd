"""The coordinator-events job of the exactly-once tests (CoordinatorEventsExactlyOnceITCase and its
stream-operator-recipient variant, seeds 002 and 004): coordinators that send 0..n-1, one to
partition 0 and one to partition 1 at different speeds, and a body that appends every event it
receives to its variable. Used through the library runner (tests/integration/
test_coordinator_events.py) and through a DAG (tests/dags/test_coordinator_events_dag.py:
``DagReceiver`` declares the coordinators and the faults as body parameters).

A coordinator's state is the next number to send and how many it has been asked to send so
far (``target``, raised by ``per_epoch`` when an epoch is planned). Its own thread sends the
numbers asked for a few milliseconds apart, so they are sent while an epoch runs, with the
valve shut, and held until its checkpoint commits. After a reset to a checkpoint (a restart,
or every task process of a DAG) it first sends what it still owes, at once, then goes on: the
events held and dropped with the valve are sent again, in the same order.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass

from include.contract.body import EpochContext, IterationBody, StepResult, param
from include.epoch.coordinators import Coordinator

N_FAST, N_SLOW = 40, 6

_SCHEMA = "partition int, coordinator string, epoch int, idx int, value long"


def record(path: str | None, **fields) -> None:
    """Append one JSON line to ``path`` (what a fault saw when it fired), if given."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")


def fire_once(flag: str | None) -> bool:
    """True the first time (the flag file exists and this call removes it)."""
    if not flag:
        return False
    try:
        os.remove(flag)
    except FileNotFoundError:
        return False
    return True


class EventSendingCoordinator(Coordinator):
    """Sends 0..n-1 to one partition from its own thread: each time an epoch is planned it is
    asked for ``per_epoch`` more (every ``every`` epochs), sent a few milliseconds apart.

    Faults (for the DAG test; all off by default): ``fail_report_epoch``: ``handle_report`` of
    that epoch raises once (``fail_flag`` names the file whose removal marks it fired), after
    recording in ``record_file`` what the valve held; ``sent_marker``: a file this coordinator
    writes once it has sent what epoch k asked for (``{sent_marker}.{k}``), for a failure in
    Spark to wait on."""

    failed_partitions: list = []

    def __init__(self, n: int, per_epoch: int, partition: int, every: int = 1, snapshot_delay: float = 0.0, *,
                 name: str = "", fail_report_epoch: int = -1, fail_flag: str = "", record_file: str = "",
                 sent_marker: str = ""):
        self.n, self.per_epoch, self.every, self.partition = n, per_epoch, every, partition
        self.snapshot_delay = snapshot_delay
        self.name, self.fail_report_epoch, self.fail_flag = name, fail_report_epoch, fail_flag
        self.record_file, self.sent_marker = record_file, sent_marker
        self.next = 0
        self.target = 0
        self.restored_from = None  # the snapshot's state this coordinator was last reset to
        self.deliveries = []  # what became of each event sent since the last reset
        self._asked_epoch = None
        self._idle = threading.Event()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    def start(self, ctx):
        self.close()
        self._stop, self._wake, self._idle = threading.Event(), threading.Event(), threading.Event()
        self.deliveries = []
        with ctx.lock:  # what it owes since its snapshot: at once, before any epoch is planned
            while self.next < min(self.target, self.n):
                self._send(ctx)
        self._idle.set()
        self._thread = threading.Thread(target=self._run, args=(ctx, self._stop, self._wake, self._idle),
                                        daemon=True)
        self._thread.start()

    def on_epoch_start(self, epoch, ctx):
        if epoch % self.every == 0:
            with ctx.lock:
                self.target += self.per_epoch
                self._asked_epoch = epoch
            self._idle.clear()
            self._wake.set()

    def _send(self, ctx) -> None:
        self.deliveries.append(ctx.send(self.partition, self.next))
        self.next += 1

    def _run(self, ctx, stop, wake, idle):
        rng = random.Random(self.partition)
        while not stop.is_set():
            if not wake.wait(0.05):
                continue
            wake.clear()
            time.sleep(0.02 + rng.uniform(0, 0.01))  # after the trigger that asked: held by the shut valve
            while not stop.is_set():
                with ctx.lock:  # state change and send together, atomic w.r.t. the snapshot
                    if self.next >= min(self.target, self.n):
                        asked = self._asked_epoch
                        break
                    self._send(ctx)
                time.sleep(0.002)
            if self.sent_marker and asked is not None:
                open(f"{self.sent_marker}.{asked}", "w").close()
            idle.set()

    def held(self) -> list[int]:
        """The numbers sent since the last reset that the valve holds now."""
        return [d.event.payload for d in self.deliveries if d.state == "blocked"]

    def handle_report(self, epoch, partition, report, ctx):
        if epoch == self.fail_report_epoch and partition == self.partition and self.fail_flag:
            self._idle.wait(10)  # what this epoch asked for is sent (and held: the valve is shut)
            if fire_once(self.fail_flag):
                record(self.record_file, fault="coordinator", coordinator=self.name, epoch=epoch,
                       restored_from=self.restored_from, held=self.held(), pid=os.getpid())
                raise RuntimeError(f"coordinator {self.name} fails while handling epoch {epoch}'s report (test)")

    def partition_failed(self, epoch, partition, dropped, ctx):
        type(self).failed_partitions.append((epoch, partition))
        record(self.record_file, fault="partition", coordinator=self.name, epoch=epoch, partition=partition,
               restored_from=self.restored_from, dropped=[e.payload for e in dropped], held=self.held(),
               pid=os.getpid())
        with ctx.lock:
            if dropped:  # the held events for it are gone: send them again
                self.next = min(e.payload for e in dropped)
        self._idle.clear()
        self._wake.set()

    def snapshot(self):
        time.sleep(self.snapshot_delay)
        return {"next": self.next, "target": self.target}

    def reset_to(self, state):
        self.restored_from = state
        self.next = 0 if state is None else state["next"]
        self.target = 0 if state is None else state["target"]

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class Receiver(IterationBody):
    """Appends every event of its inbox to its state (the alignment decisions too); done when
    all ``n_total`` numbers are in (default N_FAST + N_SLOW). Starts from one sentinel row (so
    epoch 0 is never empty). ``poison``/``poison_epoch``: the Spark task holding partition 1's
    records fails once in that epoch (after ``poison_wait``, a file, exists, if given)."""

    name = "receiver"
    heads = {"received": ("partition",)}
    metric_aggregations = {"remaining": "sum"}
    convergence_metric = "remaining"
    static_input = False  # everything it receives comes from the coordinators

    def parse_params(self, raw):
        return dict(raw)

    def load(self, raw, params):
        return {}

    def init(self, data, ctx):
        return {"received": ctx.spark.createDataFrame([(0, "init", -1, 0, -1)], _SCHEMA)}

    def step(self, variables, data, ctx: EpochContext):
        from pyspark.sql import functions as F

        params = ctx.params
        rows = []
        for name, events in sorted(ctx.events.items()):
            for i, e in enumerate(events):
                value = e["payload"]["epoch"] if name == "alignment" else e["payload"]
                rows.append((int(e["partition"]), name, ctx.epoch, i, int(value)))
        received = variables["received"].unionByName(ctx.spark.createDataFrame(rows, _SCHEMA))
        flag = params.get("poison")
        if flag and ctx.epoch == params.get("poison_epoch") and os.path.exists(flag):
            wait = params.get("poison_wait") or ""
            poison = F.udf(lambda p: _fail_once(flag, wait, p), "int")
            received = received.withColumn("partition", poison("partition"))
        total = params.get("n_total") or N_FAST + N_SLOW
        numbers = F.sum(F.when(F.col("coordinator").isin("fast", "slow"), 1).otherwise(0)).over(_all())
        remaining = (F.lit(total) - numbers) / F.count(F.lit(1)).over(_all())
        return StepResult({"received": received.withColumn("remaining", remaining)},
                          metrics={"remaining": ("received", "remaining")})

    def finish(self, variables, data, ctx):
        return {}


@dataclass(frozen=True)
class DagReceiverParams:
    n_fast: int = param(16, "numbers the fast coordinator sends to partition 0", type="integer", minimum=0)
    n_slow: int = param(3, "numbers the slow coordinator sends to partition 1", type="integer", minimum=0)
    poison: str = param("", "a file: while it exists, partition 1's Spark task fails once in poison_epoch",
                        type="string")
    poison_epoch: int = param(-1, "the epoch whose partition 1 fails", type="integer")
    fail_coordinator_epoch: int = param(-1, "the fast coordinator fails handling this epoch's report",
                                        type="integer")
    fail_flag: str = param("", "a file: the coordinator fails once, while it exists", type="string")
    record_file: str = param("", "where the faults record what they saw", type="string")
    marker_dir: str = param("", "where the coordinators mark each epoch's events sent", type="string")

    @property
    def n_total(self) -> int:
        return self.n_fast + self.n_slow

    @property
    def poison_wait(self) -> str:
        """Partition 1 fails once the slow coordinator has sent what the epoch asked for."""
        return os.path.join(self.marker_dir, f"slow.{self.poison_epoch}") if self.marker_dir else ""


class DagReceiver(Receiver):
    """``Receiver`` with its two coordinators declared by the body (as a DAG runs it) and the
    faults as parameters (``DagReceiverParams``)."""

    name = "dag_receiver"
    params_type = DagReceiverParams

    def parse_params(self, raw):
        return IterationBody.parse_params(self, raw)

    def coordinators(self, params, input, store_options):
        marker = (lambda name: os.path.join(params.marker_dir, name)) if params.marker_dir else (lambda name: "")
        return {
            "fast": EventSendingCoordinator(params.n_fast, per_epoch=4, partition=0, name="fast",
                                            fail_report_epoch=params.fail_coordinator_epoch,
                                            fail_flag=params.fail_flag, record_file=params.record_file,
                                            sent_marker=marker("fast")),
            "slow": EventSendingCoordinator(params.n_slow, per_epoch=1, every=2, partition=1, name="slow",
                                            snapshot_delay=0.05, record_file=params.record_file,
                                            sent_marker=marker("slow")),
        }

    def step(self, variables, data, ctx: EpochContext):
        p = ctx.params
        ctx_params = {"poison": p.poison, "poison_epoch": p.poison_epoch, "poison_wait": p.poison_wait,
                      "n_total": p.n_total}
        return Receiver.step(self, variables, data, _WithParams(ctx, ctx_params))


class _WithParams:
    """An epoch context whose ``params`` is a plain dict (what ``Receiver.step`` reads)."""

    def __init__(self, ctx, params):
        self._ctx, self.params = ctx, params

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def _all():
    from pyspark.sql import Window

    return Window.partitionBy()


def _fail_once(flag, wait, p):
    """The task holding partition 1's records fails, once (it removes the flag as it fails),
    after the file ``wait`` exists (up to 30 s) when given."""
    if p != 1:
        return p
    if wait:
        deadline = time.monotonic() + 30
        while not os.path.exists(wait) and time.monotonic() < deadline:
            time.sleep(0.01)
    if not fire_once(flag):
        return p
    raise RuntimeError("partition 1 poisoned")


def coordinators():
    return {"fast": EventSendingCoordinator(N_FAST, per_epoch=5, partition=0, name="fast"),
            "slow": EventSendingCoordinator(N_SLOW, per_epoch=1, every=2, partition=1, snapshot_delay=0.05,
                                            name="slow")}


def received_sequences(rows) -> dict[str, list[int]]:
    """Each coordinator's numbers as its partition received them (in epoch, then inbox order)."""
    out = {}
    for name, partition in (("fast", 0), ("slow", 1)):
        mine = sorted((r["epoch"], r["idx"], r["value"]) for r in rows
                      if r["coordinator"] == name and r["partition"] == partition)
        out[name] = [v for _e, _i, v in mine]
    return out
