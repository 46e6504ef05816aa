"""Spouts and bolts that the multi-process tests run in worker processes (imported by name).

The spout's durable record is a JSON file written at close(): the ids it saw acked and failed.
"""

from __future__ import annotations

import json
import os
import time

from squall import BasicBolt, Bolt, Spout


class NumberSpout(Spout):
    """Emits ids 0..N-1 with message ids; replays failed ids; writes what it saw at close()."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.total = int(conf.get("test.count", 1000))
        self.track = conf.get("test.track", True)
        self.report_path = conf.get("test.report")
        self.next_id = 0
        self.replay: list[int] = []
        self.acked: set[int] = set()
        self.failed = 0
        self.rate = conf.get("test.rate")  # new ids per second, so a run lasts long enough to interfere with
        self.start = time.monotonic()

    def next_tuple(self):
        if self.replay:
            n = self.replay.pop()
        elif self.rate and self.next_id >= self.rate * (time.monotonic() - self.start):
            return
        elif self.total < 0 or self.next_id < self.total:
            n = self.next_id
            self.next_id += 1
        else:
            return
        self.collector.emit([n], msg_id=n if self.track else None)

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.failed += 1
        self.replay.append(msg_id)

    def close(self):
        if self.report_path:
            tmp = f"{self.report_path}.tmp"
            with open(tmp, "w") as out:
                json.dump({"acked": sorted(self.acked), "failed": self.failed, "emitted": self.next_id}, out)
            os.replace(tmp, self.report_path)


class ReportingSink(Bolt):
    """Acks everything; reports an error for the tuple whose n is 5."""

    outputs = []

    def execute(self, tup):
        if tup["n"] == 5:
            self.collector.report_error(ValueError("five is not allowed here"))
        self.collector.ack(tup)


class BrokenSpout(NumberSpout):
    """A spout whose ``open`` fails, as one with a missing input file would."""

    def open(self, conf, context, collector):
        raise FileNotFoundError("no such input: /nowhere/records.db")


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


class Double(BasicBolt):
    outputs = ["n", "double"]

    def execute(self, tup, collector):
        collector.emit([tup["n"], tup["n"] * 2])


class Sink(Bolt):
    outputs = []

    def execute(self, tup):
        self.collector.ack(tup)


class SlowSink(Bolt):
    """Takes ``test.delay`` seconds per tuple (the 'slow bolt' of the backpressure test)."""

    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.delay = float(conf.get("test.delay", 0.001))

    def execute(self, tup):
        time.sleep(self.delay)
        self.collector.ack(tup)
