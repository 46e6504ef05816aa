"""Bolts' held inputs: what a draining worker waits for."""

from engine_kit import HoldBolt, RecordingSpout, run_until
from squall import TopologyBuilder
from squall.testing import LocalCluster


def test_the_runtime_counts_tracked_inputs_a_bolt_has_not_acked_yet():
    builder = TopologyBuilder("held")
    builder.set_spout("spout", RecordingSpout, config={"count": 5})
    builder.set_bolt("hold", HoldBolt, config={"hold": [[n] for n in range(5)]}).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        run_until(cluster, lambda: cluster.runtime.held() == 5)
        [bolt] = cluster.instances("hold")
        assert bolt.release() == 5
        run_until(cluster, lambda: cluster.counts("spout").acked == 5)
        assert cluster.runtime.held() == 0


class HandOverBolt(HoldBolt):
    """Holds every input; ``hand_over`` acks, through *this* task's collector, what the other task holds."""

    def hand_over(self, other: "HandOverBolt") -> int:
        held, other.held = other.held, []
        for tup in held:
            self.collector.ack(tup)
        return len(held)


def test_held_inputs_are_counted_per_tuple_whichever_task_acks_them():
    """A task may ack a tuple another task received (a shared buffer, a join): the count follows the
    tuple, so it never goes negative on one task and hides a held tuple on another."""
    builder = TopologyBuilder("held-across-tasks")
    builder.set_spout("spout", RecordingSpout, config={"count": 6})
    builder.set_bolt("hold", HandOverBolt, tasks=2, config={"hold": [[n] for n in range(6)]}) \
        .shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        run_until(cluster, lambda: cluster.runtime.held() == 6)
        first, second = cluster.instances("hold")
        assert first.held and second.held  # shuffle spread them over both tasks
        moved = first.hand_over(second)
        assert cluster.runtime.held() == 6 - moved
        second.hand_over(first)
        run_until(cluster, lambda: cluster.counts("spout").acked == 6)
        assert cluster.runtime.held() == 0
