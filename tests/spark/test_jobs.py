"""Several Spark jobs of a task in flight, and batches cut by a latency target.

Jobs end in any order; their batches are decided (rows emitted, inputs acked or failed) in the order
they were cut. Every wait is on an event; nothing asserts a duration.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from pyspark.sql import functions as F

from squall import Bolt, TopologyBuilder
from squall.spark import SparkBolt
from squall.testing import LocalCluster, TestingSpout

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

DEADLINE = 180.0  # an event wait: a pass ends on its condition


class Ids(TestingSpout):
    """``[0]``, ``[1]``, ... up to ``conf["count"]``, replayed when they fail; with a ``gate`` (an Event set
    by the test), only the first item until the gate opens."""

    outputs = ["id"]
    gate: threading.Event | None = None

    def items(self):
        return ([i] for i in range(self.conf["count"]))

    def ready(self):
        return self.gate is None or self.emitted == 0 or self.gate.is_set()


class LoggingCollector:
    """Stands in front of a bolt's collector and logs every emit, ack and fail in the order they are made."""

    def __init__(self, inner, log):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "log", log)

    def emit(self, values, **kwargs):
        self.log.append(("emit", tuple(values)))
        return self._inner.emit(values, **kwargs)

    def ack(self, tup):
        self.log.append(("ack", tup.values[0]))
        self._inner.ack(tup)

    def fail(self, tup):
        self.log.append(("fail", tup.values[0]))
        self._inner.fail(tup)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)


class Batches(SparkBolt):
    """Emits one row per batch, ``(first id, ids)``. The batch holding id 0 waits in ``process`` until the
    test sets ``release``, the first time; with ``conf["raise_first"]`` its job then fails in Spark. ``ended`` lists the
    first id of each batch whose job ended, in the order the jobs ended; ``sizes`` the batches' sizes in the
    order their jobs started; ``started`` is set when the first job has started."""

    outputs = ["first", "n"]

    def prepare(self, conf, context, collector):
        self.log: list[tuple] = []
        super().prepare(conf, context, LoggingCollector(collector, self.log))
        self.release, self.started = threading.Event(), threading.Event()
        self.ended: list[int] = []
        self.sizes: list[int] = []
        self.replayed = False  # the batch holding id 0 was given once already

    def process(self, df):
        ids = sorted(row.id for row in df.collect())
        self.sizes.append(len(ids))
        self.started.set()
        first = ids[0] == 0 and not self.replayed
        self.replayed = self.replayed or ids[0] == 0
        if first:
            self.release.wait(DEADLINE)
        out = df.agg(F.min("id").alias("first"), F.count("*").alias("n"))
        if first and self.conf.get("raise_first"):
            out = out.withColumn("n", F.coalesce(F.raise_error(F.lit("bad batch")).cast("long"), F.col("n")))
        return out

    def _finish(self, batch, rows, error, took):
        # The end of each job, on the executor thread, before its batch is decided.
        self.ended.append(batch.inputs[0].values[0])
        super()._finish(batch, rows, error, took)


class Collect(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.rows: list[tuple] = []

    def execute(self, tup):
        self.rows.append(tuple(tup.values))
        self.collector.ack(tup)


def topology(*, count: int, **config) -> LocalCluster:
    builder = TopologyBuilder("spark-jobs")
    builder.set_spout("spout", Ids, config={"count": count})
    builder.set_bolt("spark", Batches, config={"spark.batch.max.wait.ms": 20_000, **config}).global_grouping("spout")
    builder.set_bolt("sink", Collect).global_grouping("spark")
    return LocalCluster(builder.build(message_timeout_seconds=60, max_spout_pending=1000))


def test_with_two_jobs_in_flight_a_later_job_ends_first_and_batches_are_still_decided_in_order():
    with topology(count=10, **{"spark.batch.size": 5, "spark.jobs.in.flight": 2}) as cluster:
        spout, bolt, sink = cluster.instance("spout"), cluster.instance("spark"), cluster.instance("sink")
        try:  # the second batch's job ends while the first one's waits
            cluster.run_until(lambda: bolt.ended == [5], seconds=DEADLINE)
            assert not any(kind in ("emit", "ack") for kind, _ in bolt.log)  # it waits for the first batch
        finally:
            bolt.release.set()
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)

        assert bolt.ended == [5, 0]
        assert bolt.log == [("emit", (0, 5)), *(("ack", i) for i in range(5)),
                            ("emit", (5, 5)), *(("ack", i) for i in range(5, 10))]
        assert sink.rows == [(0, 5), (5, 5)]
        assert sorted(spout.acked) == list(range(10)) and not spout.failed


def test_with_two_jobs_in_flight_a_failed_job_fails_exactly_its_own_batch():
    with topology(count=10, raise_first=True, **{"spark.batch.size": 5, "spark.jobs.in.flight": 2}) as cluster:
        spout, bolt, sink = cluster.instance("spout"), cluster.instance("spark"), cluster.instance("sink")
        try:
            cluster.run_until(lambda: bolt.ended == [5], seconds=DEADLINE)
        finally:
            bolt.release.set()
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)

        verdicts = [entry for entry in bolt.log if entry[0] != "emit"]
        # the first batch failed, then the second acked, in the order they were cut; then the replay acked
        assert verdicts[:10] == [*(("fail", i) for i in range(5)), *(("ack", i) for i in range(5, 10))]
        assert Counter(entry for entry in verdicts if entry[0] == "fail") == Counter(("fail", i) for i in range(5))
        assert sorted(spout.failed) == list(range(5))
        assert sorted(spout.acked) == list(range(10))
        assert (5, 5) in sink.rows and "bad batch" in cluster.errors("spark")[0].error


def test_with_a_latency_target_batches_are_cut_small_when_idle_and_grow_with_the_input_that_waited():
    # A max wait and a size that would hold the first id for 20 s and every id in one batch. With a target
    # the first id goes alone, at once; the 199 that come while its job runs go together in the next one.
    with topology(count=200, **{"spark.batch.size": 1000, "spark.batch.target.ms": 1,
                                "spark.jobs.in.flight": 1}) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        spout.gate = bolt.started
        try:
            cluster.run_until(lambda: cluster.counts("spark").executed == 200, seconds=DEADLINE)
        finally:
            bolt.release.set()
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert bolt.sizes == [1, 199]
        assert sorted(spout.acked) == list(range(200)) and not spout.failed


def test_with_several_jobs_in_flight_input_pauses_only_once_every_job_thread_is_busy_and_the_next_batch_full():
    count, batch = 200, 20
    with topology(count=count, **{"spark.batch.size": batch, "spark.jobs.in.flight": 3}) as cluster:
        spout, bolt = cluster.instance("spout"), cluster.instance("spark")
        try:  # the first batch's job waits; the next two end, and wait to be decided behind it
            cluster.run_until(lambda: bolt.collector.paused and len(bolt.ended) == 2, seconds=DEADLINE)
            assert cluster.counts("spark").executed >= 4 * batch  # three batches in flight and a full next one
            assert not spout.acked
        finally:
            bolt.release.set()
        cluster.run_until(lambda: spout.done() and cluster.pending() == 0, seconds=DEADLINE)
        assert not bolt.collector.paused
        assert sorted(spout.acked) == list(range(count)) and not spout.failed
