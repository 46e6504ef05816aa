"""The embedded durable log: partitioned, append-only topics with consumer-group offsets, in one SQLite file.

It has Kafka's offset semantics without a server: every partition numbers its records from 0 with
offsets that are never reused, a consumer group commits "the next offset to read" per partition
(with metadata), and readers may start anywhere. It is the default source for ``squall run`` and
the examples::

    log = DurableLog("data/clicks.db", create=True)
    log.create_topic("clicks", partitions=4)
    log.append("clicks", [("alice", {"url": "/"}), (None, {"url": "/about"})])

The file is in SQLite's WAL mode, so one writer and several reader processes share it safely:
readers never block the writer and always see whole transactions. Every transaction is synced to
disk before it returns (``synchronous=FULL``), so a commit that returned survives a crash.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from squall.errors import ConfigError, SquallError
from squall.spouts.config import get_str
from squall.spouts.records import Record, TopicPartition
from squall.spouts.source import CommitError, Committed, RebalanceListener
from squall.spouts.spout import OffsetSpout

log = logging.getLogger(__name__)

# Marks the SQLite file as a Squall log, so a wrong path gets a clear error instead of odd SQL ones.
APPLICATION_ID = 0x5351_4C4C
SCHEMA_VERSION = 1
TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,200}$")

_SCHEMA = [
    "CREATE TABLE topics (name TEXT PRIMARY KEY, partitions INTEGER NOT NULL, created_at REAL NOT NULL)",
    # The end offset is kept, not derived from the records, so offsets are never reused even if
    # records are removed (as compaction or retention would).
    "CREATE TABLE partitions (topic TEXT NOT NULL, partition INTEGER NOT NULL, end_offset INTEGER NOT NULL,"
    " PRIMARY KEY (topic, partition)) WITHOUT ROWID",
    "CREATE TABLE records (topic TEXT NOT NULL, partition INTEGER NOT NULL, off INTEGER NOT NULL, key TEXT,"
    " value TEXT NOT NULL, timestamp REAL NOT NULL, PRIMARY KEY (topic, partition, off)) WITHOUT ROWID",
    "CREATE TABLE commits (grp TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,"
    " off INTEGER NOT NULL, metadata TEXT NOT NULL, committed_at REAL NOT NULL,"
    " PRIMARY KEY (grp, topic, partition)) WITHOUT ROWID",
]


class LogError(SquallError):
    """The durable log cannot be opened or used as asked; the message says what to do."""


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def partition_for(key: Any, partitions: int) -> int:
    """The partition of a keyed record: a stable hash of the key's JSON, so equal keys share a partition."""
    return zlib.crc32(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()) % partitions


class DurableLog:
    """A log file; ``create=True`` creates the file (and its directory) when it does not exist."""

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise LogError(f"there is no log at {self.path}; create it by producing records: "
                               f"squall log produce {self.path} --topic TOPIC --partitions N < records.jsonl")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # The timeout is how long a write waits for another process's write to finish.
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._init_schema(create=create)
        except sqlite3.DatabaseError as exc:
            raise LogError(f"{self.path} is not a Squall log ({exc}); check the path") from None

    def _init_schema(self, *, create: bool) -> None:
        if self._app_id() != APPLICATION_ID:
            with self._write():
                # Checked again inside the write lock: another process may have just created it.
                if self._app_id() != APPLICATION_ID:
                    tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                    if tables or not create:
                        raise LogError(f"{self.path} is not a Squall log; check the path")
                    for statement in _SCHEMA:
                        self._db.execute(statement)
                    self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise LogError(f"{self.path} is a Squall log of format {version}, this Squall reads format "
                           f"{SCHEMA_VERSION}; use the Squall version that wrote it")

    def _app_id(self) -> int:
        return self._db.execute("PRAGMA application_id").fetchone()[0]

    @contextmanager
    def _write(self) -> Iterator[None]:
        # IMMEDIATE takes the write lock up front, so offsets read inside are not raced by another writer.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    # ---- topics -----------------------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        """Every topic and its number of partitions."""
        return dict(self._db.execute("SELECT name, partitions FROM topics ORDER BY name"))

    def partition_count(self, topic: str) -> int:
        """The number of partitions of ``topic``; raises :class:`LogError` when it does not exist."""
        row = self._db.execute("SELECT partitions FROM topics WHERE name = ?", (topic,)).fetchone()
        if row is None:
            known = ", ".join(self.topics()) or "none"
            raise LogError(f"topic {topic!r} does not exist in {self.path} (topics: {known}); "
                           f"create it with: squall log produce {self.path} --topic {topic} "
                           "--partitions N < records.jsonl")
        return row[0]

    def create_topic(self, topic: str, *, partitions: int) -> None:
        """Create ``topic``; a no-op when it exists with this many partitions."""
        if not TOPIC_PATTERN.match(topic):
            raise LogError(f"topic name {topic!r} is invalid: use 1-200 letters, digits, '.', '_' or '-'")
        if partitions < 1:
            raise LogError(f"topic {topic!r} needs at least 1 partition, got {partitions}")
        with self._write():
            row = self._db.execute("SELECT partitions FROM topics WHERE name = ?", (topic,)).fetchone()
            if row is not None:
                if row[0] != partitions:
                    raise LogError(f"topic {topic!r} already has {row[0]} partitions, not {partitions}; "
                                   f"the partition count of a topic cannot change (leave out --partitions)")
                return
            self._db.execute("INSERT INTO topics VALUES (?, ?, ?)", (topic, partitions, time.time()))
            self._db.executemany("INSERT INTO partitions VALUES (?, ?, 0)",
                                 [(topic, p) for p in range(partitions)])

    # ---- records ----------------------------------------------------------------------------

    def append(self, topic: str, records: Iterable[tuple[Any, Any]]) -> list[tuple[int, int]]:
        """Append ``(key, value)`` records (JSON values) in one transaction; their (partition, offset)s.

        A keyed record goes to the partition of its key; records without a key are spread round-robin.
        """
        count = self.partition_count(topic)
        stamp = time.time()
        placed = []
        with self._write():
            ends = dict(self._db.execute("SELECT partition, end_offset FROM partitions WHERE topic = ?",
                                         (topic,)))
            # Continuing from the total so far keeps partitions even across many small appends.
            turn = sum(ends.values())
            rows = []
            for key, value in records:
                if key is None:
                    partition, turn = turn % count, turn + 1
                else:
                    partition = partition_for(key, count)
                offset = ends[partition]
                ends[partition] = offset + 1
                encoded_key = None if key is None else _encode(key)
                rows.append((topic, partition, offset, encoded_key, _encode(value), stamp))
                placed.append((partition, offset))
            self._db.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._db.executemany("UPDATE partitions SET end_offset = ? WHERE topic = ? AND partition = ?",
                                 [(end, topic, p) for p, end in ends.items()])
        return placed

    def read(self, topic: str, partition: int, offset: int, limit: int) -> list[Record]:
        """Up to ``limit`` records of a partition from ``offset`` on (records that are gone are skipped)."""
        rows = self._db.execute(
            "SELECT off, key, value, timestamp FROM records WHERE topic = ? AND partition = ? AND off >= ?"
            " ORDER BY off LIMIT ?", (topic, partition, offset, limit))
        return [Record(topic, partition, off, None if key is None else json.loads(key), json.loads(value), ts)
                for off, key, value, ts in rows]

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """The (beginning, end) offsets of a partition: its first record and the offset after its last."""
        end = self._db.execute("SELECT end_offset FROM partitions WHERE topic = ? AND partition = ?",
                               (topic, partition)).fetchone()
        if end is None:
            raise LogError(f"topic {topic!r} has no partition {partition} in {self.path}")
        first = self._db.execute("SELECT min(off) FROM records WHERE topic = ? AND partition = ?",
                                 (topic, partition)).fetchone()[0]
        return (end[0] if first is None else first), end[0]

    # ---- consumer groups --------------------------------------------------------------------

    def committed(self, group: str, topic: str) -> dict[int, Committed]:
        """The group's committed offsets for ``topic`` by partition (never-committed ones are absent)."""
        rows = self._db.execute("SELECT partition, off, metadata FROM commits WHERE grp = ? AND topic = ?",
                                (group, topic))
        return {p: Committed(off, metadata) for p, off, metadata in rows}

    def commit(self, group: str, topic: str, offsets: Mapping[int, int], *, metadata: str = "") -> None:
        """Commit ``partition → next offset to read`` for the group, durably, in one transaction."""
        stamp = time.time()
        with self._write():
            self._db.executemany("INSERT OR REPLACE INTO commits VALUES (?, ?, ?, ?, ?, ?)",
                                 [(group, topic, p, off, metadata, stamp) for p, off in offsets.items()])

    def groups(self, topic: str) -> dict[str, dict[int, Committed]]:
        """Every group that committed offsets for ``topic``, with its committed offsets by partition."""
        out: dict[str, dict[int, Committed]] = {}
        rows = self._db.execute("SELECT grp, partition, off, metadata FROM commits WHERE topic = ?"
                                " ORDER BY grp, partition", (topic,))
        for group, partition, off, metadata in rows:
            out.setdefault(group, {})[partition] = Committed(off, metadata)
        return out


class LogSource:
    """A :class:`~squall.spouts.source.Source` over some partitions of one topic of a :class:`DurableLog`.

    Partitions are assigned statically (like Kafka's manual assign), so there are no rebalances.
    """

    def __init__(self, log: DurableLog, *, topic: str, group: str, partitions: Iterable[int]) -> None:
        self.log = log
        self.topic = topic
        self.group = group
        self._partitions = [TopicPartition(topic, p) for p in sorted(partitions)]
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._turn = 0

    def start(self, listener: RebalanceListener) -> None:
        listener.on_assigned(self._partitions)

    def poll(self, max_records: int) -> list[Record]:
        active = [tp for tp in self._partitions if tp not in self._paused]
        if not active:
            return []
        # Each poll starts at the next partition, so a busy partition cannot starve the others.
        self._turn = (self._turn + 1) % len(active)
        records: list[Record] = []
        for tp in active[self._turn:] + active[:self._turn]:
            if len(records) >= max_records:
                break
            batch = self.log.read(self.topic, tp.partition, self._positions[tp], max_records - len(records))
            if batch:
                self._positions[tp] = batch[-1].offset + 1
                records.extend(batch)
        return records

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def watermarks(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: self.log.watermarks(self.topic, tp.partition) for tp in partitions}

    def end_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: end for tp, (_, end) in self.watermarks(partitions).items()}

    def committed(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, Committed]:
        committed = self.log.committed(self.group, self.topic)
        return {tp: committed[tp.partition] for tp in partitions if tp.partition in committed}

    def commit(self, offsets: Mapping[TopicPartition, int], *, metadata: str, sync: bool) -> None:
        # A local commit is cheap, so an asynchronous one is simply done at once.
        try:
            self.log.commit(self.group, self.topic, {tp.partition: off for tp, off in offsets.items()},
                            metadata=metadata)
        except sqlite3.Error as exc:
            raise CommitError(f"{self.log.path}: {exc}") from exc

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        self._paused.update(partitions)

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        self._paused.difference_update(partitions)

    def close(self) -> None:
        self.log.close()


class LogSpout(OffsetSpout):
    """Reads a topic of the embedded durable log; its partitions are split among the spout's tasks.

    Task ``i`` of ``n`` reads the partitions ``p`` with ``p % n == i``. Config keys (besides the
    common ones): ``log.path`` and ``log.topic`` (required), ``log.group`` (default
    ``<topology>-<component>``).
    """

    config_keys: ClassVar[frozenset[str]] = frozenset({"log.path", "log.topic", "log.group"})
    config_prefixes: ClassVar[tuple[str, ...]] = ("log.", "retry.")

    def make_source(self) -> LogSource:
        path = get_str(self.conf, "log.path", hint="the log file, e.g. data/clicks.db")
        topic = get_str(self.conf, "log.topic", hint="the topic to read")
        group = get_str(self.conf, "log.group", f"{self.context.topology_name}-{self.context.component_id}")
        try:
            durable = DurableLog(path)
        except LogError as exc:
            raise ConfigError(f"log.path: {exc}") from None
        try:
            count = durable.partition_count(topic)
        except LogError as exc:
            durable.close()
            raise ConfigError(f"log.topic: {exc}") from None
        tasks, index = len(self.context.this_component_tasks), self.context.this_task_index
        mine = [p for p in range(count) if p % tasks == index]
        if not mine:
            log.warning("%s task %d of %d has no partition of %r (%d partitions): it will emit nothing",
                        self.context.component_id, index, tasks, topic, count)
        return LogSource(durable, topic=topic, group=group, partitions=mine)
