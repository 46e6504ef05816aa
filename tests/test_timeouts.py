"""Message timeouts: a tree not completed in time fails; a late ack never turns into an ack;
``reset_timeout`` keeps a slow tree alive. Timeouts are 1 s, so a tree times out after 1 to 2 s."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import pytest

from engine_kit import HoldBolt, Numbers, RecordingSpout, run_until_quiet
from squall import Bolt, TopologyBuilder
from squall.acker.acker import INIT, RESET, notification
from squall.executor.base import Remote
from squall.executor.runtime import Runtime
from squall.metrics.collector import RuntimeCollector
from squall.testing import LocalCluster
from squall.topology import Plan
from squall.topology.assignment import assign


class SlowBolt(Bolt):
    """Holds each input for ``conf["hold_seconds"]`` and then acks it, checking on every tick;
    with ``conf["reset"]`` it calls ``reset_timeout`` for the held inputs on every tick."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held: list = []
        self.resets = 0
        self.held_for: list[float] = []

    def execute(self, tup):
        if not tup.is_tick:
            self.held.append((time.monotonic(), tup))
            return
        now = time.monotonic()
        keep = []
        for since, held in self.held:
            if now - since >= self.conf["hold_seconds"]:
                self.held_for.append(now - since)
                self.collector.ack(held)
            else:
                if self.conf.get("reset"):
                    self.collector.reset_timeout(held)
                    self.resets += 1
                keep.append((since, held))
        self.held = keep


def topology(bolt: type, *, count: int = 1, **config) -> TopologyBuilder:
    builder = TopologyBuilder("timeouts")
    builder.set_spout("spout", Numbers, config={"count": count})
    builder.set_bolt("bolt", bolt, config=config, tick_frequency_seconds=0.2).shuffle_grouping("spout")
    return builder


def test_a_tree_that_is_never_acked_times_out_and_fails():
    builder = TopologyBuilder("never-acked")
    builder.set_spout("spout", RecordingSpout, config={"msg_ids": ["a", "b", "c"]})
    builder.set_bolt("sink", HoldBolt, config={"hold": [["b"]]}).shuffle_grouping("spout")
    with LocalCluster(builder.build(message_timeout_seconds=1)) as cluster:
        spout = cluster.instance("spout")
        cluster.run_until(spout.settled)
        assert spout.failed == ["b"]
        assert sorted(spout.acked) == ["a", "c"]
        counts = cluster.counts("spout")
        assert (counts.timed_out, counts.failed, counts.acked) == (1, 0, 2)
        assert cluster.pending() == 0


def test_timed_out_trees_free_their_max_spout_pending_slots():
    builder = TopologyBuilder("timeouts-free-slots")
    builder.set_spout("spout", RecordingSpout, config={"count": 4})
    builder.set_bolt("sink", HoldBolt, config={"hold": [[i] for i in range(4)]}).shuffle_grouping("spout")
    with LocalCluster(builder.build(message_timeout_seconds=1, max_spout_pending=2)) as cluster:
        spout = cluster.instance("spout")
        cluster.run_until(spout.settled)
        assert sorted(spout.failed) == [0, 1, 2, 3]  # the last two were emitted only after the first timed out
        assert spout.max_outstanding == 2
        assert spout.acked == []


def test_an_ack_after_the_timeout_never_reaches_the_spout_as_an_ack():
    builder = TopologyBuilder("late-ack")
    builder.set_spout("spout", RecordingSpout, config={"msg_ids": ["late"]})
    builder.set_bolt("sink", HoldBolt, config={"hold": [["late"]]}).shuffle_grouping("spout")
    with LocalCluster(builder.build(message_timeout_seconds=1)) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        cluster.run_until(lambda: spout.failed == ["late"])
        assert sink.release() == 1  # the whole tree is acked now, after its timeout
        # A tree emitted after the late ack completes after the acker has handled the late ack:
        # the acker's verdicts reach the spout in order.
        spout.to_emit.append("after")
        run_until_quiet(cluster, lambda: "after" in spout.acked)
        assert spout.acked == ["after"]
        assert spout.failed == ["late"]
        assert [e for e in spout.events if e[1] == "late"] == [("next", "late"), ("fail", "late")]


def test_without_reset_timeout_a_slow_tree_times_out():
    """The control for the next test: holding 2.5 s is longer than the 1 s timeout."""
    with LocalCluster(topology(SlowBolt, hold_seconds=2.5).build(message_timeout_seconds=1)) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("bolt")
        cluster.run_until(lambda: bolt.held_for and spout.done())
        assert spout.failed == [0]
        assert spout.acked == []


def test_reset_timeout_keeps_a_slow_tree_alive_past_twice_the_timeout():
    with LocalCluster(topology(SlowBolt, count=3, hold_seconds=2.5, reset=True)
                      .build(message_timeout_seconds=1)) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("bolt")
        run_until_quiet(cluster, spout.done)
        assert min(bolt.held_for) >= 2.5  # precondition: each tree was held for over twice the timeout
        assert bolt.resets > 0
        assert sorted(spout.acked) == [0, 1, 2]
        assert spout.failed == []
        assert cluster.counts("spout").timed_out == 0


class HeldOnce(Bolt):
    """Keeps its one input, for the test to reset."""

    outputs = []

    def execute(self, tup):
        self.held = tup


@pytest.mark.parametrize("posted", [False, True], ids=["on the scheduler thread", "posted from another thread"])
def test_a_reset_just_before_a_rotation_keeps_the_tree_a_whole_timeout_more(posted):
    """The RESET reached the spout's inbox, and the next round fired the due rotation before the spout
    took it in: the tree failed 0.01 s after reset_timeout (found by the engine audit). A bolt whose
    execute blocks the scheduler thread while it resets, Storm's way of doing slow work, lost its trees
    the same way, and so did one that resets from a thread of its own (the reset is posted to the
    scheduler, and ran after the timers; found by the review). A rotation now applies the verdicts and
    resets that reached the process first, as Storm's spout handles what its queue holds before the
    timeout tick behind it."""
    now = [0.0]
    builder = TopologyBuilder("reset-race")
    builder.set_spout("spout", Numbers, config={"count": 1})
    builder.set_bolt("bolt", HeldOnce).shuffle_grouping("spout")
    with LocalCluster(builder.build(message_timeout_seconds=10), clock=lambda: now[0]) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("bolt")
        cluster.runtime.step()  # t=0: emitted, and held by the bolt
        now[0] = 10.0
        cluster.runtime.step()  # the first rotation
        now[0] = 19.99
        if posted:
            cluster.runtime.post(lambda: bolt.collector.reset_timeout(bolt.held))
        else:
            bolt.collector.reset_timeout(bolt.held)  # on the scheduler thread, as a tick's execute would
        now[0] = 20.0
        cluster.runtime.step()  # the second rotation: due as the round begins
        now[0] = 29.99
        cluster.runtime.step()
        assert spout.failed == []
        now[0] = 30.0
        cluster.runtime.step()  # a whole timeout after the reset: now it times out
        assert spout.failed == [0] and cluster.counts("spout").timed_out == 1


class OtherProcessAcker(Remote):
    """The link to an acker in another process, played by the test: it keeps the INITs the worker sends,
    and what the test gives it waits in its ingress until the runtime delivers it."""

    def __init__(self) -> None:
        self.inits: list[tuple[int, int]] = []  # (root, spout task)
        self.ingress: list[tuple[int, Any]] = []  # (task, item) received, not delivered yet
        self.lost: deque = deque()

    def attach(self, *, transfer, wake, frames, flusher) -> None:
        self.transfer = transfer

    def try_send(self, task: int, item: Any) -> bool:
        return True

    def try_message(self, task: int, kind: int, root: int, val: int, spout: int) -> bool:
        if kind == INIT:
            self.inits.append((root, spout))
        return True

    def deliver(self) -> bool:
        moved = bool(self.ingress)
        while self.ingress:
            assert self.transfer.try_send(*self.ingress.pop(0))
        return moved

    def flush(self) -> bool:
        return False

    def due_in(self) -> float:
        return 1.0


def test_a_reset_received_from_another_process_just_before_a_rotation_keeps_the_tree():
    """The acker is another process's: its RESET arrived in a frame the ingress holds when the rotation
    is due. The rotation delivers what the process received first."""
    now = [0.0]
    builder = TopologyBuilder("reset-from-afar")
    builder.set_spout("spout", RecordingSpout, config={"count": 1})
    builder.set_bolt("bolt", HeldOnce).shuffle_grouping("spout")
    topology = builder.build(message_timeout_seconds=10, workers=1, ackers=1)
    plan = Plan(topology)
    acker = OtherProcessAcker()
    runtime = Runtime(plan, executors=assign(plan.layout).wiring("worker", 0).executors, acker_tasks=(),
                      remote=acker, clock=lambda: now[0])
    runtime.start()
    try:
        runtime.step()  # t=0: emitted, its INIT sent to the acker
        [(root, spout_task)] = acker.inits
        now[0] = 10.0
        runtime.step()  # the first rotation
        now[0] = 19.99
        acker.ingress.append((spout_task, notification(RESET, root, spout_task)))
        now[0] = 20.0
        runtime.step()  # the second rotation: due as the round begins
        spout = next(ex for ex in runtime.spouts).tasks[spout_task].spout
        assert spout.failed == [] and spout.outstanding == 1
    finally:
        runtime.close()


class DrivenClock:
    """A clock the test drives: each read moves it on by ``tick``; ``stall`` jumps it, as a blocking call would."""

    def __init__(self, tick: float = 1e-4) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def stall(self, seconds: float) -> None:
        self.now += seconds


CLOCK = DrivenClock()


class TimedSpout(RecordingSpout):
    """Records, on the driven clock, when each tree was emitted and when it failed."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.emitted_at: dict = {}
        self.failed_at: dict = {}
        self.clock = CLOCK if conf.get("driven") else time.monotonic

    def next_tuple(self):
        if self.to_emit:
            self.emitted_at[self.to_emit[0]] = self.clock()
        super().next_tuple()

    def fail(self, msg_id):
        self.failed_at[msg_id] = self.clock()
        super().fail(msg_id)


class StallingBolt(HoldBolt):
    """A HoldBolt whose ``execute`` blocks for ``stall`` seconds on the input ``stall_at``."""

    def execute(self, tup):
        if tup.values == [self.conf["stall_at"]]:
            if self.conf.get("driven"):
                CLOCK.stall(self.conf["stall"])
            else:
                time.sleep(self.conf["stall"])
        super().execute(tup)


def _stalled_run(*, driven: bool) -> TimedSpout:
    timeout = 1
    held = [[i] for i in range(0, 300, 10)]  # never acked: these time out
    builder = TopologyBuilder("stall")
    builder.set_spout("spout", TimedSpout, config={"count": 300, "driven": driven})
    builder.set_bolt("bolt", StallingBolt, config={"hold": held, "stall_at": 150, "stall": 2.5 * timeout,
                                                   "driven": driven}).shuffle_grouping("spout")
    with LocalCluster(builder.build(message_timeout_seconds=timeout, max_spout_pending=50),
                      **({"clock": CLOCK} if driven else {})) as cluster:
        spout = cluster.instance("spout")
        cluster.run_until(spout.settled)
    assert sorted(spout.failed) == [i for (i,) in held]  # only the held trees failed: nothing acked timed out
    ages = [spout.failed_at[m] - spout.emitted_at[m] for m in spout.failed]
    assert min(ages) >= timeout, f"a tree timed out {min(ages):.3f} s after its emit (timeout {timeout} s)"
    return spout


def test_a_stall_never_shortens_a_message_timeout_on_a_driven_clock():
    """A bolt that blocks for 2.5 T delayed the rotations, which then fired back to back on a stale clock:
    trees emitted between them timed out at age ~0. Now timers fire first, on the clock just read, and a
    late rotation is not caught up."""
    _stalled_run(driven=True)


def test_a_real_stall_never_shortens_a_message_timeout():
    _stalled_run(driven=False)


def _expired_trees(cluster: LocalCluster) -> dict[str, float]:
    """``squall_acker_expired_trees_total`` by acker task, as a scrape would read it."""
    collector = RuntimeCollector(cluster.runtime, role="worker", index=0)
    return {s.labels["task"]: s.value for family in collector.collect() for s in family.samples
            if s.name == "squall_acker_expired_trees_total"}


def test_an_acker_forgets_a_tree_on_the_third_rotation_and_the_metric_counts_it():
    clock = DrivenClock()
    builder = TopologyBuilder("expired")
    builder.set_spout("spout", RecordingSpout, config={"msg_ids": ["lost"]})
    builder.set_bolt("sink", HoldBolt, config={"hold": [["lost"]]}).shuffle_grouping("spout")
    with LocalCluster(builder.build(message_timeout_seconds=30), clock=clock) as cluster:
        [acker] = cluster.runtime.ackers
        task = str(acker.task_ids[0])
        cluster.run_until(lambda: acker.acker.pending == 1)  # the bolt holds the tuple: no ack ever comes
        assert _expired_trees(cluster) == {task: 0}  # exported before anything expires
        for _ in range(2):
            clock.stall(30)
            cluster.runtime.step()
        assert cluster.instance("spout").failed == ["lost"]  # timed out at the spout on the second rotation
        assert (acker.acker.pending, _expired_trees(cluster)) == (1, {task: 0})
        clock.stall(30)
        cluster.runtime.step()
        assert (acker.acker.pending, _expired_trees(cluster)) == (0, {task: 1})
