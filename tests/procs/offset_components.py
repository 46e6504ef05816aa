"""Components of the offset-spout guarantee tests, run in worker processes (imported by name).

``TaggedLogSpout`` is :class:`~squall.spouts.log.LogSpout` unchanged except for its tuple: it adds
the emitting process's pid, so the test can tell what a spout emitted before it was killed from
what its restarted incarnation emitted (the pids are the supervisor's ``child.proc.pid``).

``RecordingSink`` records every tuple it processes in its own SQLite file, **before** acking it (a
:class:`~squall.testing.DurableSink`): a sink killed with SIGKILL has recorded every tuple it acked;
the tuples it received but had not written yet were not acked either.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from squall.spouts.log import LogSpout
from squall.testing import DurableSink


class TaggedLogSpout(LogSpout):
    """A LogSpout whose tuple is ``[partition, offset, pid]`` (pid: the process that emitted it)."""

    outputs = ["partition", "offset", "pid"]

    def translate(self, record):
        return [record.partition, record.offset, os.getpid()]


class RecordingSink(DurableSink):
    """Appends ``(partition, offset, spout pid, own pid)`` for each tuple to ``sink-<task>.db``, then acks.

    A :class:`~squall.testing.DurableSink` (config ``sink.dir``, ``sink.batch``), plus
    ``test.sink.delay``: seconds slept per tuple (default 0: a slower sink, for rate limiting).
    """

    schema = ("CREATE TABLE IF NOT EXISTS seen (partition INTEGER NOT NULL, off INTEGER NOT NULL,"
              " spout_pid INTEGER NOT NULL, sink_pid INTEGER NOT NULL)")
    insert = "INSERT INTO seen VALUES (?, ?, ?, ?)"

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.delay = float(conf.get("test.sink.delay", 0))
        self.pid = os.getpid()

    def execute(self, tup):
        if self.delay and not tup.is_tick:
            time.sleep(self.delay)
        super().execute(tup)

    def row(self, tup):
        return tup["partition"], tup["offset"], tup["pid"], self.pid


def read_seen(directory: Path) -> list[tuple[int, int, int, int]]:
    """Every ``(partition, offset, spout_pid, sink_pid)`` the sinks recorded, over all their files."""
    return RecordingSink.query(directory, "SELECT partition, off, spout_pid, sink_pid FROM seen")
