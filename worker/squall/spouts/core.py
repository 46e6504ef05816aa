"""The offset spout's state machine: storm-kafka-client's processing guarantees, with no I/O of its own.

:class:`OffsetCore` drives a :class:`~squall.spouts.source.Source` and hands tuples to an ``emit``
callback; the spout calls :meth:`OffsetCore.next_tuple`, :meth:`~OffsetCore.ack` and
:meth:`~OffsetCore.fail` from its own methods. Time comes from an injectable clock, so commit
periods and retry backoff can be tested without sleeping.

At least once, an offset moves through: polled → waiting to be emitted → emitted (in flight) →
acked → committed once every offset before it is acked. A failed offset leaves the in-flight set
for the retry service; when its retry time comes the source seeks back to it, and the records
re-read on the way that are acked or still in flight are skipped.

Exactly once (a topology's ``topology.state.guarantee``), the topology's checkpoints decide instead: each
records :meth:`OffsetCore.positions`, nothing is retried, and after a failure the whole topology goes back
to its last checkpoint, this core to the positions it recorded (:meth:`OffsetCore.rewind`).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from squall.api import DEFAULT_STREAM
from squall.backoff import Backoff
from squall.spouts.config import OffsetSpoutConfig
from squall.spouts.guarantees import ProcessingGuarantee
from squall.spouts.offsets import OffsetManager
from squall.spouts.records import MessageId, Record, TopicPartition, Translated, default_translate
from squall.spouts.retry import RetriesExhausted, RetryService
from squall.spouts.source import CommitError, Committed, Source

log = logging.getLogger(__name__)

#: ``emit(values, stream, msg_id)``: emit one tuple; ``msg_id`` is None when it is not tracked.
Emit = Callable[[list[Any], str, MessageId | None], object]
#: ``translate(record)``: the tuple's values, a :class:`Translated` for another stream, or None to skip it.
Translator = Callable[[Record], "list[Any] | Translated | None"]


#: Seconds between two reads of the partitions' end offsets (for the lag metrics; neither source waits).
END_OFFSETS_PERIOD = 1.0
RESOLVE_MAX_DELAY = 60.0  # seconds between two lookups of where to start reading, at most


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Where the spout's consumer group stands on one partition: what it committed, and the partition's
    end offset (the offset after its last record); None when not known yet."""

    committed: int | None
    latest: int | None

    @property
    def lag(self) -> int | None:
        """Records not committed yet (latest − committed), as Kafka's consumer lag."""
        if self.committed is None or self.latest is None:
            return None
        return self.latest - self.committed


class OffsetCore:
    """Polls, emits, tracks, retries and commits the records of the partitions assigned to one spout task."""

    def __init__(self, source: Source, *, config: OffsetSpoutConfig, emit: Emit, topology: str, task: int = 0,
                 translate: Translator = default_translate,
                 report: Callable[[Exception], object] | None = None,
                 now: Callable[[], float] = time.monotonic, exactly_once: bool = False) -> None:
        self.source = source
        self.config = config
        self._emit = emit
        self._translate = translate
        self._report = report or (lambda exc: None)
        self._now = now
        self._topology = topology
        self._exactly_once = exactly_once
        self._at_least_once = config.guarantee is ProcessingGuarantee.AT_LEAST_ONCE and not exactly_once
        #: exactly once: a tuple emitted since the last rewind failed (a checkpoint must not record its offset)
        self.lost = False
        self._starts: dict[TopicPartition, int] = {}  # exactly once: where each partition began, before any checkpoint
        # Stored with every commit, so a restarted task can tell its topology's commits from others'.
        self._metadata = json.dumps({"topology": topology, "task": task}, separators=(",", ":"))
        self._retry = RetryService(config.retry, now=now)
        self._assigned: set[TopicPartition] = set()
        self._unresolved: set[TopicPartition] = set()  # assigned, where to start not known yet (on_assigned)
        self._resolve = Backoff(1.0, RESOLVE_MAX_DELAY)  # when to ask again
        self._offsets: dict[TopicPartition, OffsetManager] = {}
        self._in_flight: set[MessageId] = set()
        self._waiting: dict[TopicPartition, deque[Record]] = {}
        self._paused: set[TopicPartition] = set()
        # Where each partition this task gave up stood (the first offset not processed): where it starts
        # again if it comes back with no commit to resume from
        self._left_at: dict[TopicPartition, int] = {}
        self._last_committed_positions: dict[TopicPartition, int] = {}
        self._next_commit = now() + config.commit_period
        # Replaced whole, never mutated: the metrics thread reads it while the spout's thread runs.
        self._end_offsets: dict[TopicPartition, int] = {}
        self._next_end_offsets = now()

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Subscribe or assign through the source; assignments arrive at :meth:`on_assigned`."""
        self.source.start(self)

    def commit(self) -> None:
        """Commit the acked offsets now (at least once; on deactivate and close)."""
        if self._at_least_once:
            self._commit_acked(self._assigned)

    def close(self) -> None:
        """Commit what is committable, then close the source."""
        try:
            self.commit()
        finally:
            self.source.close()

    @property
    def assigned(self) -> frozenset[TopicPartition]:
        """The partitions this spout task reads."""
        return frozenset(self._assigned)

    def partition_offsets(self) -> dict[TopicPartition, PartitionOffsets]:
        """The committed and end offsets of each assigned partition (safe to call from another thread).

        At least once, the committed offset is the one the core committed last; otherwise, the last
        position committed. End offsets are refreshed every :data:`END_OFFSETS_PERIOD` seconds.
        """
        ends, managers, positions = self._end_offsets, dict(self._offsets), dict(self._last_committed_positions)
        out = {}
        for tp in sorted(self.assigned):
            manager = managers.get(tp)
            committed = manager.committed if manager is not None else positions.get(tp)
            latest = ends.get(tp)
            if latest is not None and committed is not None:
                latest = max(latest, committed)  # read up to a second ago: the end is past any commit since
            out[tp] = PartitionOffsets(committed, latest)
        return out

    # ---- the spout's calls ------------------------------------------------------------------

    def next_tuple(self) -> bool:
        """Commit if due, poll if nothing is waiting, then emit at most one tuple; True if one was."""
        now = self._now()
        if (self.config.guarantee is not ProcessingGuarantee.AT_MOST_ONCE and not self._exactly_once
                and now >= self._next_commit):
            self._next_commit = now + self.config.commit_period
            if self._at_least_once:
                self._commit_acked(self._assigned)
            else:
                self._commit_positions(self._assigned, sync=False)
        if self._unresolved and self._resolve.due(now):
            self.on_assigned(set(self._unresolved))
        if now >= self._next_end_offsets:
            self._next_end_offsets = now + END_OFFSETS_PERIOD
            self._end_offsets = self.source.end_offsets(self._assigned)
        if not self._waiting:
            self._poll()
        return self._emit_next()

    def ack(self, msg_id: Any) -> None:
        """The tuple of ``msg_id`` was processed: its offset may be committed once those before it are."""
        if not self._at_least_once or msg_id not in self._in_flight:
            # Not in flight: its partition was revoked since it was emitted (or a duplicate call).
            return
        self._in_flight.discard(msg_id)
        self._acked(msg_id)

    def fail(self, msg_id: Any) -> None:
        """The tuple of ``msg_id`` failed or timed out: schedule a retry, or give up at the retry limit."""
        if self._exactly_once:
            self.lost = True
            return
        if not self._at_least_once or msg_id not in self._in_flight:
            return
        self._in_flight.discard(msg_id)
        if self._retry.schedule(msg_id):
            return
        exc = RetriesExhausted(msg_id, fails=self._retry.fails(msg_id),
                               max_retries=self.config.retry.max_retries)
        log.warning("%s", exc)
        self._report(exc)
        self._acked(msg_id)

    # ---- rebalance (called by the source) ---------------------------------------------------

    def on_assigned(self, partitions: Collection[TopicPartition]) -> None:
        """Start tracking newly assigned partitions, each at its commit if the first-poll strategy resumes
        it; else where this task left it, if it had it before (a rebalance revoked it and gave it back
        before anything was committed: the strategy again would skip, with ``latest``, what it had read
        and not processed); else at the offset the strategy picks."""
        new = [tp for tp in sorted(partitions) if tp not in self._assigned]
        if not new:
            return
        strategy = self.config.first_poll
        try:
            committed = self.source.committed(new)
            resume = {tp: c.offset for tp, c in committed.items()
                      if strategy.resumes_any_commit or self._committed_by_this_topology(c)}
            fresh = [tp for tp in new if tp not in resume and tp not in self._left_at]
            marks = self.source.watermarks(fresh) if fresh else {}
        except Exception as exc:  # noqa: BLE001 - a client's lookup can fail in many ways (a broker timeout)
            # Raised into the client's assignment callback, it would assign them without this core: read
            # and never emitted. Where to start stays unknown until a later next_tuple asks again; what the
            # client reads of them meanwhile is dropped, and the seek to the start goes back for it.
            self._unresolved.update(new)
            first = self._resolve.failed(self._now())  # one report an outage; each lookup may wait its timeout
            log.warning("cannot tell where to start reading %s: %s; asking again in %g s",
                        ", ".join(map(str, new)), exc, self._resolve.delay)
            if first:
                self._report(exc)
            return
        self._unresolved.difference_update(new)
        if not self._unresolved:
            self._resolve.succeeded()
        for tp in new:
            if tp in resume:
                start, why = resume[tp], "committed"
            elif tp in self._left_at:
                start, why = self._left_at[tp], "where this task left it"
            else:
                beginning, end = marks[tp]
                start, why = beginning if strategy.from_beginning else end, strategy.value
            self.source.seek(tp, start)
            self._starts[tp] = start
            self._assigned.add(tp)
            if self._at_least_once:
                self._offsets[tp] = OffsetManager(start)
            log.info("reading %s from offset %d (%s)", tp, start, why)

    def on_revoked(self, partitions: Collection[TopicPartition], *, lost: bool = False) -> None:
        """Stop tracking partitions taken away; commit their acked offsets first unless they were lost."""
        self._unresolved.difference_update(partitions)
        gone = {tp for tp in partitions if tp in self._assigned}
        if not gone:
            return
        if self._at_least_once and not lost:
            self._commit_acked(gone)
        for tp in gone:
            self._left_at[tp] = self._offsets[tp].next_commit_offset() if self._at_least_once else \
                self.source.position(tp)
        if self._paused & gone:  # the client may keep them paused: given back, they would never be read again
            self.source.resume(self._paused & gone)
        self._assigned -= gone
        self._paused -= gone
        for tp in gone:
            self._offsets.pop(tp, None)
            self._waiting.pop(tp, None)
            self._last_committed_positions.pop(tp, None)
        # Acks and fails still to come for these offsets are then ignored, as the seed's spout does.
        self._in_flight = {m for m in self._in_flight if m.tp not in gone}
        self._retry.retain(self._assigned)

    # ---- polling ----------------------------------------------------------------------------

    def _poll(self) -> None:
        retriable = self._retry.earliest_retriable_offsets() if self._at_least_once else {}
        pollable = self._pollable(retriable)
        retriable = {tp: offset for tp, offset in retriable.items() if tp in pollable}
        for tp, offset in retriable.items():
            # Only when reading has passed it: a Kafka consumer restarts its fetch on every seek, so
            # seeking again on each (non-blocking) poll would keep the retried record from arriving.
            if self.source.position(tp) > offset:
                self.source.seek(tp, offset)
        self._set_paused(self._assigned - pollable)
        at_most_once = self.config.guarantee is ProcessingGuarantee.AT_MOST_ONCE and not self._exactly_once
        # where reading stood: at most once, to seek back to; at least once, to tell a client's offset reset
        before = {tp: self.source.position(tp) for tp in pollable} if at_most_once or self._at_least_once else {}
        # Polled even when every partition is paused: a Kafka consumer that stops polling leaves its group.
        records = self.source.poll(self.config.max_poll_records)
        waiting: dict[TopicPartition, deque[Record]] = {}
        for record in records:
            tp = record.tp
            if tp in self._assigned:  # a rebalance during the poll may have revoked it
                waiting.setdefault(tp, deque()).append(record)
        if not waiting:
            return
        if self._at_least_once:
            for tp, got in waiting.items():
                if got[0].offset < min(before.get(tp, 0), self._offsets[tp].committed):
                    self._log_reset(tp, got[0].offset)
            self._ack_compacted_away(retriable, waiting)
        if at_most_once and not self._commit_positions(waiting, sync=True):
            # Nothing may be emitted that is not committed yet: read these records again later.
            for tp in waiting:
                if tp in before:
                    self.source.seek(tp, before[tp])
            return
        self._waiting = waiting

    def _log_reset(self, tp: TopicPartition, offset: int) -> None:
        """The source went back below the committed offset by itself: the partition's log was truncated or
        recreated, and the client's offset reset (``auto.offset.reset``) read it from ``offset``. Those are
        records never processed: they are emitted and committed afresh, and acks still to come for what
        the old log's offsets held are ignored (they would mark the new records at those offsets)."""
        log.warning("%s: the client went back to offset %d, below the committed offset %d: the partition's log "
                    "was truncated or recreated (auto.offset.reset); reading it again from %d", tp, offset,
                    self._offsets[tp].committed, offset)
        self._offsets[tp] = OffsetManager(offset)
        self._in_flight = {m for m in self._in_flight if m.tp != tp}
        self._retry.retain(self._assigned - {tp})

    def _pollable(self, retriable: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """The partitions to read from: at least once, those under ``max.uncommitted.offsets``, or
        with a retriable offset within the limit (so a failure can always be retried)."""
        if not self._at_least_once:
            return set(self._assigned)
        limit = self.config.max_uncommitted_offsets
        pollable = set()
        for tp in self._assigned:
            offsets = self._offsets[tp]
            if offsets.num_uncommitted < limit:
                pollable.add(tp)
            elif tp in retriable and retriable[tp] <= offsets.nth_uncommitted(limit):
                pollable.add(tp)
        return pollable

    def _set_paused(self, paused: set[TopicPartition]) -> None:
        # Only changes are passed on: pausing makes a Kafka consumer drop what it has prefetched.
        if paused - self._paused:
            self.source.pause(paused - self._paused)
        if self._paused - paused:
            self.source.resume(self._paused - paused)
        self._paused = paused

    def _ack_compacted_away(self, retriable: Mapping[TopicPartition, int],
                            waiting: Mapping[TopicPartition, deque[Record]]) -> None:
        """Ack failed offsets that a retry seek skipped over: they no longer exist (compaction)."""
        for tp, seek_offset in retriable.items():
            records = waiting.get(tp)
            if not records or records[0].offset <= seek_offset:
                continue
            offsets = self._offsets[tp]
            for offset in offsets.emitted_between(seek_offset, records[0].offset):
                msg_id = MessageId(tp.topic, tp.partition, offset)
                if not offsets.is_acked(offset) and msg_id not in self._in_flight:
                    log.info("record %s is gone from the partition (compacted?); acking it", msg_id)
                    self._acked(msg_id)

    # ---- emitting ---------------------------------------------------------------------------

    def _emit_next(self) -> bool:
        while self._waiting:
            tp, records = next(iter(self._waiting.items()))
            while records:
                if self._emit_record(records.popleft()):
                    return True
            del self._waiting[tp]
        return False

    def _emit_record(self, record: Record) -> bool:
        msg_id = MessageId(record.topic, record.partition, record.offset)
        if self._at_least_once:
            offsets = self._offsets[record.tp]
            if (record.offset < offsets.committed or offsets.is_acked(record.offset)
                    or msg_id in self._in_flight):
                return False  # re-read on the way to a retried offset: done, or still in the topology
            if self._retry.is_scheduled(msg_id) and not self._retry.is_ready(msg_id):
                return False  # failed, but its backoff has not passed; a later seek comes back for it
            # In flight from here on, so whatever happens next ends in an ack or a fail of it.
            self._in_flight.add(msg_id)
            offsets.add_emitted(record.offset)
            self._retry.remove(msg_id)
        try:
            translated = self._translate(record)
            if translated is None:
                # Nothing to process, so nothing to wait for: done at once, or it would hold commits back.
                self.ack(msg_id)
                return False
            if isinstance(translated, Translated):
                values, stream = translated.values, translated.stream
            else:
                values, stream = translated, DEFAULT_STREAM
            self._emit(values, stream, msg_id if self._at_least_once or self._exactly_once else None)
        except Exception:
            # A record the translator or the collector refused is retried like a failed tuple (and
            # skipped at the retry limit), rather than silently committed past.
            self.fail(msg_id)
            raise
        return True

    def _acked(self, msg_id: MessageId) -> None:
        offsets = self._offsets[msg_id.tp]
        offsets.add_emitted(msg_id.offset)
        offsets.ack(msg_id.offset)
        self._retry.forget(msg_id)

    # ---- exactly once: positions a checkpoint records, and the rewind to them --------------------

    def positions(self) -> dict[TopicPartition, int]:
        """The first offset of each assigned partition not emitted yet: everything before it is in the
        topology, ahead of a checkpoint emitted now."""
        waiting = self._waiting
        return {tp: waiting[tp][0].offset if waiting.get(tp) else self.source.position(tp)
                for tp in sorted(self._assigned)}

    def rewind(self, positions: Mapping[TopicPartition, int]) -> None:
        """Read again from ``positions`` (a partition not in them: from where it began); what was polled and
        not emitted is dropped, and what failed is forgotten: the topology went back with this core."""
        self._waiting = {}
        self.lost = False
        for tp in sorted(self._assigned):
            self.source.seek(tp, positions.get(tp, self._starts[tp]))

    def commit_positions(self, positions: Mapping[TopicPartition, int]) -> None:
        """Commit a checkpoint's positions to the source (for its consumer group's lag; exactly once, the
        positions a task starts from are its checkpoint's, not these)."""
        positions = {tp: offset for tp, offset in positions.items()
                     if tp in self._assigned and self._last_committed_positions.get(tp) != offset}
        if positions and self._send_commit(positions, sync=False):
            self._last_committed_positions.update(positions)

    # ---- committing -------------------------------------------------------------------------

    def _commit_acked(self, partitions: Collection[TopicPartition]) -> None:
        """Commit each partition's contiguous acked prefix, synchronously."""
        offsets = {}
        for tp in partitions:
            manager = self._offsets[tp]
            nxt = manager.next_commit_offset()
            if nxt > manager.committed:
                offsets[tp] = nxt
        if not offsets:
            return
        if not self._send_commit(offsets, sync=True):
            return
        for tp, offset in offsets.items():
            self._offsets[tp].commit(offset)
            if self.source.position(tp) < offset:
                # The source went back for a retry and everything after it got acked meanwhile:
                # skip ahead rather than re-read committed records (they would be dropped anyway).
                self.source.seek(tp, offset)

    def _commit_positions(self, partitions: Collection[TopicPartition], *, sync: bool) -> bool:
        """Commit the polled positions: all that was read counts as processed. False if the commit failed."""
        offsets = {}
        for tp in partitions:
            position = self.source.position(tp)
            if self._last_committed_positions.get(tp) != position:
                offsets[tp] = position
        if not offsets:
            return True
        if not self._send_commit(offsets, sync=sync):
            return False
        self._last_committed_positions.update(offsets)
        return True

    def _send_commit(self, offsets: Mapping[TopicPartition, int], *, sync: bool) -> bool:
        try:
            self.source.commit(offsets, metadata=self._metadata, sync=sync)
        except CommitError as exc:
            # The offsets stay uncommitted and are committed with the next commit; records may be
            # replayed after a crash until then, which at least once allows.
            log.warning("commit of %s failed: %s", _describe(offsets), exc)
            self._report(exc)
            return False
        log.debug("committed %s (%s)", _describe(offsets), "sync" if sync else "async")
        return True

    def _committed_by_this_topology(self, committed: Committed) -> bool:
        try:
            return json.loads(committed.metadata).get("topology") == self._topology
        except (ValueError, AttributeError):
            return False


def _describe(offsets: Mapping[TopicPartition, int]) -> str:
    return ", ".join(f"{tp}@{offset}" for tp, offset in sorted(offsets.items()))
