"""LogSpout in a LocalCluster: the engine's collector and ackers drive its acks, fails and commits."""

from __future__ import annotations

from collections import Counter

from squall import Bolt
from squall.spouts.log import DurableLog, LogSpout
from squall.testing import LocalCluster
from squall.topology import TopologyBuilder


class FlakyCount(Bolt):
    """Fails every record the first time it sees it, acks it the second time, and counts."""

    seen: Counter = Counter()

    def execute(self, tup):
        key = (tup["partition"], tup["offset"])
        FlakyCount.seen[key] += 1
        if FlakyCount.seen[key] == 1:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def test_records_failed_downstream_are_replayed_and_all_offsets_end_up_committed(tmp_path):
    path = tmp_path / "log.db"
    log = DurableLog(path, create=True)
    log.create_topic("clicks", partitions=3)
    log.append("clicks", [(None, {"n": i}) for i in range(60)])
    FlakyCount.seen.clear()

    builder = TopologyBuilder("clicks")
    builder.set_spout("records", LogSpout, 2, config={"log.path": str(path), "log.topic": "clicks",
                                                      "log.group": "count", "offset.commit.period.ms": 0})
    builder.set_bolt("count", FlakyCount).shuffle_grouping("records")
    with LocalCluster(builder.build()) as cluster:
        cluster.run(until=lambda c: len(FlakyCount.seen) == 60 and all(n == 2 for n in FlakyCount.seen.values())
                    and c.pending() == 0, seconds=30)
        assert cluster.errors() == []
    assert len(FlakyCount.seen) == 60 and set(FlakyCount.seen.values()) == {2}
    assert {p: c.offset for p, c in log.committed("count", "clicks").items()} == {0: 20, 1: 20, 2: 20}
    log.close()
