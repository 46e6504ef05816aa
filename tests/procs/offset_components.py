"""Components of the offset-spout guarantee tests, run in worker processes (imported by name).

``TaggedLogSpout`` is :class:`~squall.spouts.log.LogSpout` unchanged except for its tuple: it adds
the emitting process's pid, so the test can tell what a spout emitted before it was killed from
what its restarted incarnation emitted (the pids are the supervisor's ``child.proc.pid``).

``RecordingSink`` records every tuple it processes in its own SQLite file, **before** acking it:
tuples are buffered, written in one transaction (fsynced: ``synchronous=FULL``) when the batch is
full or on a tick, and only then acked. A sink killed with SIGKILL has therefore recorded every
tuple it acked; the tuples it received but had not written yet were not acked either.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from squall import Bolt
from squall.spouts.log import LogSpout

SCHEMA = ("CREATE TABLE IF NOT EXISTS seen (partition INTEGER NOT NULL, off INTEGER NOT NULL,"
          " spout_pid INTEGER NOT NULL, sink_pid INTEGER NOT NULL)")


class TaggedLogSpout(LogSpout):
    """A LogSpout whose tuple is ``[partition, offset, pid]`` (pid: the process that emitted it)."""

    outputs = ["partition", "offset", "pid"]

    def translate(self, record):
        return [record.partition, record.offset, os.getpid()]


class RecordingSink(Bolt):
    """Appends ``(partition, offset, spout pid, own pid)`` for each tuple to ``sink-<task>.db``, then acks.

    Config: ``test.sink.dir`` (required), ``test.sink.batch`` (tuples per write, default 100),
    ``test.sink.delay`` (seconds slept per tuple, default 0: a slower sink, for rate limiting).
    Give the bolt a ``tickFrequencySeconds`` so partial batches are written too.
    """

    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        directory = Path(conf["test.sink.dir"])
        directory.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(directory / f"sink-{context.task_id}.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(SCHEMA)
        self.batch = int(conf.get("test.sink.batch", 100))
        self.delay = float(conf.get("test.sink.delay", 0))
        self.pid = os.getpid()
        self.buffer = []

    def execute(self, tup):
        if tup.is_tick:
            self.flush()
            self.collector.ack(tup)
            return
        if self.delay:
            time.sleep(self.delay)
        self.buffer.append(tup)
        if len(self.buffer) >= self.batch:
            self.flush()

    def flush(self):
        if not self.buffer:
            return
        rows = [(t["partition"], t["offset"], t["pid"], self.pid) for t in self.buffer]
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO seen VALUES (?, ?, ?, ?)", rows)
        self.db.execute("COMMIT")  # on disk once this returns; only then acked
        for tup in self.buffer:
            self.collector.ack(tup)
        self.buffer = []

    def cleanup(self):
        self.flush()
        self.db.close()


def read_seen(directory: Path) -> list[tuple[int, int, int, int]]:
    """Every ``(partition, offset, spout_pid, sink_pid)`` the sinks recorded, over all their files."""
    rows = []
    for path in sorted(Path(directory).glob("sink-*.db")):
        db = sqlite3.connect(path)
        try:
            rows += db.execute("SELECT partition, off, spout_pid, sink_pid FROM seen").fetchall()
        except sqlite3.OperationalError:  # the sink created the file but not the table yet
            pass
        finally:
            db.close()
    return rows


def count_distinct(directory: Path) -> int:
    """How many distinct records the sinks recorded so far."""
    return len({(p, o) for p, o, _, _ in read_seen(directory)})
