"""Components of the end-to-end suite's ``logcount`` Topology: numbered log lines → their level → a
count per level. A finite, paced spout keeps every line until it is acked and replays it on fail, so
after a worker pod dies the spout still acks exactly ``logcount.lines`` lines. And the split of the
``statefulwc`` Topology, whose sentences come from the embedded log (its records' values).

(examples/logcount.yaml reads the embedded log, a SQLite file that every pod would need on shared,
writable storage, which kind does not have; this one needs nothing but the image.)
"""

from __future__ import annotations

import time

from squall import BasicBolt, Bolt
from squall.testing import TestingSpout

LEVELS = ["INFO", "INFO", "WARN", "ERROR"]


class LogLines(TestingSpout):
    """Emits ``logcount.lines`` lines at ``logcount.rate`` per second; replays each failed line."""

    outputs = ["n", "line"]

    def items(self):
        self.rate = float(self.conf.get("logcount.rate", 100))
        self.started = time.monotonic()
        return ([n, f"{n:08d} {LEVELS[n % len(LEVELS)]} request {n} served"]
                for n in range(int(self.conf["logcount.lines"])))

    def ready(self):
        return self.emitted < (time.monotonic() - self.started) * self.rate


class ParseLevel(BasicBolt):
    outputs = ["level"]

    def execute(self, tup, collector):
        collector.emit([tup["line"].split()[1]])


class CountLevels(Bolt):
    outputs = ["level", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        level = tup["level"]
        self.counts[level] = self.counts.get(level, 0) + 1
        self.collector.emit([level, self.counts[level]], anchors=tup)
        self.collector.ack(tup)


class SplitValue(BasicBolt):
    """A record's value (a sentence) → its words."""

    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup["value"].split():
            collector.emit([word])
