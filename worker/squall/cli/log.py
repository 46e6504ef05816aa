"""``squall log produce|consume|describe``: load, read and inspect the embedded durable log (JSON lines)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from squall.spouts.log import DurableLog, LogError

#: Records appended per transaction by ``produce``: big enough to be fast, small enough to show progress.
BATCH = 1000
#: Seconds between progress lines of a long ``produce`` and between polls of ``consume --follow``.
PROGRESS_EVERY = 1.0
FOLLOW_POLL = 0.2


class _Intermixed(argparse.ArgumentParser):
    """A parser whose options may also come between its positionals, as in ``produce LOG --topic T FILE``:
    argparse takes positionals in runs, so an optional positional after an option was refused."""

    _inner = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        if self._inner:  # parse_known_intermixed_args calls this again, twice
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def register(subparsers: argparse._SubParsersAction) -> None:
    top = subparsers.add_parser(
        "log", help="load, read and inspect the embedded durable log (JSON lines)",
        description="The embedded durable log: partitioned, append-only topics with consumer-group "
                    "offsets in one SQLite file, read by squall.spouts.log:LogSpout.")
    actions = top.add_subparsers(dest="log_command", required=True, metavar="ACTION", parser_class=_Intermixed)

    p = actions.add_parser(
        "produce", help="append records (one JSON value per line) to a topic",
        description="Append records to a topic, creating the log file and the topic if needed. Each "
                    "input line is one record's value, as JSON; blank lines are skipped.")
    p.add_argument("log", help="path to the log file (created if missing)")
    p.add_argument("input", nargs="?", default="-", help="JSON lines file ('-' or left out: stdin)")
    p.add_argument("--topic", required=True, help="the topic to append to")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="partitions of a new topic (default 1); an existing topic must already have N")
    p.add_argument("--key", metavar="FIELD",
                   help="use this field of each (object) value as the record key: records with equal keys "
                        "go to the same partition. Default: no key, records spread round-robin")
    p.set_defaults(func=produce)

    c = actions.add_parser(
        "consume", help="print records of a topic as JSON lines",
        description="Print records as JSON lines: topic, partition, offset, key, value, timestamp. "
                    "With --group, start at the group's committed offsets and commit what was printed.")
    c.add_argument("log", help="path to the log file")
    c.add_argument("--topic", required=True, help="the topic to read")
    c.add_argument("--group", help="consumer group: resume from and commit its offsets (default: read "
                                   "from the beginning, commit nothing)")
    c.add_argument("--partition", type=int, action="append", metavar="P",
                   help="read only this partition (repeatable; default: all)")
    c.add_argument("--max-records", type=int, metavar="N", help="stop after N records")
    c.add_argument("--follow", action="store_true", help="keep waiting for new records (Ctrl-C to stop)")
    c.set_defaults(func=consume)

    d = actions.add_parser(
        "describe", help="show topics, partitions, end offsets and committed offsets per group",
        description="Show each topic's partitions with their start and end offsets, and every consumer "
                    "group's committed offset and lag per partition.")
    d.add_argument("log", help="path to the log file")
    d.add_argument("--topic", help="only this topic")
    d.add_argument("--json", action="store_true", help="one JSON object per topic instead of tables")
    d.set_defaults(func=describe)


# ---- produce ------------------------------------------------------------------------------------

def produce(args: argparse.Namespace) -> int:
    log = DurableLog(args.log, create=True)
    made = False

    def append(records: list[tuple[Any, Any]], *, done: bool = False) -> int:
        # The topic is made with the first records (or once an input without any is done): made first, a
        # refused first line left a topic of one partition, and the same command with --partitions 3 failed.
        nonlocal made
        if not made and (records or done):
            if args.topic not in log.topics() or args.partitions is not None:
                log.create_topic(args.topic, partitions=1 if args.partitions is None else args.partitions)
            made = True
        return len(log.append(args.topic, records)) if records else 0

    try:
        name = "stdin" if args.input == "-" else args.input
        with _open_input(args.input) as lines:
            total = _produce_lines(append, lines, source=name, key_field=args.key)
        append([], done=True)
        count = log.partition_count(args.topic)
        ends = " ".join(f"{p}:{log.watermarks(args.topic, p)[1]}" for p in range(count))
        print(f"produced {total} record(s) to topic {args.topic!r} in {args.log} (end offsets {ends})")
    finally:
        log.close()
    return 0


def _open_input(path: str) -> contextlib.AbstractContextManager[IO[str]]:
    if path == "-":
        return contextlib.nullcontext(sys.stdin)
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise LogError(f"cannot read {path}: {exc.strerror}") from None


def _produce_lines(append: Callable[[list[tuple[Any, Any]]], int], lines: IO[str], *, source: str,
                   key_field: str | None) -> int:
    total, batch = 0, []
    last_progress = time.monotonic()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            batch.append(_record(line, key_field=key_field))
        except LogError as exc:
            total += append(batch)
            raise LogError(f"{source} line {lineno}: {exc}; "
                           f"the {total} record(s) before it were produced") from None
        if len(batch) >= BATCH:
            total += append(batch)
            batch = []
            if time.monotonic() - last_progress >= PROGRESS_EVERY:
                last_progress = time.monotonic()
                print(f"squall log produce: {total} records so far", file=sys.stderr, flush=True)
    if batch:
        total += append(batch)
    return total


def _record(line: str, *, key_field: str | None) -> tuple[Any, Any]:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise LogError(f"not valid JSON ({exc})") from None
    if key_field is None:
        return None, value
    if not isinstance(value, dict) or key_field not in value:
        raise LogError(f"the value has no field {key_field!r} to take the key from (--key {key_field})")
    return value[key_field], value


# ---- consume ------------------------------------------------------------------------------------

def consume(args: argparse.Namespace) -> int:
    log = DurableLog(args.log)
    try:
        _consume(log, args)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        log.close()
    return 0


def _consume(log: DurableLog, args: argparse.Namespace) -> None:
    count = log.partition_count(args.topic)
    partitions = sorted(set(args.partition)) if args.partition else list(range(count))
    for p in partitions:
        if not 0 <= p < count:
            raise LogError(f"--partition {p}: topic {args.topic!r} has partitions 0 to {count - 1}")
    committed = log.committed(args.group, args.topic) if args.group else {}
    positions = {p: committed[p].offset if p in committed else log.watermarks(args.topic, p)[0]
                 for p in partitions}
    for batch in _batches(log, args, positions):
        for record in batch:
            print(json.dumps({"topic": record.topic, "partition": record.partition, "offset": record.offset,
                              "key": record.key, "value": record.value, "timestamp": record.timestamp},
                             ensure_ascii=False))
            positions[record.partition] = record.offset + 1
        # Committed only once printed: a consumer stopped at any point loses nothing.
        sys.stdout.flush()
        if args.group:
            log.commit(args.group, args.topic, positions, metadata='{"tool":"squall log consume"}')


def _batches(log: DurableLog, args: argparse.Namespace, positions: dict[int, int]) -> Iterator[list[Any]]:
    """Records in rounds over the partitions, up to --max-records; with --follow, wait for more."""
    printed = 0
    while True:
        got = False
        for p in positions:
            limit = BATCH if args.max_records is None else min(BATCH, args.max_records - printed)
            if limit <= 0:
                return
            batch = log.read(args.topic, p, positions[p], limit)
            if batch:
                got = True
                printed += len(batch)
                yield batch
        if not got:
            if not args.follow:
                return
            time.sleep(FOLLOW_POLL)


# ---- describe -----------------------------------------------------------------------------------

def describe(args: argparse.Namespace) -> int:
    log = DurableLog(args.log)
    try:
        topics = log.topics()
        if args.topic is not None:
            topics = {args.topic: log.partition_count(args.topic)}
        if not topics:
            print(f"{args.log}: no topics yet (add records with: squall log produce {args.log} --topic T)")
        for topic, count in topics.items():
            marks = {p: log.watermarks(topic, p) for p in range(count)}
            groups = log.groups(topic)
            if args.json:
                print(json.dumps({
                    "topic": topic,
                    "partitions": [{"partition": p, "start": s, "end": e} for p, (s, e) in marks.items()],
                    "groups": [{"group": g, "partition": p, "committed": c.offset,
                                "lag": marks[p][1] - c.offset, "metadata": c.metadata}
                               for g, offsets in groups.items() for p, c in offsets.items()],
                }))
                continue
            print(f"topic {topic}: {count} partition(s)")
            _table(["PARTITION", "START", "END"], [[p, s, e] for p, (s, e) in marks.items()])
            if groups:
                _table(["GROUP", "PARTITION", "COMMITTED", "LAG"],
                       [[g, p, c.offset, marks[p][1] - c.offset] for g, offsets in groups.items()
                        for p, c in offsets.items()])
            else:
                print("  no group has committed offsets")
    finally:
        log.close()
    return 0


def _table(headers: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        cells = (str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  " + "  ".join(cells).rstrip())
