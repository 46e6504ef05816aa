"""Components of the end-to-end suite's ``logcount`` Topology: numbered log lines → their level → a
count per level. A finite, paced spout keeps every line until it is acked and replays it on fail, so
after a worker pod dies the spout still acks exactly ``logcount.lines`` lines.

(examples/logcount.yaml reads the embedded log, a SQLite file that every pod would need on shared,
writable storage, which kind does not have; this one needs nothing but the image.)
"""

from __future__ import annotations

import time

from squall import BasicBolt, Bolt, Spout

LEVELS = ["INFO", "INFO", "WARN", "ERROR"]


class LogLines(Spout):
    """Emits ``logcount.lines`` lines at ``logcount.rate`` per second; replays each failed line."""

    outputs = ["n", "line"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.lines = int(conf["logcount.lines"])
        self.rate = float(conf.get("logcount.rate", 100))
        self.next = 0
        self.pending: dict[int, str] = {}
        self.replay: list[int] = []
        self.started = time.monotonic()

    def next_tuple(self):
        if self.replay:
            n = self.replay.pop()
        elif self.next < self.lines and self.next < (time.monotonic() - self.started) * self.rate:
            n, self.next = self.next, self.next + 1
            self.pending[n] = f"{n:08d} {LEVELS[n % len(LEVELS)]} request {n} served"
        else:
            return
        self.collector.emit([n, self.pending[n]], msg_id=n)

    def ack(self, msg_id):
        del self.pending[msg_id]

    def fail(self, msg_id):
        self.replay.append(msg_id)


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
