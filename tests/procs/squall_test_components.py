"""Spouts and bolts that the multi-process tests run in worker processes (imported by name).

The spout's durable record is a JSON file written at close(): the ids it saw acked and failed.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import threading
import time

from squall import BasicBolt, Bolt, StatefulBolt
from squall.testing import TestingSpout


class NumberSpout(TestingSpout):
    """Emits ids 0..N-1 (``test.count``; < 0: forever) with message ids, at most ``test.rate`` new ids
    per second, and only while the file ``test.gate`` exists (if set); replays failed ids; writes what
    it saw at close()."""

    outputs = ["n"]

    def items(self):
        logging.getLogger(__name__).debug("the number spout opened")  # seen at --log-level DEBUG only
        total = int(self.conf.get("test.count", 1000))
        self.rate = self.conf.get("test.rate")  # so a run lasts long enough to interfere with
        self.start = time.monotonic()
        return ([n] for n in (itertools.count() if total < 0 else range(total)))

    def ready(self):
        gate = self.conf.get("test.gate")
        if gate and not os.path.exists(gate):
            return False
        return not self.rate or self.emitted < self.rate * (time.monotonic() - self.start)

    def close(self):
        report_path = self.conf.get("test.report")
        if report_path:
            tmp = f"{report_path}.tmp"
            with open(tmp, "w") as out:
                json.dump({"acked": sorted(self.acked), "failed": len(self.failed), "emitted": self.emitted,
                           "switch_interval": sys.getswitchinterval(),
                           "numpy": "numpy" in sys.modules}, out)
            os.replace(tmp, report_path)


class ReportingSink(Bolt):
    """Acks everything; reports an error for the tuple whose n is 5."""

    outputs = []

    def execute(self, tup):
        if tup["n"] == 5:
            self.collector.report_error(ValueError("five is not allowed here"))
        self.collector.ack(tup)


class TickingSink(Bolt):
    """Acks its input; receives tick tuples (the topology sets tickFrequencySeconds)."""

    outputs = []

    def execute(self, tup):
        if not tup.is_tick:
            self.collector.ack(tup)


class BatchingSink(Bolt):
    """Holds its input and acks it all on each tick, as a bolt batching work for a job does."""

    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []

    def execute(self, tup):
        if not tup.is_tick:
            self.held.append(tup)
            return
        for held in self.held:
            self.collector.ack(held)
        self.held = []


class HalfBatchingSink(BatchingSink):
    """Acks tuples of even ``n`` at once, and holds the others until a tick, as :class:`BatchingSink`."""

    def execute(self, tup):
        if not tup.is_tick and tup["n"] % 2 == 0:
            self.collector.ack(tup)
        else:
            super().execute(tup)


class Double(BasicBolt):
    outputs = ["n", "double"]

    def execute(self, tup, collector):
        collector.emit([tup["n"], tup["n"] * 2])


class Sink(Bolt):
    outputs = []

    def execute(self, tup):
        self.collector.ack(tup)


class FailingSink(Bolt):
    outputs = []

    def execute(self, tup):
        self.collector.fail(tup)


class SlowInit(Sink):
    """A Sink whose construction takes 3 s when the file ``$SQUALL_TEST_SLOW_INIT`` exists (removed then),
    saying so on stderr: a plan slow to build, as after a rebalance's switch."""

    def __init__(self):
        super().__init__()
        gate = os.environ.get("SQUALL_TEST_SLOW_INIT")
        if gate and os.path.exists(gate):
            os.remove(gate)
            print("slow init begins", file=sys.stderr, flush=True)
            time.sleep(3)


class GatedPrepare(Sink):
    """A Sink whose ``prepare()`` waits until the file ``test.prepare_gate`` exists, saying so on stderr
    (a model loaded at start); without that key it prepares at once."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        gate = conf.get("test.prepare_gate")
        if gate and not os.path.exists(gate):
            print("prepare waits for its gate", file=sys.stderr, flush=True)
            while not os.path.exists(gate):
                time.sleep(0.05)  # another process opens it: a file has no event to wait on here


class SlowSink(Bolt):
    """Takes ``test.delay`` seconds per tuple (the 'slow bolt' of the backpressure test)."""

    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.delay = float(conf.get("test.delay", 0.001))

    def execute(self, tup):
        time.sleep(self.delay)
        self.collector.ack(tup)


class Holder(Bolt):
    """Never acks nor fails: its trees stay in flight until they time out."""

    outputs = []

    def execute(self, tup):
        pass


class SlowWhenAsked(Bolt):
    """Acks everything; in worker-1 (``SQUALL_WORKER_INDEX``), an execute that finds the file
    ``test.slow_file`` removes it and takes ``test.sleep`` seconds, said on stderr when it begins and ends:
    a process whose scheduler loop is busy in a bolt."""

    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.gate = conf.get("test.slow_file") if os.environ.get("SQUALL_WORKER_INDEX") == "1" else None

    def execute(self, tup):
        if self.gate and os.path.exists(self.gate):
            os.remove(self.gate)
            print("slow execute begins", file=sys.stderr, flush=True)
            time.sleep(self.conf["test.sleep"])
            print("slow execute ends", file=sys.stderr, flush=True)
        self.collector.ack(tup)


class Stuck(Bolt):
    """Says so on stderr, then never returns from its first execute (a call that hangs)."""

    outputs = []

    def execute(self, tup):
        print("stuck in execute", file=sys.stderr, flush=True)
        threading.Event().wait()


def _wait_for_file(path: str, *, limit: float = 60.0) -> None:
    """Until ``path`` exists (made by the test in another process: a file has no event to wait on), at most
    ``limit`` seconds, so a test that never makes it fails on its own assertion, not on a hung process."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


class Resetter(Bolt):
    """Holds each input ``test.hold`` seconds in execute, calling reset_timeout on it every 0.3 s (a bolt
    calling a slow service), then acks it."""

    outputs = []

    def execute(self, tup):
        print(f"execute {tup['n']} starts", file=sys.stderr, flush=True)
        until = time.monotonic() + float(self.conf["test.hold"])
        while time.monotonic() < until:
            time.sleep(0.3)
            self.collector.reset_timeout(tup)
        self.collector.ack(tup)


class AckThenWait(Bolt):
    """Acks its first input, then stays in that execute until the file ``test.release`` exists."""

    outputs = []

    def execute(self, tup):
        self.collector.ack(tup)
        _wait_for_file(self.conf["test.release"])


class EmitThenWait(Bolt):
    """Emits its first input on, anchored, then stays in that execute until the file ``test.release``
    exists; then acks it."""

    outputs = ["n"]

    def execute(self, tup):
        self.collector.emit([tup["n"]], anchors=tup)
        _wait_for_file(self.conf["test.release"])
        self.collector.ack(tup)


class EmitThenWaitSpout(NumberSpout):
    """A :class:`NumberSpout` whose first next_tuple, once it has emitted, stays there until the file
    ``test.release`` exists."""

    def next_tuple(self):
        super().next_tuple()
        if self.emitted == 1 and not getattr(self, "waited", False):
            self.waited = True
            _wait_for_file(self.conf["test.release"])


class CountByTen(StatefulBolt):
    """Counts its inputs by ``n % 10`` in its durable state (a stateful word count of ten words)."""

    outputs = ["key", "count"]

    def execute(self, tup):
        key = str(tup["n"] % 10)
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.emit([key, self.state.get(key)])
