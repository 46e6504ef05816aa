"""Guaranteed processing end to end: a spout tuple's tree completes when, and only when, its last
edge is acked; a fail anywhere in the tree reaches the spout as exactly one ``fail(msg_id)``."""

from __future__ import annotations

import pytest

from engine_kit import HoldBolt, Numbers, PassBolt, RecordingSpout, run_until_quiet
from squall import Bolt, EmitError, TopologyBuilder
from squall.testing import LocalCluster, TestingSink


class FanOutBolt(Bolt):
    """Emits ``conf["fanout"]`` children ``[id, i]`` anchored to each input, then acks the input."""

    outputs = ["id", "child"]

    def execute(self, tup):
        for i in range(self.conf["fanout"]):
            self.collector.emit([tup["id"], i], anchors=tup)
        self.collector.ack(tup)


class PairBolt(Bolt):
    """Joins consecutive inputs two by two: emits ``[a, b]`` anchored to BOTH inputs, then acks both.

    Fed by different spout tuples, the joined tuple belongs to two trees at once.
    """

    outputs = ["a", "b"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.waiting = None

    def execute(self, tup):
        if self.waiting is None:
            self.waiting = tup
            return
        first, self.waiting = self.waiting, None
        self.collector.emit(sorted([first["id"], tup["id"]]), anchors=[first, tup])
        self.collector.ack(first)
        self.collector.ack(tup)


class DiamondJoinBolt(Bolt):
    """Waits for the tuple of each id from both branches; emits ``[id]`` anchored to both, acks both."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.waiting = {}

    def execute(self, tup):
        other = self.waiting.pop(tup["id"], None)
        if other is None:
            self.waiting[tup["id"]] = tup
            return
        self.collector.emit([tup["id"]], anchors=[other, tup])
        self.collector.ack(other)
        self.collector.ack(tup)


class DoubleAckBolt(Bolt):
    """Emits a child, acks every input twice, and fails it afterwards when ``conf["fail"]``."""

    outputs = ["id"]

    def execute(self, tup):
        self.collector.emit(tup.values, anchors=tup)
        self.collector.ack(tup)
        self.collector.ack(tup)
        if self.conf.get("fail"):
            self.collector.fail(tup)


class AckThenFailSink(Bolt):
    """Acks every input (the last edge of its tree), then fails it."""

    outputs = []

    def execute(self, tup):
        self.collector.ack(tup)
        self.collector.fail(tup)


class TaskIdSpout(RecordingSpout):
    """A RecordingSpout whose msg ids name the task that emitted them."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.to_emit = [f"{context.task_id}-{i}" for i in range(conf["count"])]


def test_a_50_bolt_chain_completes_only_when_its_last_edge_is_acked():
    builder = TopologyBuilder("chain")
    builder.set_spout("spout", Numbers, config={"count": 20})
    previous = "spout"
    for i in range(50):
        builder.set_bolt(f"b{i:02d}", PassBolt).shuffle_grouping(previous)
        previous = f"b{i:02d}"
    builder.set_bolt("sink", HoldBolt, config={"hold": [[7]]}).shuffle_grouping(previous)
    with LocalCluster(builder.build()) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        run_until_quiet(cluster, lambda: len(spout.acked) >= 19 and len(sink.held) == 1)
        assert 7 not in spout.acked
        assert spout.failed == []
        assert cluster.pending() == 1

        assert sink.release() == 1
        run_until_quiet(cluster, lambda: 7 in spout.acked)
        assert sorted(spout.acked) == list(range(20))
        assert spout.failed == []
        assert cluster.pending() == 0
        assert cluster.counts("b49").acked == 20


@pytest.mark.parametrize("settings", [{}, {"ackers": 3}, {"executor_queue_size": 8}],
                         ids=["one-acker", "three-ackers", "tiny-queues"])
def test_a_fan_out_of_1000_children_completes_only_when_the_last_child_is_acked(settings):
    builder = TopologyBuilder("fanout")
    builder.set_spout("spout", Numbers, config={"count": 5})
    builder.set_bolt("fan", FanOutBolt, config={"fanout": 1000}).shuffle_grouping("spout")
    builder.set_bolt("sink", HoldBolt, parallelism=2, tasks=4, config={"hold": [[2, 737]]}).shuffle_grouping("fan")
    with LocalCluster(builder.build(**settings)) as cluster:
        spout, sinks = cluster.instance("spout"), cluster.instances("sink")
        run_until_quiet(cluster, lambda: len(spout.acked) >= 4 and sum(len(s.held) for s in sinks) == 1)
        assert sum(len(s.received) for s in sinks) == 5000
        assert sorted(spout.acked) == [0, 1, 3, 4]
        assert spout.failed == []

        assert sum(s.release() for s in sinks) == 1
        run_until_quiet(cluster, lambda: 2 in spout.acked)
        assert sorted(spout.acked) == [0, 1, 2, 3, 4]
        assert spout.failed == []


def test_a_tuple_anchored_to_two_spout_trees_holds_both_until_it_is_acked():
    builder = TopologyBuilder("multi-anchor")
    builder.set_spout("spout", Numbers, config={"count": 10})
    builder.set_bolt("pair", PairBolt).global_grouping("spout")
    builder.set_bolt("sink", HoldBolt, config={"hold": [[4, 5]]}).shuffle_grouping("pair")
    with LocalCluster(builder.build()) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        run_until_quiet(cluster, lambda: len(spout.acked) >= 8 and len(sink.held) == 1)
        assert 4 not in spout.acked and 5 not in spout.acked
        assert spout.failed == []

        sink.release()
        run_until_quiet(cluster, lambda: len(spout.acked) == 10)
        assert sorted(spout.acked) == list(range(10))
        assert spout.failed == []


def test_failing_a_tuple_anchored_to_two_spout_trees_fails_both_once():
    builder = TopologyBuilder("multi-anchor-fail")
    builder.set_spout("spout", Numbers, config={"count": 10})
    builder.set_bolt("pair", PairBolt).global_grouping("spout")
    builder.set_bolt("sink", HoldBolt, config={"fail": [[4, 5]]}).shuffle_grouping("pair")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.failed) == [4, 5]
        assert sorted(spout.acked) == [0, 1, 2, 3, 6, 7, 8, 9]
        assert cluster.counts("spout").failed == 2


class HoldFirstMixedPair(Bolt):
    """Holds the first pair joining tuples of two different spout tasks (ids "task-i"); acks the rest."""

    outputs = ["a", "b"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = None

    def execute(self, tup):
        a, b = tup.values
        if self.held is None and a.split("-")[0] != b.split("-")[0]:
            self.held = tup
        else:
            self.collector.ack(tup)


def test_a_tuple_anchored_to_trees_of_two_spout_tasks_fails_both_trees():
    builder = TopologyBuilder("two-spout-tasks")
    # 11 tuples per task: odd, so at least one pair must join tuples of both tasks
    builder.set_spout("spout", TaskIdSpout, parallelism=2, config={"count": 11})
    builder.set_bolt("pair", PairBolt).global_grouping("spout")
    builder.set_bolt("sink", HoldFirstMixedPair).shuffle_grouping("pair")
    with LocalCluster(builder.build(ackers=2)) as cluster:
        spouts, sink = cluster.instances("spout"), cluster.instance("sink")
        run_until_quiet(cluster, lambda: sum(len(s.acked) for s in spouts) >= 20 and sink.held is not None)
        held = set(sink.held.values)
        for spout in spouts:
            assert sorted(spout.acked) == sorted(set(spout.emitted) - held)
            assert spout.failed == []

        sink.collector.fail(sink.held)
        run_until_quiet(cluster, lambda: all(s.settled() for s in spouts))
        for spout in spouts:
            assert len(spout.failed) == 1 and spout.failed[0] in held
            assert spout.failed[0].startswith(f"{spout.context.task_id}-")
            assert sorted(spout.acked) == sorted(set(spout.emitted) - held)


def diamond(**sink_config) -> TopologyBuilder:
    """spout → left, right → join (anchored to both branches of the same tree) → sink."""
    builder = TopologyBuilder("diamond")
    builder.set_spout("spout", Numbers, config={"count": 10})
    builder.set_bolt("left", PassBolt).shuffle_grouping("spout")
    builder.set_bolt("right", PassBolt, config={"fail": [[6]]}).shuffle_grouping("spout")
    (builder.set_bolt("join", DiamondJoinBolt, parallelism=2)
     .fields_grouping("left", ["id"]).fields_grouping("right", ["id"]))
    builder.set_bolt("sink", HoldBolt, config=sink_config).shuffle_grouping("join")
    return builder


def test_a_diamond_rejoining_one_tree_completes_when_the_joined_tuple_is_acked():
    with LocalCluster(diamond(hold=[[3]]).build()) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        run_until_quiet(cluster, lambda: len(spout.acked) + len(spout.failed) >= 9 and len(sink.held) == 1)
        assert 3 not in spout.acked
        sink.release()
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == [0, 1, 2, 3, 4, 5, 7, 8, 9]
        assert spout.failed == [6]  # failed in one branch: the tree fails although the other branch acked


@pytest.mark.parametrize("failing", ["b0", "b2", "sink"])
def test_a_fail_anywhere_in_the_tree_fails_the_spout_tuple_exactly_once(failing):
    builder = TopologyBuilder("fail-anywhere")
    builder.set_spout("spout", RecordingSpout, config={"msg_ids": [10, 11, 12, 13, 14]})
    previous = "spout"
    for name in ["b0", "b1", "b2"]:
        builder.set_bolt(name, PassBolt, config={"fail": [[12]]} if name == failing else {}).shuffle_grouping(previous)
        previous = name
    builder.set_bolt("sink", HoldBolt, config={"fail": [[12]]} if failing == "sink" else {}).shuffle_grouping(previous)
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.settled)
        assert spout.failed == [12]
        assert sorted(spout.acked) == [10, 11, 13, 14]
        assert cluster.counts("spout").failed == 1
        assert cluster.counts(failing).failed == 1
        assert cluster.pending() == 0


def test_many_failing_children_of_one_tree_fail_it_once_while_siblings_ack():
    fails = [[1, c] for c in range(0, 100, 3)]
    builder = TopologyBuilder("many-fails")
    builder.set_spout("spout", RecordingSpout, config={"count": 3})
    builder.set_bolt("fan", FanOutBolt, config={"fanout": 100}).shuffle_grouping("spout")
    builder.set_bolt("sink", HoldBolt, parallelism=3, config={"fail": fails}).shuffle_grouping("fan")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: spout.settled() and cluster.counts("sink").executed == 300)
        assert spout.failed == [1]
        assert sorted(spout.acked) == [0, 2]
        assert [e for e in spout.events if e[0] != "next" and e[1] == 1] == [("fail", 1)]


def test_a_second_ack_is_ignored():
    builder = TopologyBuilder("double-ack")
    builder.set_spout("spout", Numbers, config={"count": 20})
    builder.set_bolt("twice", DoubleAckBolt).shuffle_grouping("spout")
    builder.set_bolt("sink", TestingSink).shuffle_grouping("twice")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == list(range(20))
        assert spout.failed == []


def test_a_fail_after_an_ack_fails_a_tree_that_is_still_pending():
    """Storm's way: while the tree is pending (here: the child is still at the sink), a fail wins."""
    builder = TopologyBuilder("ack-then-fail")
    builder.set_spout("spout", Numbers, config={"count": 20})
    builder.set_bolt("twice", DoubleAckBolt, config={"fail": True}).shuffle_grouping("spout")
    builder.set_bolt("sink", TestingSink).shuffle_grouping("twice")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.failed) == list(range(20)) and spout.acked == []
        assert cluster.counts("spout").timed_out == 0


def test_a_fail_after_the_last_ack_cannot_undo_a_completed_tree():
    builder = TopologyBuilder("completed")
    builder.set_spout("spout", Numbers, config={"count": 20})
    builder.set_bolt("sink", AckThenFailSink).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == list(range(20)) and spout.failed == []


class LateEmitBolt(Bolt):
    """Acks (or fails) its input, then emits anchored to it: refused."""

    outputs = ["id"]

    def execute(self, tup):
        (self.collector.fail if self.conf.get("fail") else self.collector.ack)(tup)
        try:
            self.collector.emit(tup.values, anchors=tup)
        except EmitError as exc:
            self.refused = str(exc)


@pytest.mark.parametrize("verdict", ["acked", "failed"])
def test_emitting_anchored_to_a_decided_tuple_is_refused(verdict):
    builder = TopologyBuilder("late-emit")
    builder.set_spout("spout", Numbers, config={"count": 1})
    builder.set_bolt("late", LateEmitBolt, config={"fail": verdict == "failed"}).shuffle_grouping("spout")
    builder.set_bolt("sink", TestingSink).shuffle_grouping("late")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        late = cluster.instance("late")
        assert f"component 'late' emitted on stream 'default' anchored to a tuple it has already {verdict}" \
            in late.refused
        assert cluster.instance("sink").received == []  # nothing joined the decided tree


class NotATupleBolt(Bolt):
    """Hands the collector something other than its input, as a bug in a bolt would."""

    outputs = ["id"]

    def execute(self, tup):
        call, value = self.conf["call"], self.conf["value"]
        if call == "emit":
            self.collector.emit(tup.values, anchors=[value])
        else:
            getattr(self.collector, call)(value)
        self.collector.ack(tup)


@pytest.mark.parametrize("value", [None, "a tuple id"])
@pytest.mark.parametrize("call", ["ack", "fail", "reset_timeout", "emit"])
def test_a_bolt_that_hands_its_collector_something_other_than_a_tuple_fails_its_input_with_a_clear_error(
        call, value):
    """Compiled, a None passed where a Tuple is typed was read as a Tuple's fields: the process died of a
    segfault (ack, fail) or emitted into garbage trees (an anchor); interpreted, an AttributeError
    (found by the engine audit)."""
    builder = TopologyBuilder("not-a-tuple")
    builder.set_spout("spout", Numbers, config={"count": 3})
    builder.set_bolt("bolt", NotATupleBolt, config={"call": call, "value": value}).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.failed) == [0, 1, 2] and spout.acked == []
        errors = [e.error for e in cluster.errors("bolt")]
        assert errors and all(e.startswith("TypeError") for e in errors), errors
        if value is None:
            assert "takes a Tuple the bolt received, not NoneType" in errors[0]


@pytest.mark.parametrize("parallelism", [1, 2])
def test_each_spout_task_gets_the_verdicts_of_its_own_tuples(parallelism):
    builder = TopologyBuilder("spout-tasks")
    builder.set_spout("spout", TaskIdSpout, parallelism=parallelism, tasks=3, config={"count": 20})
    builder.set_bolt("pass", PassBolt, parallelism=2).shuffle_grouping("spout")
    builder.set_bolt("sink", HoldBolt, config={"fail": [[f"{t}-5"] for t in range(10)]}).shuffle_grouping("pass")
    with LocalCluster(builder.build()) as cluster:
        spouts = cluster.instances("spout")
        assert len(spouts) == 3
        run_until_quiet(cluster, lambda: all(s.settled() for s in spouts))
        for spout in spouts:
            task = spout.context.task_id
            assert spout.failed == [f"{task}-5"]
            assert sorted(spout.acked) == sorted(f"{task}-{i}" for i in range(20) if i != 5)
