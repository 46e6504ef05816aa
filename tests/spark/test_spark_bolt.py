"""SparkBolt on a real local Spark: results, acks, fails and replays, timeouts and backpressure.

Every run stops on an event (never a bare sleep); the deadlines are generous because a Spark job
takes a second or more on a small machine.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from examples.clickstream import SESSION_GAP, TOP_PAGES, ClickSpout, SessionStats, clicks
from pyspark.sql import functions as F

from engine_kit import Numbers
from squall import Bolt, Spout, TopologyBuilder, load_spec, validate
from squall.executor.bolt import BUDGET
from squall.spark import SparkBolt
from squall.testing import LocalCluster, TestingSpout

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

REPO = Path(__file__).resolve().parents[2]

DEADLINE = 180.0  # an event wait: a pass ends on its condition; a loaded full suite took a cold JVM past 60 s


class ReplaySpout(TestingSpout):
    """Emits ``[i]`` with msg id ``i`` for ``i < conf["count"]``; replays whatever fails; records verdicts."""

    outputs = ["id"]

    def items(self):
        return ([i] for i in range(self.conf["count"]))


class RecordingCollector:
    """Stands in front of a bolt's collector: counts, per input's values, every ack, fail and
    reset_timeout, and passes everything through (the compiled collector's methods cannot be replaced)."""

    def __init__(self, inner):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "counts", {"ack": Counter(), "fail": Counter(), "reset_timeout": Counter()})
        object.__setattr__(self, "first_reset", {})  # per input's values: when it was first reset
        object.__setattr__(self, "reset_seen", threading.Event())

    def __getattr__(self, name):
        counts = self.counts.get(name)
        if counts is None:
            return getattr(self._inner, name)
        original = getattr(self._inner, name)

        def recorded(tup):
            values = tuple(tup.values)
            counts[values] += 1
            if name == "reset_timeout":
                self.first_reset.setdefault(values, time.monotonic())
                self.reset_seen.set()
            original(tup)
        return recorded

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)  # e.g. SparkBolt's ``collector.paused``


class Recording:
    """Mixed into a SparkBolt: records, per input's values, every ack, fail and reset_timeout."""

    def prepare(self, conf, context, collector):
        recorder = RecordingCollector(collector)
        super().prepare(conf, context, recorder)
        self.acks, self.fails, self.resets = (recorder.counts[name] for name in ("ack", "fail", "reset_timeout"))
        self.first_reset, self.reset_seen = recorder.first_reset, recorder.reset_seen
        self.arrived: dict[tuple, float] = {}  # per input's values: when it first came
        self.calls = 0

    def execute(self, tup):
        self.arrived.setdefault(tuple(tup.values), time.monotonic())
        super().execute(tup)


class ParityCounts(Recording, SparkBolt):
    """Counts the ids of a batch by parity; with ``conf["raise_first"]`` its first job fails in Spark,
    with ``conf["sleep_first"]`` its first job takes that many seconds, and with ``conf["block_first"]``
    its first job waits for ``self.release``, with ``conf["reset_first"]`` it waits until an input was reset,
    and with ``conf["exit_first"]`` it raises SystemExit;
    ``self.sizes`` has the rows of each batch it was given."""

    outputs = ["parity", "n"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.release = threading.Event()
        self.sizes: list[int] = []

    def process(self, df):
        self.calls += 1
        first = self.calls == 1
        if first and self.conf.get("block_first"):
            # Before any Spark job: a first job (df.count() below) that a loaded JVM ran past the job
            # timeout was cancelled at the deadline, so process() raised and the job thread was free,
            # and a test that needs it stuck ran the next batches instead of failing them
            self.release.wait(DEADLINE)
        self.sizes.append(df.count())
        if first and self.conf.get("reset_first"):
            self.reset_seen.wait(DEADLINE)  # a job as long as that, as far as the bolt can tell
        if first and self.conf.get("sleep_first"):
            time.sleep(self.conf["sleep_first"])  # a long job, as far as the bolt can tell
        if first and self.conf.get("exit_first"):
            raise SystemExit(3)  # not an Exception: it ended the job thread, silently
        out = df.groupBy((F.col("id") % 2).alias("parity")).agg(F.count("*").alias("n"))
        if first and self.conf.get("raise_first"):
            # fails while the job runs on the executors, as a bad record would
            out = out.withColumn("n", F.coalesce(F.raise_error(F.lit("bad batch")).cast("long"), F.col("n")))
        return out


class Collect(Bolt):
    """A sink that keeps its inputs' values; fails the first tuple whose values are in ``conf["fail_once"]``."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.rows: list[tuple] = []
        self.to_fail = [list(v) for v in conf.get("fail_once", [])]

    def execute(self, tup):
        if tup.values in self.to_fail:
            self.to_fail.remove(tup.values)
            self.collector.fail(tup)
            return
        self.rows.append(tuple(tuple(v) if isinstance(v, list) else v for v in tup.values))
        self.collector.ack(tup)


def parity_topology(*, count: int, batch: int, wait_ms: float = 20_000, timeout: int = 30,
                    collect: dict | None = None, **bolt_config) -> LocalCluster:
    builder = TopologyBuilder("spark-parity")
    builder.set_spout("spout", ReplaySpout, config={"count": count})
    builder.set_bolt("spark", ParityCounts, config={"spark.batch.size": batch, "spark.batch.max.wait.ms": wait_ms,
                                                     **bolt_config}).shuffle_grouping("spout")
    builder.set_bolt("sink", Collect, config=collect or {}).global_grouping("spark")
    return LocalCluster(builder.build(message_timeout_seconds=timeout, max_spout_pending=1000))


def expected_stats(events: list[tuple[str, str, int]]) -> Counter:
    """The clickstream result rows of one batch, computed in plain Python."""
    by_user: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for user, page, ts in events:
        by_user[user].append((ts, page))
    rows: Counter = Counter()
    for user, seen in by_user.items():
        seen.sort()
        sessions = 1 + sum(1 for (a, _), (b, _) in zip(seen, seen[1:], strict=False) if b - a > SESSION_GAP)
        views = Counter(page for _, page in seen)
        top = tuple(page for page, _ in sorted(views.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PAGES])
        rows[(user, len(seen), sessions, top)] += 1
    return rows


class RecordingSessionStats(Recording, SessionStats):
    pass


def test_the_clickstream_yaml_loads_and_validates():
    spec = load_spec(REPO / "examples" / "clickstream.yaml")
    validate(spec)
    assert [b.name for b in spec.bolts] == ["sessions", "print"]


def test_clickstream_results_are_correct_and_every_input_is_acked_exactly_once():
    n, batch = 300, 100
    builder = TopologyBuilder("clickstream")
    builder.set_spout("clicks", ClickSpout, config={"clickstream.clicks": n, "clickstream.users": 5})
    builder.set_bolt("sessions", RecordingSessionStats,
                     config={"spark.batch.size": batch, "spark.batch.max.wait.ms": 20_000}
                     ).fields_grouping("clicks", ["user"])
    builder.set_bolt("print", Collect).global_grouping("sessions")
    with LocalCluster(builder.build(message_timeout_seconds=30)) as cluster:
        spout, bolt, sink = cluster.instance("clicks"), cluster.instance("sessions"), cluster.instance("print")
        cluster.run_until(lambda: cluster.counts("clicks").acked == n and cluster.pending() == 0, seconds=DEADLINE)

        # One task and no failure: the batches are the spout's clicks in emit order, 100 at a time.
        source = clicks(seed=spout.context.task_id, users=5)
        events = [next(source) for _ in range(n)]
        expected = sum((expected_stats(events[i:i + batch]) for i in range(0, n, batch)), Counter())
        assert Counter(sink.rows) == expected
        assert sum(clicks for _, clicks, _, _ in sink.rows) == n

        assert bolt.acks == Counter({tuple(e): 1 for e in events})  # every input acked exactly once
        assert not bolt.fails
        counts = cluster.counts("clicks")
        assert (counts.acked, counts.failed, counts.timed_out) == (n, 0, 0)
        assert spout.pending == {} and not spout.replays


def test_a_raising_job_fails_every_input_which_are_replayed_and_then_acked():
    with parity_topology(count=10, batch=10, raise_first=True) as cluster:
        spout, bolt, sink = cluster.instance("spout"), cluster.instance("spark"), cluster.instance("sink")
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)

        assert sorted(spout.failed) == list(range(10))  # the whole batch, once
        assert sorted(spout.acked) == list(range(10))  # the replay, once
        assert bolt.fails == Counter({(i,): 1 for i in range(10)})
        assert bolt.acks == Counter({(i,): 1 for i in range(10)})
        assert bolt.calls == 2
        assert sorted(sink.rows) == [(0, 5), (1, 5)]  # only the replay's job emitted
        (error,) = cluster.errors("spark")
        assert "bad batch" in error.error


def test_a_downstream_fail_replays_every_spout_tuple_of_the_batch():
    # Each result row is anchored to every input: failing the "even" row fails the odd ids' trees too.
    with parity_topology(count=10, batch=10, collect={"fail_once": [[0, 5]]}) as cluster:
        spout, bolt, sink = cluster.instance("spout"), cluster.instance("spark"), cluster.instance("sink")
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)

        assert sorted(spout.failed) == list(range(10))
        assert sorted(spout.acked) == list(range(10))
        assert bolt.acks == Counter({(i,): 2 for i in range(10)})  # the bolt acked both batches
        assert not bolt.fails
        assert sorted(sink.rows) == [(0, 5), (1, 5), (1, 5)]  # the first odd row, then the replay's rows


class KeyedSpout(ReplaySpout):
    """``[i % 2, i]`` with msg id ``i``."""

    outputs = ["key", "id"]

    def items(self):
        return ([i % 2, i] for i in range(self.conf["count"]))


class KeyCounts(SparkBolt):
    """Counts a batch's ids per key, each row anchored to the inputs of its key; and a row of key 7, which no
    input has."""

    schema = "key BIGINT, id BIGINT"
    outputs = ["key", "n"]
    anchor_by = "key"

    def process(self, df):
        counts = df.groupBy("key").agg(F.count("*").alias("n"))
        return counts.unionByName(counts.sparkSession.createDataFrame([(7, 0)], "key BIGINT, n BIGINT"))


@pytest.mark.parametrize(("failed_row", "replayed"), [((0, 5), [0, 2, 4, 6, 8]), ((7, 0), list(range(10)))])
def test_with_anchor_by_a_downstream_fail_replays_the_inputs_of_that_rows_key_only(failed_row, replayed):
    # Failing the even row fails the even ids' trees alone; the row of a key no input has is anchored to all.
    builder = TopologyBuilder("spark-keyed")
    builder.set_spout("spout", KeyedSpout, config={"count": 10})
    builder.set_bolt("spark", KeyCounts, config={"spark.batch.size": 10, "spark.batch.max.wait.ms": 500}
                     ).shuffle_grouping("spout")
    builder.set_bolt("sink", Collect, config={"fail_once": [list(failed_row)]}).global_grouping("spark")
    with LocalCluster(builder.build(message_timeout_seconds=30)) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)

        assert sorted(spout.failed) == replayed
        assert sorted(spout.acked) == list(range(10))
        assert failed_row in sink.rows  # from the replay's batch


def test_a_job_longer_than_the_message_timeout_keeps_its_trees_alive():
    # Trees time out 2 to 4 s after their last reset; the first job takes 5 s, and the second batch
    # waits behind it. Without resets every one of them would time out. (The job timeout, 10 message
    # timeouts by default, is raised: a fresh CI run's loaded JVM once took over 20 s for a job.)
    # One job thread, so the second batch waits behind the first (with two, the first process() call, the one
    # that sleeps, may be the second batch's, and the first batch is acked with one reset).
    with parity_topology(count=10, batch=5, wait_ms=500, timeout=2, sleep_first=5,
                         **{"spark.job.timeout.ms": 120_000, "spark.jobs.in.flight": 1}) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)

        counts = cluster.counts("spout")
        assert (counts.acked, counts.failed, counts.timed_out) == (10, 0, 0)
        assert bolt.acks == Counter({(i,): 1 for i in range(10)})
        assert all(bolt.resets[(i,)] >= 2 for i in range(10))  # the running batch and the waiting one


def test_a_batch_decided_within_half_a_timeout_of_its_first_tuple_resets_no_timeout():
    """Resets cost a message to the ackers per input: a batch decided in time, the usual case, sends none."""
    with parity_topology(count=10, batch=10) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert sorted(spout.acked) == list(range(10))
        assert not bolt.resets


def test_a_batch_is_reset_half_a_timeout_after_its_first_tuple_came_not_after_its_job_started():
    """Its first tuple may have waited almost the max wait before the job started: a first reset counted
    from the job's start came almost a whole timeout after that tuple came (found by the Spark audit)."""
    # Timeout 4 s: resets due 2 s after the first tuple came; the batch never fills and is cut at its max
    # wait, 1.9 s; its job runs until the reset. Counted from the job's start, the reset would come 3.9 s
    # after the tuples came.
    with parity_topology(count=10, batch=100, wait_ms=1900, timeout=4, reset_first=True,
                         **{"spark.job.timeout.ms": 120_000}) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert sorted(spout.acked) == list(range(10))
        late = {v: bolt.first_reset[v] - bolt.arrived[v] for v in bolt.arrived if v in bolt.first_reset}
        assert len(late) == 10, bolt.resets
        assert max(late.values()) < 3.0, late


def test_a_job_that_runs_past_its_timeout_fails_its_batch_and_the_bolt_goes_on():
    """A job that never ends (executors that never come) held its inputs and, once the next batch was
    full, the whole bolt, with no error, for good (found by the Spark audit)."""
    # The timeout is far above what a job of 5 tuples takes, even on a loaded machine: with 1.5 s, a CI run
    # under load timed the jobs after the stuck one out too.
    # One job thread: with two, the first process() call, the one that blocks, may be the second batch's.
    with parity_topology(count=10, batch=5, wait_ms=200, block_first=True,
                         **{"spark.job.timeout.ms": 5000, "spark.jobs.in.flight": 1}) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        try:
            cluster.run_until(lambda: len(spout.failed) >= 5, seconds=DEADLINE)
        finally:
            bolt.release.set()  # the stuck job ends at last: what it returns is not the batch's any more
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert sorted(spout.acked) == list(range(10))
        assert bolt.acks == Counter({(i,): 1 for i in range(10)})  # the late end acked nothing
        assert all(bolt.fails[(i,)] >= 1 for i in range(5)), bolt.fails  # the stuck job's batch failed
        error = cluster.errors("spark")[0].error
        assert "a Spark job of 5 tuples ran 5 s (spark.job.timeout.ms) without ending" in error


def test_batches_failed_at_their_deadline_behind_a_stuck_job_are_not_run_once_it_returns():
    """Each batch that failed at its deadline while the job thread was stuck waited in a queue behind it,
    held in memory, and every one was run once the thread returned: Spark jobs (and the side effects of a
    process() that writes) for tuples failed and replayed already (found by the Spark audit)."""
    # a job timeout a loaded JVM's jobs keep well under (5 s was passed once, on a fresh CI run)
    # one job thread: the one stuck (with two, the second would run the next batch)
    with parity_topology(count=10, batch=5, wait_ms=200, block_first=True,
                         **{"spark.job.timeout.ms": 15_000, "spark.jobs.in.flight": 1}) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        try:  # the stuck job's batch fails at its deadline, and then the next one, handed over behind it
            cluster.run_until(lambda: len(spout.failed) >= 10, seconds=DEADLINE)
        finally:
            bolt.release.set()
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert sorted(spout.acked) == list(range(10))
        # every job after the stuck one was given a live batch: its inputs were all acked
        assert sum(bolt.sizes[1:]) == sum(bolt.acks.values()) == 10, (bolt.sizes, bolt.acks)


def test_a_job_that_raises_system_exit_fails_its_batch_and_the_bolt_goes_on():
    with parity_topology(count=10, batch=10, exit_first=True) as cluster:
        spout = cluster.instance("spout")
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert sorted(spout.failed) == list(range(10)) and sorted(spout.acked) == list(range(10))
        assert "SystemExit: 3" in cluster.errors("spark")[0].error


def test_a_full_next_batch_pauses_input_until_the_running_job_is_over():
    count, batch = 200, 50
    # one job in flight (tests/spark/test_jobs.py pauses with more)
    with parity_topology(count=count, batch=batch, block_first=True, **{"spark.jobs.in.flight": 1}) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        try:
            # The spout emits everything (maxSpoutPending is 1000); the bolt stops taking it in.
            cluster.run_until(lambda: spout.emitted == count and bolt.collector.paused, seconds=DEADLINE)
            executed = cluster.counts("spark").executed
            assert executed <= 2 * batch + BUDGET  # the running batch, the next one, one scheduler round
            assert executed < count
        finally:
            bolt.release.set()
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert not bolt.collector.paused
        assert bolt.acks == Counter({(i,): 1 for i in range(count)})
        assert not spout.failed


def test_inputs_with_other_fields_than_the_first_are_failed_and_reported():
    class Other(Spout):
        outputs = ["name"]

        def open(self, conf, context, collector):
            super().open(conf, context, collector)
            self.sent = False
            self.failed: list = []

        def next_tuple(self):
            if not self.sent:
                self.sent = True
                self.collector.emit(["x"], msg_id="x")

        def fail(self, msg_id):
            self.failed.append(msg_id)

    builder = TopologyBuilder("spark-mixed")
    builder.set_spout("ids", ReplaySpout, config={"count": 4})
    builder.set_spout("names", Other)
    spark = builder.set_bolt("spark", ParityCounts, config={"spark.batch.size": 4})
    spark.shuffle_grouping("ids").shuffle_grouping("names")
    with LocalCluster(builder.build()) as cluster:
        ids, names = cluster.instance("ids"), cluster.instance("names")
        # "ids" first, so the bolt takes its fields from them; then "names"
        for ex in cluster.runtime.spouts:
            ex.set_active(ex.component == "ids")
        cluster.run_until(lambda: cluster.counts("spark").executed == 4, seconds=DEADLINE)
        cluster.activate()
        cluster.run_until(lambda: names.failed == ["x"] and ids.done(), seconds=DEADLINE)
        assert any("must declare the same fields" in e.error for e in cluster.errors("spark"))


class WrongColumns(SparkBolt):
    outputs = ["parity", "n"]

    def process(self, df):
        return df.withColumn("parity", F.col("id") % 2)  # columns: id, parity


class Shapes(SparkBolt):
    outputs = ["point", "ids", "raw", "tags"]

    def process(self, df):
        return df.agg(F.struct(F.min("id").alias("lo"), F.max("id").alias("hi")).alias("point"),
                      F.sort_array(F.collect_list("id")).alias("ids"),
                      F.lit(b"\x00\x01").alias("raw"),
                      F.create_map(F.lit("n"), F.count("*")).alias("tags"))


def one_bolt_topology(bolt: type, *, count: int) -> LocalCluster:
    builder = TopologyBuilder("spark-results")
    builder.set_spout("spout", Numbers, config={"count": count})
    builder.set_bolt("spark", bolt, config={"spark.batch.size": count}).shuffle_grouping("spout")
    builder.set_bolt("sink", Collect).global_grouping("spark")
    return LocalCluster(builder.build())


def test_a_result_that_does_not_fit_the_outputs_fails_the_batch_and_emits_nothing():
    with one_bolt_topology(WrongColumns, count=4) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        cluster.run_until(spout.done, seconds=DEADLINE)
        assert sorted(spout.failed) == [0, 1, 2, 3] and spout.acked == []
        assert sink.rows == []
        (error,) = cluster.errors("spark")
        assert "columns (id, parity), but the bolt declares outputs (parity, n)" in error.error


class Long(SparkBolt):
    outputs = ["id", "text"]

    def process(self, df):
        return df.select("id", F.when(F.col("id") == 3, F.lit("y" * 200)).otherwise(F.lit("x")).alias("text"))


def test_a_result_value_over_max_value_bytes_fails_the_batch_before_any_row_is_emitted():
    """The job thread checked the rows without the size limit, which the emit then applied row by row:
    the rows before the big one were emitted by a batch that failed, at every replay (found by the Spark
    audit)."""
    builder = TopologyBuilder("spark-long")
    builder.set_spout("spout", Numbers, config={"count": 4})
    builder.set_bolt("spark", Long, config={"spark.batch.size": 4}).shuffle_grouping("spout")
    builder.set_bolt("sink", Collect).global_grouping("spark")
    with LocalCluster(builder.build(transfer={"maxValueBytes": 100})) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        cluster.run_until(spout.done, seconds=DEADLINE)
        assert sorted(spout.failed) == [0, 1, 2, 3] and sink.rows == []
        assert "over transfer.maxValueBytes (100)" in cluster.errors("spark")[0].error


class Wide(SparkBolt):
    outputs = ["id", "text"]

    def process(self, df):
        return df.where(F.col("id") < 2).select(
            "id", F.when(F.col("id") == 1, F.lit("y" * 60_000)).otherwise(F.lit("x")).alias("text"))


def test_a_result_row_that_does_not_fit_a_frame_with_the_batchs_anchors_fails_the_batch_before_any_emit():
    """Each row goes anchored to every input's tree, 16 bytes each in its frame past 64: a row of 60,000
    bytes passes maxValueBytes, and fits a frame of 64 KiB alone, but not with 200 trees' ids. Before, the batch
    was acked in one process, and across processes the row was dropped as over a frame, after the first
    row had gone, and its trees failed, at every replay."""
    builder = TopologyBuilder("spark-wide")
    builder.set_spout("spout", Numbers, config={"count": 200})
    builder.set_bolt("spark", Wide, config={"spark.batch.size": 200}).shuffle_grouping("spout")
    builder.set_bolt("sink", Collect).global_grouping("spark")
    with LocalCluster(builder.build(transfer={"maxFrameBytes": 65_536, "maxValueBytes": 61_000})) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        cluster.run_until(spout.done, seconds=DEADLINE)
        assert sorted(spout.failed) == list(range(200)) and sink.rows == []
        assert "anchored to 200 trees" in cluster.errors("spark")[0].error


def test_result_values_become_tuple_values():
    with one_bolt_topology(Shapes, count=3) as cluster:
        spout, sink = cluster.instance("spout"), cluster.instance("sink")
        cluster.run_until(lambda: spout.done() and len(sink.rows) == 1, seconds=DEADLINE)
        assert sorted(spout.acked) == [0, 1, 2]
        assert sink.rows == [({"lo": 0, "hi": 2}, (0, 1, 2), b"\x00\x01", {"n": 3})]
