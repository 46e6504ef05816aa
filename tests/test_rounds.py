"""How a scheduler round shares the thread between executors: a bolt drains what an upstream burst
queued, in chunks, for as long as the round is short; a slow round stops after a chunk; a bolt whose
collector pauses takes no further tuple, not even later in the same round."""

from __future__ import annotations

from engine_kit import Numbers
from squall import BasicBolt, Bolt, TopologyBuilder
from squall.executor.bolt import BUDGET, SLICE, SLOW_FOR
from squall.executor.spout import BURST, BURST_SECONDS
from squall.testing import LocalCluster

FAN_OUT = 8


class Fan(BasicBolt):
    """Each input becomes FAN_OUT tuples, as a sentence becomes its words."""

    outputs = ["n"]

    def execute(self, tup, collector):
        for i in range(FAN_OUT):
            collector.emit([i])


class Sink(Bolt):
    """Acks its inputs; with ``conf["pause_after"]`` it pauses its collector after that many."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.pause_after = conf.get("pause_after")
        self.executed = 0

    def execute(self, tup):
        self.executed += 1
        self.collector.ack(tup)
        if self.executed == self.pause_after:
            self.collector.paused = True


def fan_topology(**conf):
    """A spout's one burst of BURST trees, each made FAN_OUT tuples for the sink."""
    builder = TopologyBuilder("rounds")
    builder.set_spout("spout", Numbers)
    builder.set_bolt("fan", Fan).shuffle_grouping("spout")
    builder.set_bolt("sink", Sink).shuffle_grouping("fan")
    return builder.build(config={"count": BURST, **conf})


class Clock:
    """A test clock: each reading is ``step`` seconds after the one before."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def fanned(cluster: LocalCluster) -> int:
    """Step until the fan has executed the spout's burst (the executors' order in a round is not this
    test's business); how many tuples the sink had executed by then."""
    for _ in range(5):
        if cluster.counts("fan").executed == BURST:
            return cluster.instance("sink").executed
        cluster.runtime.step()
    raise AssertionError(f"the fan executed {cluster.counts('fan').executed} tuples in 5 rounds, not {BURST}")


def test_a_bolt_drains_in_one_round_what_an_upstream_burst_queued():
    """The spout's burst of BURST trees makes BURST × 8 tuples for the sink, more than one chunk: at one
    chunk a round they waited rounds, and under load max spout pending's whole queue stood there."""
    assert BURST * FAN_OUT > 2 * BUDGET
    with LocalCluster(fan_topology(), clock=Clock(0.0)) as cluster:  # rounds that take no time
        fanned(cluster)
        cluster.runtime.step()
        assert cluster.instance("sink").executed == BURST * FAN_OUT


def sink_executor(cluster: LocalCluster):
    return next(ex for ex in cluster.runtime.executors if ex.component == "sink")


def test_a_round_that_lasted_its_slice_takes_no_further_chunk():
    clock = Clock(0.0)
    with LocalCluster(fan_topology(), clock=clock) as cluster:
        sink = cluster.instance("sink")
        sink.collector.paused = True  # the burst's tuples wait in its inbox
        fanned(cluster)
        sink.collector.paused = False
        sink_executor(cluster).countdown = BUDGET + 1  # no tuple of the round timed (see the test below)
        clock.step = 2 * SLICE  # each reading past a slice from the one before, from now on
        cluster.runtime.step()
        assert sink.executed == BUDGET  # the rest waits for later rounds


def test_a_timed_execute_that_took_a_slice_cuts_its_round_and_the_next_ones_after_each_tuple():
    """A slow bolt (a second a tuple) held the loop for a chunk of 64 tuples: a minute without a
    heartbeat, and /healthz failed. Its first execute is timed, and it is known slow from then on."""
    clock = Clock(0.0)
    with LocalCluster(fan_topology(), clock=clock) as cluster:
        sink = cluster.instance("sink")
        sink.collector.paused = True
        fanned(cluster)
        sink.collector.paused = False
        clock.step = 2 * SLICE  # every execute looks longer than a slice
        cluster.runtime.step()
        assert sink.executed == 1 and sink_executor(cluster).slow_until > clock.now
        cluster.runtime.step()
        assert sink.executed == 2
        # a quarter slice a reading from now on: timed executes (one in 20) are fast, and do not end it:
        # its rounds still read the clock after every tuple, and end after a few
        clock.step = SLICE / 4
        for _ in range(25):
            before = sink.executed
            cluster.runtime.step()
            assert sink.executed - before <= 4
        clock.now += SLOW_FOR  # slow for SLOW_FOR since the last slow one timed: chunks again
        before = sink.executed
        cluster.runtime.step()
        assert sink.executed - before == BUDGET


def test_a_spout_whose_next_tuple_took_its_turn_is_called_no_more_that_round():
    """A slow (or blocking) source must not hold verdicts, bolts and timeouts back for a burst of its
    calls: one that blocked for 5 s a call held its worker for BURST × 5 s."""
    with LocalCluster(fan_topology(), clock=Clock(BURST_SECONDS * 1.5)) as cluster:  # each reading past a turn
        cluster.runtime.step()
        assert cluster.counts("spout").emitted == 1
        cluster.runtime.step()
        assert cluster.counts("spout").emitted == 2
    with LocalCluster(fan_topology(), clock=Clock(0.0)) as cluster:  # a fast one: its whole burst
        cluster.runtime.step()
        assert cluster.counts("spout").emitted == BURST


def test_a_bolt_that_pauses_takes_no_further_tuple_in_the_same_round():
    with LocalCluster(fan_topology(pause_after=5), clock=Clock(0.0)) as cluster:
        fanned(cluster)
        cluster.runtime.step()
        sink = cluster.instance("sink")
        assert sink.executed == 5
        cluster.runtime.step()
        assert sink.executed == 5
        sink.collector.paused = False
        cluster.runtime.step()
        assert sink.executed == BURST * FAN_OUT
