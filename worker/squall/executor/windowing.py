"""The bolts whose class is a :class:`~squall.windows.WindowedBolt` (Storm's ``WindowedBoltExecutor``): each
task's inputs go to its :class:`~squall.windows.manager.WindowManager`, its ticks advance the watermark or
read the clock, and each window due is computed by the bolt's ``execute``; the task acks a tuple once no
later window can hold it, and fails the tuples of a window whose ``execute`` raised.

Only windowed bolts run here; every other bolt's path is :class:`~squall.executor.bolt.BoltExecutor`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from squall.api import Anchors
from squall.errors import FailedException, ReportedFailedException
from squall.executor.bolt import BoltTask
from squall.executor.checkpointing import CheckpointingBoltExecutor
from squall.executor.collectors import BoltCollector
from squall.system import CHECKPOINT_STREAM, DEFAULT_STREAM
from squall.topology.window import WindowSpec
from squall.tuples import Tuple
from squall.windows.api import Window
from squall.windows.manager import EventTime, Fired, WindowManager


class WindowCollector:
    """A windowed bolt's :class:`squall.api.OutputCollector`: inside ``execute``, an emit without anchors is
    anchored to the window's tuples (its newest, in ``max_anchors`` trees); ``ack`` leaves a tuple to its
    windows."""

    def __init__(self, out: BoltCollector) -> None:
        self._out = out
        self.anchors: list[Tuple] | None = None  # the window being computed's

    def emit(self, values: Sequence[Any], *, anchors: Anchors = None, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out.emit(values, anchors=self.anchors if anchors is None else anchors, stream=stream)

    def emit_direct(self, task: int, values: Sequence[Any], *, anchors: Anchors = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out.emit_direct(task, values, anchors=self.anchors if anchors is None else anchors,
                                     stream=stream)

    def ack(self, tup: Tuple) -> None:
        """Acked when it leaves the last window that can hold it, not now."""

    def fail(self, tup: Tuple) -> None:
        """Failed now: its spout replays it. It stays in the windows, but no emit is anchored to it."""
        self._out.fail(tup)
        if self.anchors is not None and tup in self.anchors:
            self.anchors = [t for t in self.anchors if t is not tup]

    def reset_timeout(self, tup: Tuple) -> None:
        self._out.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        self._out.report_error(exc)

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        self._out.call_soon_threadsafe(fn)

    @property
    def paused(self) -> bool:
        return self._out.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._out.paused = value


class WindowedTask:
    """One task's windows. ``clock``: the runtime's (seconds); processing time stamps tuples with it, in
    milliseconds from the epoch (read once, then following ``clock``, so a driven clock drives windows)."""

    def __init__(self, *, window: WindowSpec, bolt: Any, out: BoltCollector, inputs: Sequence[tuple[str, str]],
                 clock: Callable[[], float], report: Callable[[BaseException], None]) -> None:
        self.spec = window
        self.bolt = bolt
        self.out = out
        self.collector = WindowCollector(out)
        self.report = report
        self.manager: WindowManager[Tuple] = WindowManager(length=window.length.extent(),
                                                           slide=window.slide.extent())
        self.field = window.timestamp_field
        self.event: EventTime[Tuple] | None = None
        if self.field is not None:
            self.event = EventTime(inputs, lag_ms=round(window.lag_seconds * 1000))
        self.late_stream = window.late_tuple_stream
        self.max_anchors = window.max_anchors
        self.late = 0  # late tuples seen
        self._clock = clock
        self._epoch = time.time() - clock()

    def now_ms(self) -> int:
        return int((self._epoch + self._clock()) * 1000)

    def add(self, tup: Tuple) -> None:
        """An input tuple: into the windows, or, in event time and behind the watermark, to the late stream."""
        event = self.event
        if event is None:
            now = self.now_ms()
            manager = self.manager
            manager.release(tup, now)
            if manager.due(now - 1):  # a window ending now may still get tuples of this millisecond
                self._fire(now - 1)
            return
        ts = tup[self.field]
        if type(ts) is float:
            ts = int(ts)
        elif type(ts) is not int:
            raise TypeError(f"timestampField {self.field!r} of {tup!r} is {ts!r}, not milliseconds (an int)")
        if not event.add((tup.source_component, tup.source_stream), ts, tup):
            self.late += 1
            if self.late_stream is not None:
                self.out.emit(tup.values, anchors=tup, stream=self.late_stream)
            self.out.ack(tup)

    def tick(self) -> None:
        """The window's timer: in event time the watermark advances and releases what it passed; in
        processing time the clock is read. Then the windows due fire."""
        event = self.event
        if event is None:
            self._fire(self.now_ms() - 1)
            return
        for ts, tup in event.advance():
            self.manager.release(tup, ts)
        self._fire(event.watermark)

    def _fire(self, watermark: int | None) -> None:
        manager = self.manager
        while True:
            window = manager.next_window(watermark)
            self._ack(manager.take_expired())
            if window is None:
                return
            self._compute(window)

    def _compute(self, fired: Fired[Tuple]) -> None:
        tuples = fired.tuples
        collector = self.collector
        collector.anchors = self._anchors(tuples)
        failed = False
        try:
            self.bolt.execute(Window(tuples, fired.new, fired.expired, fired.start, fired.end))
        except FailedException as exc:
            if isinstance(exc, ReportedFailedException):
                self.report(exc)
            failed = True
        except Exception as exc:  # noqa: BLE001 - a bolt's exception fails its window, the worker goes on
            self.report(exc)
            failed = True
        finally:
            collector.anchors = None
        self.manager.computed(fired, failed=failed)
        if failed:
            out = self.out
            for tup in tuples:
                out.fail(tup)
        self._ack(self.manager.take_expired())

    def _anchors(self, tuples: list[Tuple]) -> list[Tuple]:
        """The window's newest tuples, as many as belong to at most ``max_anchors`` trees together (a tuple
        carries an id per tree into what is anchored to it; most belong to one), those the bolt failed and
        those no tree tracks left out."""
        budget = self.max_anchors
        anchors = []
        for tup in reversed(tuples):
            if tup.done:
                continue
            trees = 1 if tup.root is not None else len(tup.trees) if tup.trees is not None else 0
            if trees > budget:
                break
            if trees:
                budget -= trees
                anchors.append(tup)
        anchors.reverse()
        return anchors

    def _ack(self, tuples: list[Tuple]) -> None:
        if not tuples:
            return
        ack = self.out.ack
        for tup in tuples:
            ack(tup)  # a tuple the bolt failed stays failed


class WindowedBoltExecutor(CheckpointingBoltExecutor):
    """The executor of a windowed bolt's tasks (in a topology with stateful bolts, it forwards checkpoints as
    every bolt does)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.windowed: dict[int, WindowedTask] = {}

    def add_windowed(self, task: BoltTask, *, window: WindowSpec, inputs: Sequence[tuple[str, str]],
                     conf: dict[str, Any], context: Any) -> Callable[[], None]:
        """Register ``task``'s windows; returns its prepare, which hands the bolt its window collector."""
        windowed = self.windowed[task.task_id] = WindowedTask(
            window=window, bolt=task.bolt, out=task.collector, inputs=inputs, clock=self.clock,
            report=lambda exc: self.report(exc, task.task_id))
        return lambda: task.bolt.prepare(dict(conf), context, windowed.collector)

    def _execute(self, task: BoltTask, tup: Tuple) -> None:
        if tup.source_stream == CHECKPOINT_STREAM:
            CheckpointingBoltExecutor._execute(self, task, tup)
            return
        windowed = self.windowed[task.task_id]
        try:
            if tup.is_tick:
                windowed.tick()
            else:
                windowed.add(tup)
        except Exception as exc:  # noqa: BLE001 - a bad timestamp: reported, and the tuple failed
            self.report(exc, task.task_id)
            if not tup.done:
                task.collector.fail(tup)
