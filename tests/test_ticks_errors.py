"""Tick tuples, and the reporting of errors: every error logged, at most N per interval recorded,
the last few kept."""

from __future__ import annotations

import logging
import re

import pytest

from engine_kit import HoldBolt, Numbers, RecordingSpout, run_until_quiet
from squall import Bolt, TopologyBuilder
from squall.executor.reporting import ErrorLog, ErrorReporter
from squall.testing import LocalCluster, TestingSink


class Ticked(Bolt):
    """Records the ticks it receives (acking them, which must be harmless) and its other inputs."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.ticks: list = []
        self.inputs: list = []

    def execute(self, tup):
        (self.ticks if tup.is_tick else self.inputs).append(tup)
        self.collector.ack(tup)


class Complainer(Bolt):
    """Reports ``conf["errors"]`` errors from the first tuple it executes, and acks every tuple."""

    outputs = ["id"]

    def execute(self, tup):
        if tup["id"] == 0:
            for i in range(self.conf["errors"]):
                self.collector.report_error(RuntimeError(f"error {i}"))
        self.collector.ack(tup)


class FlakySpout(RecordingSpout):
    """Raises from next_tuple every third call; emits otherwise."""

    def next_tuple(self):
        if self.next_calls % 3 == 2:
            self.next_calls += 1
            raise RuntimeError("flaky source")
        super().next_tuple()


def test_a_bolt_with_a_tick_frequency_receives_tick_tuples_repeatedly():
    builder = TopologyBuilder("ticks")
    builder.set_spout("spout", Numbers, config={"count": 5})
    builder.set_bolt("ticked", Ticked, parallelism=2, tasks=3, tick_frequency_seconds=0.2).shuffle_grouping("spout")
    builder.set_bolt("plain", Ticked).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        ticked, spout = cluster.instances("ticked"), cluster.instance("spout")
        cluster.run_until(lambda: spout.done() and all(len(b.ticks) >= 3 for b in ticked))
        assert sorted(spout.acked) == [0, 1, 2, 3, 4]  # acking the ticks changed nothing
        for bolt in ticked:
            assert all(t.is_tick and t.source_component == "__system" and t.values == [] for t in bolt.ticks)
            assert all(t.task == bolt.context.task_id for t in bolt.ticks)
        assert sum(len(b.inputs) for b in ticked) == 5
        assert not any(t.is_tick for b in ticked for t in b.inputs)
        assert cluster.instance("plain").ticks == []  # no tick frequency: no ticks
        assert cluster.errors() == []


def test_fifty_errors_at_once_record_and_log_five_and_count_all(caplog):
    builder = TopologyBuilder("throttled")
    builder.set_spout("spout", Numbers, config={"count": 3})
    builder.set_bolt("complainer", Complainer, config={"errors": 50}).shuffle_grouping("spout")
    with caplog.at_level(logging.ERROR, logger="squall.errors"), LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        recorded = cluster.errors("complainer")
        assert [e.error for e in recorded] == [f"RuntimeError: error {i}" for i in range(5)]
        assert all(e.component == "complainer" for e in recorded)
        logged = [r.getMessage() for r in caplog.records if r.name == "squall.errors"]
        assert len(logged) == 6 and all("complainer" in m for m in logged)
        assert [m.rsplit("RuntimeError: ", 1)[-1] for m in logged[:5]] == [f"error {i}" for i in range(5)]
        assert "more than 5 errors within 10 s" in logged[5]
        assert cluster.counts("complainer").errors == 50
        assert sorted(spout.acked) == [0, 1, 2]  # reporting errors does not fail anything


def test_only_the_last_ten_recorded_errors_are_kept():
    builder = TopologyBuilder("kept")
    builder.set_spout("spout", Numbers, config={"count": 1})
    builder.set_bolt("complainer", Complainer, config={"errors": 50}).shuffle_grouping("spout")
    with LocalCluster(builder.build(error_reporting={"maxPerInterval": 100})) as cluster:
        run_until_quiet(cluster, cluster.instance("spout").done)
        assert [e.error for e in cluster.errors("complainer")] == [f"RuntimeError: error {i}" for i in range(40, 50)]
        assert [e.error for e in cluster.errors()] == [f"RuntimeError: error {i}" for i in range(40, 50)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_allows_five_per_ten_second_window(caplog):
    """Five errors a window are logged and recorded; the rest only counted, said once a window (a bolt
    failing every tuple logged a traceback per tuple)."""
    clock = FakeClock()
    log = ErrorLog(keep=100)
    reporter = ErrorReporter(component="c", log_=log, max_per_interval=5, interval=10.0, clock=clock)
    recorded = []
    for second in range(30):  # 3 errors a second for 30 s
        clock.now = 1000.0 + second
        recorded += [reporter.report(RuntimeError(f"{second}.{i}"), task=1) for i in range(3)]
    assert sum(recorded) == 15  # 5 in each of the three 10 s windows
    assert reporter.suppressed == 75
    logged = [r.getMessage() for r in caplog.records if r.name == "squall.errors"]
    assert sum("reported an error:\nRuntimeError" in m for m in logged) == 15
    assert sum("more than 5 errors within 10 s" in m for m in logged) == 3 and len(logged) == 18
    seconds = [float(e.error.split(": ")[1]) // 1 for e in log.recent("c")]
    assert [sum(1 for s in seconds if w * 10 <= s < w * 10 + 10) for w in range(3)] == [5, 5, 5]


def test_an_exception_in_next_tuple_is_reported_and_the_spout_goes_on():
    builder = TopologyBuilder("flaky")
    builder.set_spout("spout", FlakySpout, config={"count": 10})
    builder.set_bolt("sink", Ticked).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.settled)
        assert sorted(spout.acked) == list(range(10))
        errors = cluster.errors("spout")
        assert errors and all(e.error == "RuntimeError: flaky source" for e in errors)


class Broken(Bolt):
    outputs = ["id"]

    def execute(self, tup):
        if tup["id"] == 1:
            raise KeyError("missing")
        self.collector.ack(tup)


def test_an_exception_in_execute_fails_the_input_and_is_reported():
    builder = TopologyBuilder("broken")
    builder.set_spout("spout", Numbers, config={"count": 3})
    builder.set_bolt("broken", Broken).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert spout.failed == [1]
        assert sorted(spout.acked) == [0, 2]
        assert [e.error for e in cluster.errors("broken")] == ["KeyError: 'missing'"]


class AckThenRaise(Bolt):
    """Emits an anchored child, acks its input, then raises (a bug in a line after the ack)."""

    outputs = ["id"]

    def execute(self, tup):
        self.collector.emit(list(tup.values), anchors=tup)
        self.collector.ack(tup)
        raise RuntimeError("after the ack")


def test_an_exception_after_the_bolt_acked_its_input_does_not_fail_the_tree():
    """The engine fails an input for its exception only if the bolt had not decided it: the trees
    complete once the sink acks the children (before, the FAIL after the ack failed them all)."""
    builder = TopologyBuilder("ack-then-raise")
    builder.set_spout("spout", Numbers, config={"count": 5})
    builder.set_bolt("bolt", AckThenRaise).shuffle_grouping("spout")
    builder.set_bolt("sink", TestingSink).shuffle_grouping("bolt")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == [0, 1, 2, 3, 4] and spout.failed == []
        assert cluster.counts("bolt").failed == 0
        assert [e.error for e in cluster.errors("bolt")] == ["RuntimeError: after the ack"] * 5


@pytest.mark.parametrize("keep", [1, 3])
def test_error_log_keeps_the_last_n_per_component(keep):
    log = ErrorLog(keep=keep)
    clock = FakeClock()
    for component in ("a", "b"):
        reporter = ErrorReporter(component=component, log_=log, max_per_interval=100, interval=10, clock=clock)
        for i in range(5):
            reporter.report(ValueError(f"{component}{i}"), task=1)
    assert [e.error for e in log.recent("a")] == [f"ValueError: a{i}" for i in range(5 - keep, 5)]
    assert len(log.recent()) == 2 * keep


class BrokenOpen(RecordingSpout):
    def open(self, conf, context, collector):
        raise RuntimeError("cannot open the source")

    def next_tuple(self):
        raise RuntimeError("polled although open raised")

    def activate(self):
        raise RuntimeError("activated although open raised")

    def close(self):
        raise RuntimeError("closed although open raised")


class BrokenPrepare(Bolt):
    def prepare(self, conf, context, collector):
        raise RuntimeError("cannot load the model")

    def execute(self, tup):
        raise RuntimeError("never prepared")

    def cleanup(self):
        raise RuntimeError("cleanup of a bolt that was never prepared")


def test_a_spout_whose_open_raises_and_a_bolt_whose_prepare_raises_are_reported_and_the_rest_runs():
    builder = TopologyBuilder("broken-start")
    builder.set_spout("good", Numbers, config={"count": 50})
    builder.set_spout("bad", BrokenOpen)
    builder.set_bolt("model", BrokenPrepare).shuffle_grouping("bad")
    builder.set_bolt("sink", Ticked).shuffle_grouping("good")
    with LocalCluster(builder.build()) as cluster:
        good = cluster.instance("good")
        cluster.run_until(good.done)
        assert sorted(good.acked) == list(range(50))  # the healthy part of the topology runs
        assert cluster.errors("model")[0].error == "RuntimeError: cannot load the model"
    # A spout whose open raised is not polled, activated or closed: half-built, it would only report
    # what that breaks, as fast as it is called, burying the one error that says why. (Its open is
    # called again a second later, and this run may have lasted that long.)
    assert {e.error for e in cluster.errors("bad")} == {"RuntimeError: cannot open the source"}
    # cleanup is for what prepare built: a bolt whose prepare raised is not cleaned up
    assert "RuntimeError: cleanup of a bolt that was never prepared" not in {e.error for e in cluster.errors("model")}


class OpensLate(RecordingSpout):
    """Its source is down for its first two open() calls (a broker not yet up when the pod starts)."""

    opens = 0

    def open(self, conf, context, collector):
        OpensLate.opens += 1
        if OpensLate.opens <= 2:
            raise ConnectionError(f"source down (open {OpensLate.opens})")
        super().open(conf, context, collector)


class PreparesLate(Bolt):
    """Its database is down for its first prepare() call; a tuple executed before it returns fails."""

    prepares = 0

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        PreparesLate.prepares += 1
        self.ready = PreparesLate.prepares > 1
        if not self.ready:
            raise ConnectionError("database down")

    def execute(self, tup):
        if not self.ready:
            raise RuntimeError("not prepared")
        self.collector.ack(tup)


def test_a_spout_whose_open_and_a_bolt_whose_prepare_raised_are_called_again_until_they_return():
    """A source down when the process started left the spout emitting nothing until the process was
    restarted by hand; Storm's worker dies and is restarted. Now open() is called again after 1 s, then
    2 s, and the spout is activated and emits; the bolt's prepare() is called again after 1 s, and the
    spout's trees all complete."""
    OpensLate.opens = PreparesLate.prepares = 0
    builder = TopologyBuilder("late-start")
    builder.set_spout("source", OpensLate, config={"count": 20})
    builder.set_bolt("store", PreparesLate).shuffle_grouping("source")
    with LocalCluster(builder.build()) as cluster:
        source = cluster.instance("source")
        cluster.run_until(lambda: len(getattr(source, "acked", ())) == 20)  # set by the open that returns
        assert OpensLate.opens == 3 and PreparesLate.prepares == 2
        assert source.activations == 1 and source.failed == []  # it emitted after the bolt was prepared
        assert [e.error for e in cluster.errors("source")] == [
            "ConnectionError: source down (open 1)", "ConnectionError: source down (open 2)"]
        assert [e.error for e in cluster.errors("store")] == ["ConnectionError: database down"]


# Every other callback of a spout or bolt: what it raises is reported (logged, counted, recorded up to
# maxPerInterval) and the topology goes on. The throttle's window is an hour here, so how many errors
# are recorded never depends on how fast the machine runs the test.
NO_WINDOW = {"intervalSeconds": 3600}


class RaisingVerdicts(Numbers):
    """Records each verdict, then raises from ``ack`` and ``fail``."""

    def ack(self, msg_id):
        super().ack(msg_id)
        raise RuntimeError(f"ack {msg_id} raised")

    def fail(self, msg_id):
        super().fail(msg_id)
        raise RuntimeError(f"fail {msg_id} raised")


def test_a_spout_whose_ack_and_fail_raise_is_reported_throttled_and_goes_on_emitting(caplog):
    builder = TopologyBuilder("raising-verdicts")
    builder.set_spout("spout", RaisingVerdicts, config={"count": 20})
    # 3 and 7 fail at the bolt; 5 is held and times out: fail is called from the rotation timer too
    builder.set_bolt("sink", HoldBolt, config={"fail": [[3], [7]], "hold": [[5]]}).shuffle_grouping("spout")
    spec = builder.build(message_timeout_seconds=1, error_reporting=NO_WINDOW)
    with caplog.at_level(logging.ERROR, logger="squall.errors"), LocalCluster(spec) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.failed) == [3, 5, 7]
        assert sorted(spout.acked) == [i for i in range(20) if i not in (3, 5, 7)]
        counts = cluster.counts("spout")
        assert (counts.errors, counts.timed_out, counts.failed, counts.pending) == (20, 1, 2, 0)
        recorded = [e.error for e in cluster.errors("spout")]
        assert len(recorded) == 5  # maxPerInterval
        assert all(re.fullmatch(r"RuntimeError: (ack|fail) \d+ raised", e) for e in recorded)
        logged = [r.getMessage() for r in caplog.records if r.name == "squall.errors"]
        assert len(logged) == 6 and all("component spout" in m for m in logged)  # 5, then "more than 5"


def test_with_no_ackers_a_spout_whose_ack_raises_at_emit_is_reported_and_goes_on():
    builder = TopologyBuilder("raising-untracked-acks")
    builder.set_spout("spout", RaisingVerdicts, config={"count": 8})
    builder.set_bolt("sink", TestingSink).shuffle_grouping("spout")
    with LocalCluster(builder.build(ackers=0, error_reporting=NO_WINDOW)) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert spout.acked == list(range(8))  # acked as emitted, each ack raising
        assert cluster.counts("spout").errors == 8
        assert [e.error for e in cluster.errors("spout")] == [f"RuntimeError: ack {i} raised" for i in range(5)]


class RaisingSwitch(RecordingSpout):
    """Counts its activations and deactivations, raising from each."""

    def activate(self):
        super().activate()
        raise RuntimeError("activate raised")

    def deactivate(self):
        super().deactivate()
        raise RuntimeError("deactivate raised")


def test_a_spout_whose_activate_and_deactivate_raise_is_reported_and_still_switches():
    builder = TopologyBuilder("raising-switch")
    builder.set_spout("spout", RaisingSwitch, config={"count": 3})
    builder.set_bolt("sink", TestingSink).shuffle_grouping("spout")
    with LocalCluster(builder.build(error_reporting=NO_WINDOW)) as cluster:
        spout, [executor] = cluster.instance("spout"), cluster.runtime.spouts
        run_until_quiet(cluster, spout.settled)  # the activation raised; the spout emits all the same
        assert sorted(spout.acked) == [0, 1, 2]
        cluster.deactivate()
        assert not executor.active and spout.deactivations == 1
        cluster.activate()
        assert executor.active and spout.activations == 2
        spout.to_emit += [3, 4]
        run_until_quiet(cluster, spout.settled)
        assert sorted(spout.acked) == [0, 1, 2, 3, 4]
        assert [e.error for e in cluster.errors("spout")] == \
            ["RuntimeError: activate raised", "RuntimeError: deactivate raised", "RuntimeError: activate raised"]


class ClosingSpout(Numbers):
    """Records that it was closed; raises from ``close`` when ``conf["raise"]``."""

    def close(self):
        self.closed = True
        if self.conf.get("raise"):
            raise RuntimeError("close raised")


class CleaningBolt(HoldBolt):
    """Records that it was cleaned up; raises from ``cleanup`` when ``conf["raise"]``."""

    def cleanup(self):
        self.cleaned = True
        if self.conf.get("raise"):
            raise RuntimeError("cleanup raised")


def test_a_spout_whose_close_and_a_prepared_bolt_whose_cleanup_raise_are_reported_and_the_rest_shut_down():
    builder = TopologyBuilder("raising-shutdown")
    # the raising ones first: what they raise must not keep the others from closing and cleaning up
    builder.set_spout("bad-spout", ClosingSpout, config={"count": 5, "raise": True})
    builder.set_spout("good-spout", ClosingSpout, config={"count": 5})
    builder.set_bolt("bad-bolt", CleaningBolt, parallelism=2, config={"raise": True}).shuffle_grouping("bad-spout")
    builder.set_bolt("good-bolt", CleaningBolt).shuffle_grouping("good-spout")
    with LocalCluster(builder.build(error_reporting=NO_WINDOW)) as cluster:
        spouts = [cluster.instance("bad-spout"), cluster.instance("good-spout")]
        bolts = cluster.instances("bad-bolt") + cluster.instances("good-bolt")
        run_until_quiet(cluster, lambda: all(s.done() for s in spouts))
        assert all(sorted(s.acked) == list(range(5)) for s in spouts)
        assert cluster.errors() == []
    assert all(s.closed for s in spouts) and all(b.cleaned for b in bolts)
    assert [e.error for e in cluster.errors("bad-spout")] == ["RuntimeError: close raised"]
    assert [(e.error, e.task) for e in cluster.errors("bad-bolt")] == \
        [("RuntimeError: cleanup raised", task) for task in cluster.plan.component_tasks["bad-bolt"]]
    assert cluster.errors("good-spout") == cluster.errors("good-bolt") == []
    assert (cluster.counts("bad-spout").errors, cluster.counts("bad-bolt").errors) == (1, 2)
