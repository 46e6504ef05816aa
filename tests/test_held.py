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
