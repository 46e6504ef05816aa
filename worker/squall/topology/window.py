"""A windowed bolt's ``window`` in the topology spec, and what the whole topology must grant it: a message
timeout longer than a tuple stays in its windows, and, for count windows, room in max spout pending.

    window:
      length: {seconds: 300}          # or {count: 1000}
      slidingInterval: {seconds: 60}  # null: tumbling (the length)
      timestampField: ts              # event time, in ms; null: processing time
      lagSeconds: 5
      watermarkIntervalSeconds: 1.0
      lateTupleStream: late
      maxAnchors: 1000
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from pydantic import Field, model_validator

from squall.topology.model import SpecModel
from squall.values import tuple_budget
from squall.windows.manager import Extent

RESERVED_PREFIX = "__"  # stream ids Squall keeps for itself (squall.system)
MIN_TIMER_SECONDS = 0.01  # a processing-time window's clock is read no more often (a 1 ms interval: 1,000 ticks/s)


class WindowExtent(SpecModel):
    """A length or sliding interval: ``{count: n}`` tuples or ``{seconds: s}``."""

    count: int | None = Field(default=None, ge=1, description="tuples")
    seconds: float | None = Field(default=None, gt=0, description="seconds, in whole milliseconds")

    @model_validator(mode="after")
    def _one_of_them(self) -> Self:
        if (self.count is None) == (self.seconds is None):
            raise ValueError("give either count (tuples) or seconds, one of them")
        if self.seconds is not None and round(self.seconds * 1000) < 1:
            raise ValueError(f"seconds ({self.seconds:g}) must be at least 0.001: windows count whole milliseconds")
        return self

    def extent(self) -> Extent:
        return Extent(count=self.count) if self.count is not None else Extent(ms=round(self.seconds * 1000))

    def __str__(self) -> str:
        return f"{self.count} tuples" if self.count is not None else f"{self.seconds:g} s"


class WindowSpec(SpecModel):
    """A windowed bolt's windows (Storm's ``withWindow``, ``withTumblingWindow``, ``withTimestampField``,
    ``withLag``, ``withWatermarkInterval``, ``withLateTupleStream``)."""

    length: WindowExtent
    sliding_interval: WindowExtent | None = Field(default=None, description="null: tumbling (the length)")
    timestamp_field: str | None = Field(default=None, description=(
        "event time: the input field holding each tuple's timestamp, in ms; null: processing time"))
    lag_seconds: float = Field(default=0.0, ge=0, description=(
        "event time: how far a tuple's timestamp may be behind the latest one of its stream and not be late"))
    watermark_interval_seconds: float = Field(default=1.0, gt=0, le=3600, description=(
        "event time: how often the watermark is computed; processing time: how often the clock is read "
        "between tuples (a tenth of a duration sliding interval if that is shorter, but not under 10 ms)"))
    late_tuple_stream: str | None = Field(default=None, min_length=1, description=(
        "event time: the bolt's stream that gets late tuples (with their input's fields); null: they are acked "
        "and dropped"))
    max_anchors: int = Field(default=1000, ge=1, description=(
        "an emit of execute is anchored to the window's newest tuples, in at most this many spout tuple trees "
        "(each costs about 1 µs at the emit and at the ack, and 16 bytes on the wire)"))

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        slide = self.slide
        if (slide.count is None) == (self.length.count is None):
            longer = slide.count > self.length.count if slide.count is not None else slide.seconds > self.length.seconds
            if longer:
                raise ValueError(f"slidingInterval ({slide}) is longer than the window's length ({self.length}): "
                                 "tuples between windows would be in none; shorten the interval, or use a tumbling "
                                 "window (no slidingInterval)")
        if self.timestamp_field is None:
            for key, given in (("lagSeconds", self.lag_seconds), ("lateTupleStream", self.late_tuple_stream)):
                if given:
                    raise ValueError(f"{key} is for event time: set timestampField too, or remove {key}")
        if self.late_tuple_stream is not None and self.late_tuple_stream.startswith(RESERVED_PREFIX):
            raise ValueError(f"lateTupleStream {self.late_tuple_stream!r}: stream ids beginning with "
                             f"{RESERVED_PREFIX!r} are Squall's; rename it")
        return self

    @property
    def slide(self) -> WindowExtent:
        return self.sliding_interval or self.length

    @property
    def timer_seconds(self) -> float:
        """How often the bolt's tasks get a tick: the watermark's interval, or, in processing time, a tenth
        of a duration sliding interval if that is shorter (but not under 10 ms)."""
        period = self.watermark_interval_seconds
        if self.timestamp_field is None and self.slide.seconds is not None:
            period = min(period, max(self.slide.seconds / 10, MIN_TIMER_SECONDS))
        return period

    def hold_seconds(self) -> tuple[float, str] | None:
        """The longest a tuple stays in duration windows, and how that adds up: windows end at multiples of the
        sliding interval, so a tuple's last window ends less than a length after it, and fires once the
        watermark (event time) or the clock reaches its end. None for count windows: their tuples stay until
        enough others came."""
        if self.length.seconds is not None:
            parts = [(self.length.seconds, "length")]
        elif self.slide.seconds is not None:  # the last N tuples, every S seconds
            parts = [(self.slide.seconds, "slidingInterval")]
        else:
            return None
        if self.timestamp_field is not None:
            parts += [(self.lag_seconds, "lagSeconds"), (self.watermark_interval_seconds, "watermarkIntervalSeconds")]
        else:
            parts.append((self.timer_seconds, "the clock's interval"))
        return sum(s for s, _ in parts), " + ".join(name for s, name in parts if s)


def window_errors(bolts: Sequence[Any], *, message_timeout_seconds: int, max_spout_pending: int | None,
                  spout_tasks: int, max_frame_bytes: int) -> list[str]:
    """What the topology refuses of its bolts' windows, as Storm's ``WindowedBoltExecutor.validate`` does."""
    errors = []
    for bolt in bolts:
        window: WindowSpec | None = bolt.window
        if window is None:
            continue
        where = f"bolt {bolt.name!r} window"
        if bolt.tick_frequency_seconds is not None:
            errors.append(f"bolt {bolt.name!r}: a windowed bolt's ticks are its window's (every "
                          f"{window.timer_seconds:g} s); remove tickFrequencySeconds")
        if bolt.stateful:  # durable windows: a tuple is acked by the checkpoint after it, not when it leaves
            continue
        held = window.hold_seconds()
        if held is not None and held[0] > message_timeout_seconds:
            errors.append(f"{where}: a tuple stays up to {held[1]} = {held[0]:g} s in it, longer than "
                          f"messageTimeoutSeconds ({message_timeout_seconds} s): its tree would time out before its "
                          f"windows are computed, and be replayed; raise messageTimeoutSeconds to at least "
                          f"{-(-held[0] // 1):.0f} (with room for what follows the bolt), or shorten the window")
        counts = [p.count for p in (window.length, window.sliding_interval) if p is not None and p.count is not None]
        if counts and max_spout_pending is not None and sum(counts) > max_spout_pending * spout_tasks:
            errors.append(f"{where}: a count window holds up to {' + '.join(map(str, counts))} = {sum(counts):,} "
                          f"tuples unacked, but the spouts keep at most maxSpoutPending x spout tasks = "
                          f"{max_spout_pending * spout_tasks:,} trees in flight: they would stop before the "
                          "window fills, and every tree time out; raise maxSpoutPending (or set it to null), or "
                          "shorten the window")
        if tuple_budget(max_frame_bytes, "", window.max_anchors) < max_frame_bytes // 2:
            errors.append(f"{where}: maxAnchors ({window.max_anchors:,}) would take more than half of "
                          f"transfer.maxFrameBytes ({max_frame_bytes:,}) in each tuple it emits (16 bytes per "
                          "anchor); lower maxAnchors or raise maxFrameBytes")
    return errors
