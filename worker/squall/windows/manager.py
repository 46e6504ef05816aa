"""The windows of one task, as Storm's ``WindowManager`` with its trigger and eviction policies computes
them: which tuples each window holds, when it fires, and when a tuple leaves the last window that can
still hold it. Pure: no engine, no clock; :mod:`squall.executor.windowing` feeds it tuples and time.

Every timestamp is an int of milliseconds. Tuples reach the window in *release* order: in processing
time as they arrive (stamped with the clock), in event time by timestamp once the watermark passes
them (:class:`EventTime`). Released tuples are kept in that order, so a window is always a contiguous
run of them:

- a **count trigger** (``slide`` a count S) fires at every S-th released tuple, the window ending there;
  a **time trigger** (``slide`` a duration S) fires the windows ending at multiples of S (ms since the
  epoch, as Storm aligns event-time windows) once the watermark reaches them, skipping empty ones;
- a **count length** N keeps the N tuples ending at the window's end; a **duration length** L keeps those
  with a timestamp in ``(end - L, end]``.

After a window is computed, every tuple that no later window can hold (by the least a later window's end
can be) expires: it is acked then, and listed in the next window's ``expired``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Extent:
    """A window's length or sliding interval: ``count`` tuples, or ``ms`` milliseconds."""

    count: int | None = None
    ms: int | None = None

    def __post_init__(self) -> None:
        if (self.count is None) == (self.ms is None):
            raise ValueError("an extent is a count or a duration, one of them")


@dataclass
class Fired(Generic[T]):
    """A window to compute: its tuples (oldest first), those not in the previous window, those that left the
    windows since the previous one (already acked), and its bounds in ms: a duration window holds
    ``(start, end]``; a count window has no start, and ends at its last tuple's timestamp (or, fired by
    time, at the time it fired for)."""

    tuples: list[T]
    new: list[T]
    expired: list[T]
    start: int | None
    end: int
    lo: int = field(repr=False, default=0)  # the window is the buffer's [lo, hi), when it fires
    hi: int = field(repr=False, default=0)
    ref: int = field(repr=False, default=0)  # count trigger: the sequence number of the tuple it fired at


class WindowManager(Generic[T]):
    """The released tuples of one task and the windows over them.

    Call :meth:`release` for each tuple in release order (timestamps never decreasing), then take the due
    windows with :meth:`next_window` (``watermark``: the time up to which windows may fire) and, once each
    is computed, :meth:`computed`, which returns the tuples to ack. A window whose computation failed goes
    to :meth:`computed` with ``failed=True``: its tuples leave the buffer (the caller fails them)."""

    def __init__(self, *, length: Extent, slide: Extent) -> None:
        self.length = length
        self.slide = slide
        self._items: list[T] = []
        self._ts: list[int] = []
        self._seq: list[int] = []
        self._lo = 0  # the buffer is [_lo:] of the three lists; the prefix is dropped in bulk
        self._released = 0  # tuples released so far: the next one's sequence number
        self._since = 0  # released since the last count trigger
        self._refs: list[int] = []  # count trigger: sequence numbers of tuples at which a window is due
        self._next_end: int | None = None  # time trigger: the end of the next window that may fire
        self._last_seq = -1  # the last tuple of the previous window: later ones are new
        self._expired: list[T] = []  # expired since the previous window
        self._to_ack: list[T] = []  # expired, not yet handed to the caller to ack

    def __len__(self) -> int:
        return len(self._items) - self._lo

    def buffered(self) -> list[T]:
        return self._items[self._lo:]

    def release(self, item: T, ts: int) -> None:
        if self._lo > 1024 and self._lo * 2 > len(self._items):  # the expired prefix goes now and then
            del self._items[:self._lo], self._ts[:self._lo], self._seq[:self._lo]
            self._lo = 0
        self._items.append(item)
        self._ts.append(ts)
        self._seq.append(self._released)
        if self.slide.count is not None:
            self._since += 1
            if self._since == self.slide.count:
                self._since = 0
                self._refs.append(self._released)
        self._released += 1

    def due(self, watermark: int | None) -> bool:
        """Whether :meth:`next_window` may have a window (or stale tuples) for ``watermark``: a cheap test, for
        every tuple."""
        if self.slide.count is not None:
            return bool(self._refs)
        end = self._next_end
        return watermark is not None and len(self._items) > self._lo and (end is None or end <= watermark)

    def next_window(self, watermark: int | None) -> Fired[T] | None:
        """The next window due, or None. Tuples before its start expire now (see :meth:`take_expired`)."""
        if self.slide.count is not None:
            return self._count_triggered()
        return self._time_triggered(watermark)

    def _count_triggered(self) -> Fired[T] | None:
        while self._refs:
            ref = self._refs.pop(0)
            hi = bisect_right(self._seq, ref, self._lo)
            if hi == self._lo or self._seq[hi - 1] != ref:  # its tuple left with a failed window
                continue
            end = self._ts[hi - 1]
            lo = self._start(hi, end)
            return self._fire(lo, hi, end=end, ref=ref)
        return None

    def _time_triggered(self, watermark: int | None) -> Fired[T] | None:
        slide = self.slide.ms
        assert slide is not None
        while watermark is not None and len(self):
            end = self._next_end
            if end is None:
                end = self._next_end = _align_up(self._ts[self._lo], slide)
            if end > watermark:
                return None
            hi = bisect_right(self._ts, end, self._lo)
            lo = self._start(hi, end)
            if lo < hi:
                return self._fire(lo, hi, end=end, ref=-1)
            self._expire(lo)  # stale: before this empty window, so before every later one
            if len(self):
                self._next_end = _align_up(self._ts[self._lo], slide)
        return None

    def _start(self, hi: int, end: int) -> int:
        """Where the window ending at buffer position ``hi`` (exclusive), at time ``end``, begins."""
        if self.length.count is not None:
            return max(self._lo, hi - self.length.count)
        return bisect_right(self._ts, end - self.length.ms, self._lo, hi)

    def _fire(self, lo: int, hi: int, *, end: int, ref: int) -> Fired[T]:
        self._expire(lo)
        start = None if self.length.ms is None else end - self.length.ms
        tuples = self._items[lo:hi]
        last = self._last_seq
        first_new = bisect_right(self._seq, last, lo, hi)
        self._last_seq = max(last, self._seq[hi - 1])
        expired, self._expired = self._expired, []
        return Fired(tuples, self._items[first_new:hi], expired, start, end, lo, hi, ref)

    def computed(self, window: Fired[T], *, failed: bool = False) -> None:
        """After ``window`` was computed (``failed``: its computation raised): the tuples no later window
        can hold expire (:meth:`take_expired`)."""
        if failed:
            self._drop(window)
        if self.slide.count is not None:
            if window.ref >= 0 and self.length.count is not None:
                # the next window ends slide.count tuples after this one's end at least
                hi = bisect_right(self._seq, window.ref, self._lo)
                self._expire(hi + self.slide.count - self.length.count)
            elif self.length.ms is not None:
                self._expire(bisect_right(self._ts, window.end - self.length.ms, self._lo))
        else:
            self._next_end = window.end + self.slide.ms
            if self.length.ms is not None:
                self._expire(bisect_right(self._ts, self._next_end - self.length.ms, self._lo))

    def _drop(self, window: Fired[T]) -> None:
        """A failed window's tuples leave the buffer (they are failed, and replayed by their spouts)."""
        lo, hi = window.lo, window.hi
        del self._items[lo:hi], self._ts[lo:hi], self._seq[lo:hi]

    def _expire(self, upto: int) -> None:
        """Buffer positions before ``upto`` expire."""
        upto = min(upto, len(self._items))
        if upto <= self._lo:
            return
        gone = self._items[self._lo:upto]
        self._expired += gone
        self._to_ack += gone
        self._lo = upto

    def take_expired(self) -> list[T]:
        """The tuples that expired since the last call, for the caller to ack (they are listed in the next
        window's ``expired`` too)."""
        gone, self._to_ack = self._to_ack, []
        return gone


    def snapshot(self, encode: Callable[[T], Any]) -> dict[str, Any]:
        """What :meth:`restore` takes back: the buffered tuples (by ``encode``) and where the windows are."""
        lo = self._lo
        return {"items": [encode(item) for item in self._items[lo:]], "ts": self._ts[lo:], "seq": self._seq[lo:],
                "released": self._released, "since": self._since, "refs": list(self._refs),
                "nextEnd": self._next_end, "lastSeq": self._last_seq,
                "expired": [encode(item) for item in self._expired]}

    def restore(self, doc: dict[str, Any], decode: Callable[[Any], T]) -> None:
        self._items = [decode(item) for item in doc["items"]]
        self._ts, self._seq = list(doc["ts"]), list(doc["seq"])
        self._lo = 0
        self._released, self._since, self._refs = doc["released"], doc["since"], list(doc["refs"])
        self._next_end, self._last_seq = doc["nextEnd"], doc["lastSeq"]
        self._expired, self._to_ack = [decode(item) for item in doc["expired"]], []


def _align_up(ts: int, step: int) -> int:
    """The least multiple of ``step`` at or after ``ts``."""
    return -(-ts // step) * step


class EventTime(Generic[T]):
    """Storm's watermarks: per input stream the latest timestamp seen, and the watermark the least of them
    (once every input stream has sent one) less the lag, recomputed when :meth:`advance` is called and never
    going back. A tuple at or behind the watermark is late; the others wait, in timestamp order, for the
    watermark to pass them."""

    def __init__(self, streams: Iterable[Hashable], *, lag_ms: int) -> None:
        self.streams = frozenset(streams)
        self.lag_ms = lag_ms
        self.latest: dict[Hashable, int] = {}
        self.watermark: int | None = None
        self._waiting: list[tuple[int, int, T]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def snapshot(self, encode: Callable[[T], Any]) -> dict[str, Any]:
        """What :meth:`restore` takes back: the latest timestamp per stream, the watermark, what waits for it."""
        return {"latest": [[*stream, ts] for stream, ts in self.latest.items()], "watermark": self.watermark,
                "waiting": [[ts, encode(item)] for ts, _, item in sorted(self._waiting)]}

    def restore(self, doc: dict[str, Any], decode: Callable[[Any], T]) -> None:
        self.latest = {tuple(entry[:-1]): entry[-1] for entry in doc["latest"]}
        self.watermark = doc["watermark"]
        self._waiting = [(ts, seq, decode(item)) for seq, (ts, item) in enumerate(doc["waiting"])]
        self._seq = len(self._waiting)

    def add(self, stream: Hashable, ts: int, item: T) -> bool:
        """Track ``item`` of ``stream`` at ``ts``; False if it is late (it is not kept)."""
        latest = self.latest.get(stream)
        if latest is None or ts > latest:
            self.latest[stream] = ts
        if self.watermark is not None and ts <= self.watermark:
            return False
        heapq.heappush(self._waiting, (ts, self._seq, item))
        self._seq += 1
        return True

    def advance(self) -> list[tuple[int, T]]:
        """Recompute the watermark; the tuples it passed, in timestamp order (then arrival order)."""
        if len(self.latest) < len(self.streams) or not self.latest:
            return []
        candidate = min(self.latest.values()) - self.lag_ms
        if self.watermark is None or candidate > self.watermark:
            self.watermark = candidate
        released = []
        waiting = self._waiting
        while waiting and waiting[0][0] <= self.watermark:
            ts, _, item = heapq.heappop(waiting)
            released.append((ts, item))
        return released
