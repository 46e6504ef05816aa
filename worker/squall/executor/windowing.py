"""The bolts whose class is a :class:`~squall.windows.WindowedBolt` (Storm's ``WindowedBoltExecutor``): each
task's inputs go to its :class:`~squall.windows.manager.WindowManager`, its ticks advance the watermark or
read the clock, and each window due is computed by the bolt's ``execute``; the task acks a tuple once no
later window can hold it, and fails the tuples of a window whose ``execute`` raised.

Only windowed bolts run here; every other bolt's path is :class:`~squall.executor.bolt.BoltExecutor`'s.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from squall.errors import FailedException, ReportedFailedException
from squall.executor.bolt import BoltTask
from squall.executor.checkpointing import AnchoringCollector, CheckpointedTask, CheckpointingBoltExecutor, in_background
from squall.executor.collectors import BoltCollector
from squall.state.kv import KeyValueState
from squall.state.stores import open_store
from squall.system import CHECKPOINT_STREAM
from squall.topology.context import TaskContext
from squall.topology.window import WindowSpec
from squall.tuples import Fields, Tuple
from squall.windows.api import Window
from squall.windows.manager import EventTime, Fired, WindowManager


class WindowCollector(AnchoringCollector):
    """A windowed bolt's collector: inside ``execute``, its :attr:`anchors` are the window's tuples (its
    newest, in ``max_anchors`` trees); a tuple is acked when it leaves the last window that can hold it."""

    def fail(self, tup: Tuple) -> None:
        """Failed now: its spout replays it. It stays in the windows, but no emit is anchored to it."""
        self._out.fail(tup)
        if isinstance(self.anchors, list) and tup in self.anchors:
            self.anchors = [t for t in self.anchors if t is not tup]


STATE_KEY = "window"  # a durable window's key in its task's state


class WindowedTask:
    """One task's windows. ``clock``: the runtime's (seconds); processing time stamps tuples with it, in
    milliseconds from the epoch (read once, then following ``clock``, so a driven clock drives windows).

    ``durable``: the windows are checkpointed (Storm 2's persistent windowing): the task is a stateful one of
    the checkpoint protocol (:class:`~squall.executor.checkpointing.CheckpointedTask` calls the hooks below as
    a ``StatefulBolt``'s), its tuples are acked by the commit after them rather than when they expire, and a
    restarted task resumes its windows from the last commit. ``fields(component, stream)``: a stream's fields,
    for the tuples it restores."""

    def __init__(self, *, window: WindowSpec, bolt: Any, out: BoltCollector, inputs: Sequence[tuple[str, str]],
                 clock: Callable[[], float], report: Callable[[BaseException], None], task: int = 0,
                 durable: bool = False, fields: Callable[[str, str], Fields] | None = None) -> None:
        self.spec = window
        self.task = task
        self.durable = durable
        self.fields = fields
        self.state: KeyValueState | None = None
        self.stale = False  # rolled back: the windows are restored from the state before they are used
        self.bolt = bolt
        self.out = out
        self.collector = WindowCollector(out)
        self.report = report
        self.inputs = inputs
        self.field = window.timestamp_field
        self._fresh_windows()
        self.late_stream = window.late_tuple_stream
        self.max_anchors = window.max_anchors
        self._clock = clock
        self._epoch = time.time() - clock()

    def _fresh_windows(self) -> None:
        window = self.spec
        self.manager: WindowManager[Tuple] = WindowManager(length=window.length.extent(), slide=window.slide.extent())
        self.event: EventTime[Tuple] | None = None
        if self.field is not None:
            self.event = EventTime(self.inputs, lag_ms=round(window.lag_seconds * 1000))

    def now_ms(self) -> int:
        return int((self._epoch + self._clock()) * 1000)

    def add(self, tup: Tuple) -> None:
        """An input tuple: into the windows, or, in event time and behind the watermark, to the late stream."""
        if self.stale:
            self._restore()
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
            if self.late_stream is not None:
                self.out.emit(tup.values, anchors=tup, stream=self.late_stream)
            self.out.ack(tup)

    def tick(self) -> None:
        """The window's timer: in event time the watermark advances and releases what it passed; in
        processing time the clock is read. Then the windows due fire."""
        if self.stale:
            self._restore()
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
        if not tuples or self.durable:  # a durable window's tuples are acked by the commit after them
            return
        ack = self.out.ack
        for tup in tuples:
            ack(tup)  # a tuple the bolt failed stays failed


    # -- a durable window's side of the checkpoint protocol (a StatefulBolt's hooks) ---------------------

    def init_state(self, state: KeyValueState) -> None:
        self.state = state
        self._restore()

    def pre_prepare(self, txid: int) -> None:
        if self.stale:
            self._restore()
        assert self.state is not None
        encode = _encode
        doc = {"windows": self.manager.snapshot(encode)}
        if self.event is not None:
            doc["eventTime"] = self.event.snapshot(encode)
        self.state.put(STATE_KEY, doc)

    def pre_commit(self, txid: int) -> None:
        """The windows were put in the state at the prepare."""

    def pre_rollback(self) -> None:
        # the state goes back to its last commit after this call: the windows follow it before their next use
        self.stale = True

    def _restore(self) -> None:
        """The windows as the state last committed them (none yet: empty); their tuples are tracked by no tree
        now (the commit acked them)."""
        self.stale = False
        self._fresh_windows()
        doc = self.state.get(STATE_KEY) if self.state is not None else None
        if doc is None:
            return
        assert self.fields is not None
        fields, task = self.fields, self.task

        def decode(item: list[Any]) -> Tuple:
            component, stream, source, values = item
            return Tuple(values, fields(component, stream), component, stream, source, {}, task)
        self.manager.restore(doc["windows"], decode)
        if self.event is not None and "eventTime" in doc:
            self.event.restore(doc["eventTime"], decode)


def _encode(tup: Tuple) -> list[Any]:
    return [tup.source_component, tup.source_stream, tup.source_task, tup.values]


class WindowedBoltExecutor(CheckpointingBoltExecutor):
    """The executor of a windowed bolt's tasks (in a topology with stateful bolts, it forwards checkpoints as
    every bolt does)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.windowed: dict[int, WindowedTask] = {}

    def add_windowed(self, task: BoltTask, *, window: WindowSpec, inputs: Sequence[tuple[str, str]],
                     conf: dict[str, Any], context: TaskContext, durable: bool = False) -> Callable[[], None]:
        """Register ``task``'s windows; returns its prepare, which hands the bolt its window collector (and,
        ``durable``, opens the task's store)."""
        cache: dict[tuple[str, str], Fields] = {}

        def fields(component: str, stream: str) -> Fields:
            if (component, stream) not in cache:
                cache[(component, stream)] = Fields(context.get_component_output_fields(component, stream))
            return cache[(component, stream)]

        windowed = self.windowed[task.task_id] = WindowedTask(
            window=window, bolt=task.bolt, out=task.collector, inputs=inputs, clock=self.clock,
            report=lambda exc: self.report(exc, task.task_id), task=task.task_id, durable=durable, fields=fields)
        if not durable:
            return lambda: task.bolt.prepare(dict(conf), context, windowed.collector)
        store = functools.partial(open_store, conf, topology=context.topology_name, component=self.component,
                                  task=task.task_id)

        def prepare_durable() -> None:
            checkpointed = self.checkpointed[task.task_id]
            if not checkpointed.stateful:
                # The runtime made it a task that only forwards checkpoints (its bolt is no StatefulBolt): its
                # windows are the state, with the same barrier.
                checkpointed = self.checkpointed[task.task_id] = CheckpointedTask(
                    barrier=checkpointed.barrier, collector=task.collector, bolt=windowed, open_store=store,
                    run=functools.partial(self._add, task),
                    submit=in_background(task.collector, f"commit-{task.task_id}"))
            checkpointed.open()
            task.bolt.prepare(dict(conf), context, windowed.collector)
        return prepare_durable

    def _execute(self, task: BoltTask, tup: Tuple) -> None:
        if tup.source_stream == CHECKPOINT_STREAM:
            CheckpointingBoltExecutor._execute(self, task, tup)
            return
        windowed = self.windowed[task.task_id]
        if windowed.durable and not tup.is_tick:
            self.checkpointed[task.task_id].execute(tup)  # held until the state is initialized, acked at a commit
        elif not windowed.durable or self.checkpointed[task.task_id].initialized:
            self._add(task, tup)

    def _add(self, task: BoltTask, tup: Tuple) -> None:
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
