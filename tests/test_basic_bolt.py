"""BasicBolt: emits anchored to the input, the input acked when ``execute`` returns, failed (quietly
or reported) when it raises."""

from __future__ import annotations

import pytest

from engine_kit import HoldBolt, Numbers, run_until_quiet
from squall import BasicBolt, EmitError, FailedException, ReportedFailedException, TopologyBuilder
from squall.testing import LocalCluster


class Doubler(BasicBolt):
    """Emits two children per input: ``[id * 10]`` and ``[id * 10 + 1]``."""

    outputs = ["id"]

    def execute(self, tup, collector):
        collector.emit([tup["id"] * 10])
        collector.emit([tup["id"] * 10 + 1])


class Raiser(BasicBolt):
    """Emits a child, then raises for ids in ``conf["quiet"]`` (FailedException), ``conf["loud"]``
    (ValueError) and ``conf["reported"]`` (ReportedFailedException)."""

    outputs = ["id"]

    def execute(self, tup, collector):
        collector.emit(tup.values)
        if tup["id"] in self.conf.get("quiet", []):
            raise FailedException("not this one")
        if tup["id"] in self.conf.get("loud", []):
            raise ValueError(f"cannot handle {tup['id']}")
        if tup["id"] in self.conf.get("reported", []):
            raise ReportedFailedException(f"reported {tup['id']}")


class Keeper(BasicBolt):
    """Keeps its collector, to use it again after execute returned."""

    outputs = ["id"]

    def prepare(self, conf, context):
        super().prepare(conf, context)
        self.kept = None

    def execute(self, tup, collector):
        self.kept = collector
        collector.reset_timeout()  # inside execute: fine


def topology(bolt: type, *, sink: dict | None = None, count: int = 5, **config) -> TopologyBuilder:
    builder = TopologyBuilder("basic")
    builder.set_spout("spout", Numbers, config={"count": count})
    builder.set_bolt("basic", bolt, config=config).shuffle_grouping("spout")
    if sink is not None:
        builder.set_bolt("sink", HoldBolt, config=sink).shuffle_grouping("basic")
    return builder


def test_emits_are_anchored_to_the_input_so_the_tree_waits_for_downstream_acks():
    with LocalCluster(topology(Doubler, sink={"hold": [[31]]}).build()) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        run_until_quiet(cluster, lambda: len(spout.acked) >= 4 and len(sink.held) == 1)
        assert 3 not in spout.acked
        assert sorted(sink.received) == sorted([[i * 10] for i in range(5)] + [[i * 10 + 1] for i in range(5)])
        assert cluster.counts("basic").acked == 5  # its own input was acked when execute returned

        sink.release()
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == [0, 1, 2, 3, 4]
        assert spout.failed == []


def test_the_input_is_acked_when_execute_returns():
    with LocalCluster(topology(Doubler).build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == [0, 1, 2, 3, 4]
        assert (cluster.counts("basic").acked, cluster.counts("basic").failed) == (5, 0)


def test_failed_exception_fails_the_input_without_reporting_an_error():
    with LocalCluster(topology(Raiser, sink={}, quiet=[2]).build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert spout.failed == [2]
        assert sorted(spout.acked) == [0, 1, 3, 4]
        assert cluster.errors("basic") == []
        assert cluster.counts("basic").errors == 0
        assert cluster.counts("basic").failed == 1


def test_another_exception_fails_the_input_and_reports_the_error():
    with LocalCluster(topology(Raiser, sink={}, loud=[1, 3]).build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.failed) == [1, 3]
        assert sorted(spout.acked) == [0, 2, 4]
        errors = cluster.errors("basic")
        assert [e.error for e in errors] == ["ValueError: cannot handle 1", "ValueError: cannot handle 3"]
        assert all("Traceback" in e.trace and "cannot handle" in e.trace for e in errors)
        assert all(e.component == "basic" and e.task == cluster.plan.component_tasks["basic"][0] for e in errors)
        # the bolt goes on: the inputs after the failures were processed and acked
        assert cluster.counts("basic").executed == 5


def test_reported_failed_exception_fails_the_input_and_reports_the_error():
    with LocalCluster(topology(Raiser, sink={}, reported=[4]).build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert spout.failed == [4]
        assert [e.error for e in cluster.errors("basic")] == ["ReportedFailedException: reported 4"]


def test_reset_timeout_is_only_valid_inside_execute():
    with LocalCluster(topology(Keeper, count=2).build()) as cluster:
        spout, keeper = cluster.instance("spout"), cluster.instance("basic")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == [0, 1]
        with pytest.raises(EmitError, match="reset_timeout is only valid inside execute"):
            keeper.kept.reset_timeout()
