"""Bolts' held inputs: what a draining worker waits for."""

from engine_kit import HoldBolt, Numbers
from squall import TopologyBuilder
from squall.testing import LocalCluster


def test_the_runtime_counts_tracked_inputs_a_bolt_has_not_acked_yet():
    builder = TopologyBuilder("held")
    builder.set_spout("spout", Numbers, config={"count": 5})
    builder.set_bolt("hold", HoldBolt, config={"hold": [[n] for n in range(5)]}).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        cluster.run_until(lambda: cluster.runtime.held() == 5)
        [bolt] = cluster.instances("hold")
        assert bolt.release() == 5
        cluster.run_until(lambda: cluster.counts("spout").acked == 5)
        assert cluster.runtime.held() == 0


def test_the_drain_count_follows_each_tuple_whichever_task_acks_or_fails_it_and_however_often():
    """What a draining worker waits for (``Runtime.held``) must be the number of tracked inputs not yet
    done, exactly, at every step: a tuple acked through another task's collector (a shared buffer, a
    join) is done once; an ack then a fail (forcing a replay), a fail then an ack, and a second fail
    change the tree's verdict at most, never the count. Kept per task, the counts would read 3 and -1
    after the fail-fail-ack below: only their plain sum is right (read per task, or clamped at 0, it
    is not). A count that went down twice for one tuple would read 0 while a tuple is still held, and
    the drain would end early."""
    builder = TopologyBuilder("held-across-tasks")
    builder.set_spout("spout", Numbers, config={"count": 6})
    builder.set_bolt("hold", HoldBolt, tasks=2, config={"hold": [[n] for n in range(6)]}).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        rt, spout = cluster.runtime, cluster.instance("spout")
        cluster.run_until(lambda: rt.held() == 6)
        first, second = cluster.instances("hold")
        a, b, c = first.held  # shuffle gives each task three of the six
        d, e, f = second.held

        second.collector.ack(a)  # received by the first task, acked through the second's collector
        second.collector.ack(b)
        assert rt.held() == 4
        second.collector.ack(d)
        second.collector.fail(d)  # a fail after the ack: sent to the acker, yet the tuple was done already
        assert rt.held() == 3
        second.collector.fail(c)
        second.collector.fail(c)
        second.collector.ack(c)
        assert rt.held() == 2  # e and f; the second task acked or failed 4 tuples and received 3
        first.collector.ack(e)
        assert rt.held() == 1  # f still held: the drain must wait for it
        cluster.run_until(lambda: len(spout.acked) + len(spout.failed) == 5)
        # d was its tree's only tuple: its ack completed the tree before the fail came, so the ack stands
        assert sorted(spout.acked) == sorted(a.values + b.values + d.values + e.values)
        assert spout.failed == c.values
        assert rt.held() == 1
        first.collector.ack(f)
        assert rt.held() == 0
        cluster.run_until(spout.done)
        assert rt.held() == 0
