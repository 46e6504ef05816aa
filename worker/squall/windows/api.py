"""What a windowed bolt's author uses: :class:`WindowedBolt`, the :class:`Window` its ``execute`` gets, and
the lengths of windows, :class:`Count` and :class:`Duration` (Storm's ``BaseWindowedBolt``, ``TupleWindow``,
``Count`` and ``Duration``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from squall.api import Component, OutputCollector, TopologyContext
from squall.tuples import Tuple


@dataclass(frozen=True)
class Count:
    """A window's length or sliding interval in tuples: ``Count(100)``."""

    n: int

    def __post_init__(self) -> None:
        if type(self.n) is not int or self.n < 1:
            raise ValueError(f"Count({self.n!r}): a count of tuples is a whole number of 1 or more")

    def to_dict(self) -> dict[str, Any]:
        """The spec's form: ``{"count": n}``."""
        return {"count": self.n}


@dataclass(frozen=True, init=False)
class Duration:
    """A window's length or sliding interval in time: ``Duration(minutes=5)``, ``Duration(seconds=1.5)``;
    held as whole milliseconds (``ms``), at least one."""

    ms: int

    def __init__(self, *, hours: float = 0, minutes: float = 0, seconds: float = 0, milliseconds: float = 0) -> None:
        ms = round(((hours * 60 + minutes) * 60 + seconds) * 1000 + milliseconds)
        if ms < 1:
            raise ValueError("a Duration is at least one millisecond")
        object.__setattr__(self, "ms", ms)

    @property
    def seconds(self) -> float:
        return self.ms / 1000

    def to_dict(self) -> dict[str, Any]:
        """The spec's form: ``{"seconds": s}``."""
        return {"seconds": self.seconds}

    def __repr__(self) -> str:
        return f"Duration(seconds={self.seconds:g})"


class Window:
    """The tuples of one window, oldest first (in event time, by timestamp), as ``execute`` gets it.

    ``start_timestamp`` and ``end_timestamp`` are milliseconds (since the epoch in processing time; in the
    timestamp field's terms in event time): a duration window holds the tuples of ``(start, end]``; a
    count window's start is None and its end is its last tuple's timestamp (or, fired by a duration
    sliding interval, the time it fired for). The lists are the window's own: read them, don't change them.
    """

    __slots__ = ("_tuples", "_new", "_expired", "start_timestamp", "end_timestamp")

    def __init__(self, tuples: list[Tuple], new: list[Tuple], expired: list[Tuple], start: int | None,
                 end: int) -> None:
        self._tuples, self._new, self._expired = tuples, new, expired
        self.start_timestamp = start
        self.end_timestamp = end

    def get(self) -> list[Tuple]:
        """Every tuple in the window."""
        return self._tuples

    def get_new(self) -> list[Tuple]:
        """The tuples not in the previous window."""
        return self._new

    def get_expired(self) -> list[Tuple]:
        """The tuples that left the windows since the previous one (they are acked already)."""
        return self._expired

    def __iter__(self) -> Iterator[Tuple]:
        return iter(self._tuples)

    def __len__(self) -> int:
        return len(self._tuples)

    def __repr__(self) -> str:
        return f"Window({len(self._tuples)} tuples, start={self.start_timestamp}, end={self.end_timestamp})"


class WindowedBolt(Component):
    """A bolt that computes over windows of its input (Storm's ``BaseWindowedBolt``): ``execute`` gets a
    :class:`Window` each time one is due. Declare its window with the bolt: ``window:`` in YAML, or
    ``TopologyBuilder.set_bolt(...).with_window(Duration(minutes=5), Duration(minutes=1))``.

    Squall acks each input tuple once it has left every window that can hold it, and fails the tuples of a
    window whose ``execute`` raised. ``collector.emit`` inside ``execute`` anchors to the window's tuples
    (see docs/windows.md for the cost and its cap); ``collector.ack`` does nothing (the window acks)::

        >>> class Clicks(WindowedBolt):
        ...     outputs = ["clicks", "end"]
        ...     def execute(self, window):
        ...         self.collector.emit([len(window), window.end_timestamp])
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        """Called once before the first ``execute``; keeps ``conf``, ``context`` and ``collector``."""
        self.conf, self.context, self.collector = conf, context, collector

    def execute(self, window: Window) -> None:
        """Compute over ``window``; emit with ``self.collector``."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(window)")

    def cleanup(self) -> None:
        """Called at shutdown (not guaranteed when the process is killed)."""
