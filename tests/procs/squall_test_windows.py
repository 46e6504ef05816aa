"""The windowed components of the multi-process tests (on PYTHONPATH for the processes: tests/procs)."""

from __future__ import annotations

import json
import os

from squall_test_components import NumberSpout

from squall import Bolt, WindowedBolt
from squall.testing import DurableSink

FAR = 10**13  # a timestamp past every window: the watermark passes them all


class Summer(WindowedBolt):
    """Emits each window's sum, size and bounds, anchored to its tuples."""

    outputs = ["sum", "size", "start", "end"]

    def execute(self, window):
        self.collector.emit([sum(t["n"] for t in window), len(window), window.start_timestamp,
                             window.end_timestamp])


class SumSink(Bolt):
    """Adds up the windows it gets, and the anchors (trees) each came with; writes them at cleanup to
    ``test.sums``-<task>.json."""

    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.total = self.size = self.windows = self.anchors = 0

    def execute(self, tup):
        self.total += tup["sum"]
        self.size += tup["size"]
        self.windows += 1
        self.anchors += len(tup.anchors)
        self.collector.ack(tup)

    def cleanup(self):
        path = f"{self.conf['test.sums']}-{self.context.task_id}.json"
        with open(f"{path}.tmp", "w") as out:
            json.dump({"total": self.total, "size": self.size, "windows": self.windows, "anchors": self.anchors}, out)
        os.replace(f"{path}.tmp", path)


class Members(WindowedBolt):
    """Emits each window's numbers, as JSON."""

    outputs = ["numbers"]

    def execute(self, window):
        self.collector.emit([json.dumps([t["n"] for t in window])])


class WindowRows(DurableSink):
    """A row per window: its numbers."""

    file_prefix = "windows"
    schema = "CREATE TABLE IF NOT EXISTS windows (numbers TEXT)"
    insert = "INSERT INTO windows VALUES (?)"

    def row(self, tup):
        return [tup["numbers"]]


class StampedSpout(NumberSpout):
    """``(n, ts)``: ``ts`` = 10 ms × n, but every 100th number from 1,000 on is 10 s behind (late, behind a
    1 s lag, as long as the window task ticked its watermark in the 1.6 s before: at 5 s behind, 0.6 s,
    which a loaded machine's full run once missed); after ``test.count`` numbers, one far ahead, so that
    the watermark passes every window."""

    outputs = ["n", "ts"]

    def items(self):
        return self._stamped(super().items(), int(self.conf["test.count"]))  # the rate is set now, not at a next()

    @staticmethod
    def _stamped(numbers, count):
        for (n,) in numbers:
            yield [n, n * 10 - (10_000 if late(n) else 0)]
        yield [count, FAR]


def late(n: int) -> bool:
    # from the second second of the run on (500 a second): by then the window task has surely ticked its
    # watermark past the start, on a loaded machine too (from 199 on, a slow first tick took some for on time)
    return n >= 1000 and n % 100 == 99


class LateRows(DurableSink):
    """A row per late tuple: its number."""

    file_prefix = "late"
    schema = "CREATE TABLE IF NOT EXISTS late (n INTEGER)"
    insert = "INSERT INTO late VALUES (?)"

    def row(self, tup):
        return [tup["n"]]
