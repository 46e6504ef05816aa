"""Windowed bolts in a LocalCluster: count and duration windows, event time with watermarks and a late-tuple
stream, acking when a tuple leaves its last window, failing a window whose execute raised, anchoring (and its
cap), and what validation refuses."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from squall import (
    Bolt,
    Count,
    Duration,
    StatefulBolt,
    TopologyBuilder,
    TopologyError,
    TopologySpec,
    WindowedBolt,
    validate,
)
from squall.testing import LocalCluster, TestingSink, TestingSpout

FAR = 10**13  # a timestamp beyond every window: the watermark passes them all


class Numbers(TestingSpout):
    outputs = ["n"]

    def items(self):
        return [[i] for i in range(self.conf.get("test.n", 100))]


class Clicks(TestingSpout):
    """``(user, ts)`` from the config's ``test.clicks``, one every 50 ms: the watermark (every 10 ms) moves
    between them."""

    outputs = ["user", "ts"]

    def items(self):
        self.last = 0.0
        return [list(c) for c in self.conf["test.clicks"]]

    def ready(self):
        if time.monotonic() - self.last < 0.05:
            return False
        self.last = time.monotonic()
        return True


class Recorder(WindowedBolt):
    """Emits each window's values, bounds and new and expired values; keeps them in ``windows`` too."""

    outputs = ["values", "start", "end"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.windows = []

    def execute(self, window):
        values = [t[0] for t in window.get()]
        self.windows.append((values, [t[0] for t in window.get_new()], [t[0] for t in window.get_expired()],
                             window.start_timestamp, window.end_timestamp))
        self.collector.emit([values, window.start_timestamp, window.end_timestamp])


class Raising(Recorder):
    """Raises on its first window: its tuples are failed, and replayed."""

    def execute(self, window):
        super().execute(window)
        if len(self.windows) == 1:
            raise RuntimeError("the first window fails")


def windowed(bolt: type = Recorder, *, spout: type = Numbers, config: dict | None = None, **settings):
    builder = TopologyBuilder("windows")
    builder.set_spout("source", spout, config=config)
    return builder, builder.set_bolt("window", bolt).shuffle_grouping("source")


def test_a_sliding_count_window_holds_the_last_n_tuples_and_acks_each_once_it_left_them():
    builder, window = windowed(config={"test.n": 100})
    window.with_window(Count(10), Count(5))
    builder.set_bolt("sink", TestingSink).shuffle_grouping("window")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("source")
        cluster.run_until(lambda: len(cluster.instance("window").windows) == 20)
        cluster.run(seconds=0.2)
        windows = cluster.instance("window").windows
        assert [w[0] for w in windows] == [list(range(max(0, k - 10), k)) for k in range(5, 101, 5)]
        assert windows[1][1] == [5, 6, 7, 8, 9] and windows[2][2] == [0, 1, 2, 3, 4]
        # every tuple no later window can hold is acked: all but the last 5, which the next window holds
        assert sorted(spout.acked) == list(range(95)) and not spout.failed
        assert len(cluster.instance("sink").received) == 20
        assert cluster.counts("window").acked == 95


def test_a_tumbling_duration_window_on_processing_time_puts_each_tuple_in_one_window():
    class Slow(Numbers):
        def ready(self):
            return self.emitted < 40

    builder, window = windowed(spout=Slow)
    window.with_tumbling_window(Duration(seconds=0.1)).with_watermark_interval(Duration(seconds=0.02))
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("source")
        cluster.run_until(lambda: len(spout.acked) == 40)
        windows = cluster.instance("window").windows
        assert sorted(v for w in windows for v in w[0]) == list(range(40))
        assert all(end % 100 == 0 and start == end - 100 for _, _, _, start, end in windows)


def clicks_topology(clicks, *, lag: float = 0.0, late: str | None = "late", length=None, slide=None):
    builder = TopologyBuilder("clicks")
    builder.set_spout("clicks", Clicks, config={"test.clicks": clicks})
    window = builder.set_bolt("window", Recorder).with_timestamp_field("ts").with_watermark_interval(
        Duration(seconds=0.01))
    window.with_window(length or Duration(seconds=10), slide or Duration(seconds=5)).shuffle_grouping("clicks")
    if lag:
        window.with_lag(Duration(seconds=lag))
    if late:
        window.with_late_tuple_stream(late)
        builder.set_bolt("late", TestingSink).shuffle_grouping("window", stream=late)
    return builder.build()


def test_event_time_windows_follow_the_timestamps_and_late_tuples_go_to_the_late_stream():
    # (user, ts ms): the watermark trails the latest by the lag (2 s): "c" takes it to 10,000, so "d" is late
    clicks = [("a", 1_000), ("b", 4_000), ("c", 12_000), ("d", 3_000), ("e", 11_000), ("f", 10_500), ("g", FAR)]
    with LocalCluster(clicks_topology(clicks, lag=2.0)) as cluster:
        spout = cluster.instance("clicks")
        cluster.run_until(lambda: len(spout.acked) == 6, seconds=10)
        windows = [(values, start, end) for values, _, _, start, end in cluster.instance("window").windows]
        # windows of 10 s every 5 s, aligned: (-5, 5], (0, 10], (5, 15], (10, 20]; "d" came behind the watermark
        assert windows == [(["a", "b"], -5_000, 5_000), (["a", "b"], 0, 10_000),
                           (["f", "e", "c"], 5_000, 15_000), (["f", "e", "c"], 10_000, 20_000)]
        assert cluster.instance("late").received == [["d", 3_000]]
        assert sorted(spout.acked) == [0, 1, 2, 3, 4, 5] and not spout.failed  # "g" waits for its windows


def test_without_a_late_stream_late_tuples_are_acked_and_dropped():
    clicks = [("a", 10_000), ("b", 20_000), ("late", 1_000), ("c", FAR)]
    with LocalCluster(clicks_topology(clicks, late=None)) as cluster:
        spout = cluster.instance("clicks")
        cluster.run_until(lambda: 2 in spout.acked, seconds=10)
        assert all("late" not in values for values, *_ in cluster.instance("window").windows)


def test_a_window_whose_execute_raised_fails_its_tuples_and_their_replays_make_later_windows():
    builder, window = windowed(Raising, config={"test.n": 20})
    window.with_tumbling_window(Count(5))
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("source")
        cluster.run_until(lambda: len(set(spout.acked)) == 20)
        assert sorted(spout.failed) == [0, 1, 2, 3, 4]
        assert [e.error for e in cluster.errors("window")] == ["RuntimeError: the first window fails"]
        windows = cluster.instance("window").windows
        assert sorted(v for values, *_ in windows[1:] for v in values) == list(range(20))


class FailFirst(Bolt):
    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.anchors = []

    def execute(self, tup):
        self.anchors.append(len(tup.anchors))
        (self.collector.fail if len(self.anchors) == 1 else self.collector.ack)(tup)


def test_what_a_window_emits_is_anchored_to_its_tuples_so_a_failure_downstream_replays_them():
    builder, window = windowed(config={"test.n": 10})
    window.with_tumbling_window(Count(5))
    builder.set_bolt("sink", FailFirst).shuffle_grouping("window")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("source")
        cluster.run_until(lambda: len(set(spout.acked)) == 10)
        assert sorted(spout.failed) == [0, 1, 2, 3, 4]  # the first window's output failed: its tuples replay
        assert cluster.instance("sink").anchors[0] == 5


def test_max_anchors_anchors_an_emit_to_the_newest_tuples_of_the_window():
    builder, window = windowed(config={"test.n": 37})  # with 3 replays, 4 windows of 10
    window.with_tumbling_window(Count(10)).with_max_anchors(3)
    builder.set_bolt("sink", FailFirst).shuffle_grouping("window")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("source")
        cluster.run_until(lambda: len(set(spout.acked)) == 37)
        assert set(cluster.instance("sink").anchors) == {3}
        assert sorted(spout.failed) == [7, 8, 9]  # the failed output was anchored to the newest 3 of 0-9


def test_the_yaml_window_section_is_the_builders():
    doc = yaml.safe_load("""
        name: clicks
        messageTimeoutSeconds: 400
        spouts: [{name: clicks, className: "test_windows:Clicks"}]
        bolts:
          - name: window
            className: test_windows:Recorder
            window:
              length: {seconds: 300}
              slidingInterval: {seconds: 60}
              timestampField: ts
              lagSeconds: 5
              lateTupleStream: late
            inputs: [{component: clicks}]
    """)
    spec = TopologySpec.from_dict(doc)
    validate(spec)
    builder = TopologyBuilder("clicks")
    builder.set_spout("clicks", Clicks)
    builder.set_bolt("window", Recorder).with_window(Duration(minutes=5), Duration(minutes=1)).with_timestamp_field(
        "ts").with_lag(Duration(seconds=5)).with_late_tuple_stream("late").shuffle_grouping("clicks")
    assert builder.build(message_timeout_seconds=400).bolts[0].window == spec.bolts[0].window


def spec_with(window: dict, *, bolt: str = "test_windows:Recorder", timeout: int = 30, pending: int | None = 1000,
              spout: str = "test_windows:Clicks", **bolt_keys):
    return {"name": "w", "messageTimeoutSeconds": timeout, "maxSpoutPending": pending,
            "spouts": [{"name": "s", "className": spout}],
            "bolts": [{"name": "win", "className": bolt, "window": window, "inputs": [{"component": "s"}],
                       **bolt_keys}]}


@pytest.mark.parametrize("doc, message", [
    (spec_with({"length": {"count": 5}, "slidingInterval": {"count": 10}}),
     "slidingInterval (10 tuples) is longer than the window's length (5 tuples)"),
    (spec_with({"length": {"seconds": 60}, "slidingInterval": {"seconds": 10}}),
     "a tuple stays up to length + the clock's interval = 61 s in it, longer than messageTimeoutSeconds (30 s)"),
    (spec_with({"length": {"seconds": 20}, "timestampField": "ts", "lagSeconds": 10}),
     "length + lagSeconds + watermarkIntervalSeconds = 31 s in it, longer than messageTimeoutSeconds (30 s): its "
     "tree would time out before its windows are computed, and be replayed; raise messageTimeoutSeconds to at "
     "least 31"),
    (spec_with({"length": {"count": 5}, "slidingInterval": {"seconds": 40}}),
     "slidingInterval + the clock's interval = 41 s"),
    (spec_with({"length": {"count": 900}, "slidingInterval": {"count": 200}}),
     "900 + 200 = 1,100 tuples unacked, but the spouts keep at most maxSpoutPending x spout tasks = 1,000"),
    (spec_with({"length": {"count": 5}, "lagSeconds": 1}), "lagSeconds is for event time: set timestampField"),
    (spec_with({"length": {"count": 5}, "lateTupleStream": "late"}), "lateTupleStream is for event time"),
    (spec_with({"length": {"count": 5}}, tickFrequencySeconds=1), "a windowed bolt's ticks are its window's"),
    (spec_with({"length": {"count": 5, "seconds": 1}}), "give either count (tuples) or seconds"),
    (spec_with({"length": {"count": 5}, "maxAnchors": 600_000}), "maxAnchors (600,000) would take more than half"),
])
def test_the_spec_refuses_windows_that_cannot_work(doc, message):
    with pytest.raises(TopologyError, match="window") as err:
        TopologySpec.from_dict(doc)
    assert message in str(err.value)


@pytest.mark.parametrize("doc, message", [
    (spec_with({"length": {"count": 5}}, bolt="squall.testing:TestingSink"),
     "className 'squall.testing:TestingSink' is not a WindowedBolt subclass"),
    (spec_with({"length": {"count": 5}, "timestampField": "time"}),
     "timestampField 'time' is not a field of its input s/default (declared: user, ts)"),
    (spec_with({"length": {"count": 5}, "timestampField": "ts", "lateTupleStream": "default"}),
     "lateTupleStream 'default' is a stream the bolt declares itself"),
])
def test_validation_refuses_a_window_its_classes_cannot_run(doc, message):
    with pytest.raises(TopologyError) as err:
        validate(TopologySpec.from_dict(doc))
    assert message in str(err.value)


def test_a_windowed_bolt_without_a_window_is_refused():
    doc = spec_with({"length": {"count": 5}})
    del doc["bolts"][0]["window"]
    with pytest.raises(TopologyError, match="Recorder is a WindowedBolt; declare its window"):
        validate(TopologySpec.from_dict(doc))


def test_the_toppages_example_computes_each_users_top_pages_of_each_window():
    from examples.toppages import TOP_PAGES, clicks

    doc = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "toppages.yaml").read_text())
    doc["config"] |= {"toppages.clicks": 3000, "toppages.rate": None}
    for bolt in doc["bolts"]:
        if bolt["name"] in ("print", "late"):
            bolt["className"] = "squall.testing:TestingSink"
    doc["bolts"][0]["window"]["watermarkIntervalSeconds"] = 0.01
    with LocalCluster(TopologySpec.from_dict(doc)) as cluster:
        spout = cluster.instance("clicks")
        cluster.run_until(lambda: spout.exhausted and len(spout.acked) > 2000)
        cluster.run(seconds=0.3)
        rows, late = cluster.instance("print").received, cluster.instance("late").received
        sent = list(itertools.islice(clicks(seed=spout.context.task_id, users=8), 3000))
    assert len(rows) > 100 and late  # one in a hundred clicks is 30 s late: behind a 5 s lag
    on_time = Counter(map(tuple, sent)) - Counter(map(tuple, late))
    for user, count, top, start, end in rows:
        assert end % 60_000 == 0 and end - start == 300_000
        views = Counter()
        for (u, page, ts), n in on_time.items():
            if u == user and start < ts <= end:
                views[page] += n
        assert count == sum(views.values())
        assert top == sorted(views, key=lambda page: (-views[page], page))[:TOP_PAGES]
    assert not spout.failed


def test_the_example_that_opens_docs_windows_runs(capsys):
    text = (Path(__file__).resolve().parents[1] / "docs" / "windows.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/windows.md", "exec"), {"__name__": "docs_windows"})  # noqa: S102 - our own docs
    assert capsys.readouterr().out.startswith("[[4.5, 10], [9.5, 20], [19.5, 20], [29.5, 20]")


class Windows(WindowedBolt):
    """A window of the windows' outputs: each of its inputs is in the trees of a whole window."""

    outputs = ["trees"]

    def execute(self, window):
        self.collector.emit([sum(len(t.anchors) for t in window)])


class Trees(Bolt):
    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.trees = []

    def execute(self, tup):
        self.trees.append(len(tup.anchors))
        self.collector.ack(tup)


def test_max_anchors_counts_trees_so_a_window_of_windows_stays_within_it():
    builder, window = windowed(config={"test.n": 40})
    window.with_tumbling_window(Count(10))
    builder.set_bolt("windows", Windows).with_tumbling_window(Count(2)).with_max_anchors(15).shuffle_grouping(
        "window")
    builder.set_bolt("sink", Trees).shuffle_grouping("windows")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("source")
        cluster.run_until(lambda: len(spout.acked) == 40)
        # each input of "windows" is in 10 trees: two of them are 20, over 15, so an emit anchors to the newest
        assert cluster.instance("sink").trees == [10, 10]


class StatefulTotal(StatefulBolt):
    outputs = []

    def execute(self, tup):
        self.state.put("total", self.state.get("total", 0) + len(tup["values"]))


def test_a_windowed_bolt_forwards_checkpoints_to_the_stateful_bolts_after_it():
    builder, window = windowed(config={"test.n": 50})
    window.with_tumbling_window(Count(5))
    builder.set_bolt("total", StatefulTotal).shuffle_grouping("window")
    with LocalCluster(builder.build(config={"topology.state.checkpoint.interval.ms": 50})) as cluster:
        spout, total = cluster.instance("source"), cluster.instance("total")
        cluster.run_until(lambda: len(spout.acked) == 50 and total.state.get("total") == 50)
        assert not spout.failed


class From(TestingSpout):
    """``test.from`` .. ``test.to`` - 1."""

    outputs = ["n"]

    def items(self):
        return [[i] for i in range(self.conf["test.from"], self.conf["test.to"])]


def durable(tmp_path, start: int, end: int):
    builder = TopologyBuilder("durable")
    builder.set_spout("source", From, config={"test.from": start, "test.to": end})
    builder.set_bolt("window", Recorder).with_tumbling_window(Count(10)).with_persistence().shuffle_grouping(
        "source")
    return builder.build(config={"topology.state.dir": str(tmp_path), "topology.state.checkpoint.interval.ms": 50})


def test_durable_windows_ack_at_the_checkpoint_and_a_restarted_task_resumes_its_windows(tmp_path):
    with LocalCluster(durable(tmp_path, 0, 25)) as cluster:
        spout = cluster.instance("source")
        # the last 5 are in no window yet, and acked all the same: the commit after them holds them
        cluster.run_until(lambda: len(spout.acked) == 25)
        assert [w[0] for w in cluster.instance("window").windows] == [list(range(10)), list(range(10, 20))]
    with LocalCluster(durable(tmp_path, 25, 30)) as cluster:  # a new process: the windows come from the store
        window = cluster.instance("window")
        cluster.run_until(lambda: len(window.windows) == 1)
        assert window.windows[0][0] == list(range(20, 30))
        assert window.windows[0][1] == list(range(20, 30))  # all new: no window held them before


def test_durable_windows_may_be_longer_than_the_message_timeout():
    doc = spec_with({"length": {"seconds": 600}, "slidingInterval": {"seconds": 60}}, stateful=True)
    validate(TopologySpec.from_dict(doc))
    doc["bolts"][0]["stateful"] = False
    with pytest.raises(TopologyError, match="longer than messageTimeoutSeconds"):
        TopologySpec.from_dict(doc)


class FailsOneCheckpoint(StatefulBolt):
    """Its first prepare raises: that checkpoint fails, and every stateful task rolls back."""

    outputs = []

    def init_state(self, state):
        super().init_state(state)
        self.raised = False

    def pre_prepare(self, txid):
        if not self.raised:
            self.raised = True
            raise RuntimeError("this checkpoint fails")

    def execute(self, tup):
        pass


def test_a_rolled_back_durable_window_resumes_from_its_last_commit_and_its_tuples_replay(tmp_path):
    builder = TopologyBuilder("rollback")
    builder.set_spout("source", From, config={"test.from": 0, "test.to": 60})
    builder.set_bolt("window", Recorder).with_tumbling_window(Count(10)).with_persistence().shuffle_grouping(
        "source")
    builder.set_bolt("flaky", FailsOneCheckpoint).shuffle_grouping("window")
    spec = builder.build(config={"topology.state.checkpoint.interval.ms": 50})
    with LocalCluster(spec) as cluster:
        spout = cluster.instance("source")
        cluster.run_until(lambda: len(set(spout.acked)) == 60 and cluster.instance("flaky").raised)
        windows = [w[0] for w in cluster.instance("window").windows]
        assert spout.failed  # the rollback failed what the window held since its last commit...
        assert set().union(*windows) == set(range(60))  # ...and they came again: at least once
        assert all(len(w) == 10 for w in windows)
