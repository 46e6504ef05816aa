"""The spout's side of reliability: ``ackers: 0``, untracked emits, max spout pending, and
deactivate / activate."""

from __future__ import annotations

from engine_kit import HoldBolt, Numbers, PassBolt, RecordingSpout, run_until_quiet
from squall import Bolt, TopologyBuilder
from squall.testing import LocalCluster


class BatchAckBolt(Bolt):
    """A slow consumer: holds its inputs and acks them all on each tick."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held: list = []
        self.max_held = 0

    def execute(self, tup):
        if tup.is_tick:
            for held in self.held:
                self.collector.ack(held)
            self.held = []
        else:
            self.held.append(tup)
            self.max_held = max(self.max_held, len(self.held))


class TickCounter(Bolt):
    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.ticks = 0

    def execute(self, tup):
        if tup.is_tick:
            self.ticks += 1
        self.collector.ack(tup)


def test_with_no_ackers_the_spout_acks_right_after_next_tuple_emits():
    builder = TopologyBuilder("no-ackers")
    builder.set_spout("spout", RecordingSpout, config={"count": 30})
    builder.set_bolt("pass", PassBolt, config={"fail": [[3]]}).shuffle_grouping("spout")
    builder.set_bolt("sink", HoldBolt, config={"hold": [[5]], "fail": [[7]]}).shuffle_grouping("pass")
    with LocalCluster(builder.build(ackers=0)) as cluster:
        spout = cluster.instance("spout")
        assert cluster.plan.acker_tasks == ()
        run_until_quiet(cluster, lambda: len(spout.acked) == 30 and cluster.counts("sink").executed == 29)
        # each ack comes right after the next_tuple that emitted it, before the next next_tuple
        expected = [event for i in range(30) for event in (("next", i), ("ack", i))]
        assert spout.events == expected
        assert spout.failed == []  # fails (3, 7) and a held tuple (5) downstream change nothing
        assert cluster.pending() == 0
        assert cluster.counts("spout").acked == 30
        assert cluster.errors() == []


def test_emits_without_a_msg_id_are_not_tracked():
    builder = TopologyBuilder("untracked")
    builder.set_spout("spout", RecordingSpout, config={"count": 30, "tracked": False})
    builder.set_bolt("pass", PassBolt, config={"fail": [[3]]}).shuffle_grouping("spout")
    builder.set_bolt("sink", HoldBolt, config={"fail": [[7]]}).shuffle_grouping("pass")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: cluster.counts("sink").executed == 29)
        assert spout.acked == [] and spout.failed == []
        assert cluster.pending() == 0
        assert cluster.counts("pass").acked == 29
        assert cluster.counts("sink").acked == 28
        assert cluster.counts("spout").acked == 0
        assert all(a.acker.pending == 0 for a in cluster.runtime.ackers)  # nothing reached the acker
        assert cluster.errors() == []


def test_max_spout_pending_is_never_exceeded():
    builder = TopologyBuilder("max-pending")
    builder.set_spout("spout", RecordingSpout, parallelism=1, tasks=2, config={"count": 10_000})
    builder.set_bolt("slow", BatchAckBolt, tick_frequency_seconds=0.02).shuffle_grouping("spout")
    with LocalCluster(builder.build(max_spout_pending=7)) as cluster:
        spouts = cluster.instances("spout")
        cluster.run_until(lambda: all(len(s.acked) >= 60 for s in spouts))
        for spout in spouts:
            assert spout.max_outstanding == 7  # reached (the bolt is slow), never exceeded
            assert spout.failed == []
        assert cluster.instance("slow").max_held <= 14
        assert cluster.pending() <= 14


def test_no_max_spout_pending_means_no_limit():
    builder = TopologyBuilder("unlimited")
    builder.set_spout("spout", RecordingSpout, config={"count": 500})
    builder.set_bolt("sink", HoldBolt, config={"hold": [[i] for i in range(500)]}).shuffle_grouping("spout")
    with LocalCluster(builder.build(max_spout_pending=None)) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: len(cluster.instance("sink").held) == 500)
        assert spout.max_outstanding == 500


def test_a_deactivated_spout_is_not_asked_for_tuples_until_activated():
    builder = TopologyBuilder("activation")
    builder.set_spout("spout", RecordingSpout, config={"count": 1_000_000})
    builder.set_bolt("ticks", TickCounter, tick_frequency_seconds=0.05).shuffle_grouping("spout")
    with LocalCluster(builder.build(max_spout_pending=50)) as cluster:
        spout, ticks = cluster.instance("spout"), cluster.instance("ticks")
        assert (spout.activations, spout.deactivations) == (1, 0)
        cluster.run_until(lambda: len(spout.acked) >= 100)

        cluster.deactivate()
        assert (spout.activations, spout.deactivations) == (1, 1)
        calls = spout.next_calls
        # in-flight trees still complete while deactivated, and the loop keeps running (ticks arrive)
        seen = ticks.ticks
        cluster.run_until(lambda: ticks.ticks >= seen + 4 and (cluster.pending() == 0 or spout.next_calls != calls))
        assert spout.next_calls == calls
        assert len(spout.acked) == len(spout.emitted)

        cluster.activate()
        assert (spout.activations, spout.deactivations) == (2, 1)
        emitted = len(spout.emitted)
        cluster.run_until(lambda: len(spout.acked) >= emitted + 100)
        assert spout.next_calls > calls
        cluster.activate()  # already active: no second hook call
        assert spout.activations == 2


def test_a_tracked_emit_that_reaches_no_bolt_is_acked_at_once():
    builder = TopologyBuilder("no-subscribers")
    builder.set_spout("spout", Numbers, config={"count": 5})
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == [0, 1, 2, 3, 4]
        assert spout.failed == []
        assert cluster.pending() == 0
