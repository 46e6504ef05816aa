"""A checkpoint's commit is written off the scheduler thread: a stateful bolt goes on executing while its
store writes, and acks what the commit holds once the write is done."""

from __future__ import annotations

import threading

from squall import StatefulBolt, TopologyBuilder
from squall.state.stores import MemoryStore
from squall.testing import LocalCluster, TestingSpout


class Words(TestingSpout):
    outputs = ["word"]

    def items(self):
        return ([w] for w in ["a", "b", "c"] * 100_000)


class Count(StatefulBolt):
    outputs = []

    def execute(self, tup):
        self.state.put(tup["word"], self.state.get(tup["word"], 0) + 1)


def test_a_bolt_executes_while_its_commit_is_written_and_acks_its_inputs_once_it_is(monkeypatch):
    writing, release = threading.Event(), threading.Event()
    real = MemoryStore.commit

    def slow_commit(self, txid, changes):
        if "progress" not in changes:  # the count's commit, not the checkpoint spout's record of its progress
            writing.set()
            release.wait(timeout=60)  # a store that takes long: until the test has seen tuples flow meanwhile
        real(self, txid, changes)

    monkeypatch.setattr(MemoryStore, "commit", slow_commit)
    builder = TopologyBuilder("commits")
    builder.set_spout("words", Words)
    builder.set_bolt("count", Count).shuffle_grouping("words")
    spec = builder.build(max_spout_pending=100_000, config={"topology.state.checkpoint.interval.ms": 100,
                                                           "topology.state.provider": "memory"})
    with LocalCluster(spec) as cluster:
        cluster.run_until(writing.is_set, seconds=30)
        acked, executed = cluster.trees_acked(), cluster.counts("count").executed
        cluster.run_until(lambda: cluster.counts("count").executed >= executed + 1_000, seconds=30)
        assert cluster.trees_acked() == acked  # what the commit holds waits for its write
        release.set()
        cluster.run_until(lambda: cluster.trees_acked() > acked, seconds=30)
