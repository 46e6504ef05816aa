"""The spout executor: calls ``next_tuple`` while there is room, and turns the acker's verdicts
and timeouts into ``ack(msg_id)`` / ``fail(msg_id)`` calls."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from squall.acker.acker import ACK, FAIL, Notification
from squall.api import Spout
from squall.executor.base import Executor, SetupRetries, Transfer
from squall.executor.collectors import SpoutCollector
from squall.executor.hdr import HdrHistogram
from squall.executor.rotating import RotatingMap
from squall.executor.stats import Histogram, TaskStats
from squall.topology.spec import SpoutWait
from squall.tuples import Tuple

log = logging.getLogger("squall.spout")

SPOUT_BUCKETS = 2  # a tree times out after (T, 2T], as in Storm
BURST = 32  # next_tuple calls per task per scheduler round, while it keeps emitting and within BURST_SECONDS
# A spout's turn ends after the call that took it past this: a slow or blocking next_tuple then gets one
# call a round, and verdicts, bolts and timeouts their turns in between (a source that blocked 5 s a
# call held its worker for BURST × 5 s). Far above a healthy burst (32 calls took 0.1 ms), so that one
# is never cut, not even by a GIL switch to another thread in the middle of it.
BURST_SECONDS = 0.01
_NO_ARG = object()


class WaitStrategy:
    """Storm's progressive wait: after n idle calls, how long before calling ``next_tuple`` again."""

    def __init__(self, conf: SpoutWait) -> None:
        self.level1 = conf.level1_count
        self.level2 = conf.level1_count + conf.level2_count
        self.sleep = conf.level3_sleep_ms / 1000

    def delay(self, idle: int) -> float:
        if idle <= self.level1:
            return 0.0  # retry in the next round
        if idle <= self.level2:
            return 1e-6  # a yield: other executors and I/O threads run first
        return self.sleep


class SpoutTask:
    """One spout task of an executor: its instance, counters, collector and trees in flight."""

    __slots__ = ("task_id", "spout", "stats", "collector", "pending", "idle", "wake", "untracked_acks", "opened")

    def __init__(self, task_id: int, spout: Spout, stats: TaskStats) -> None:
        self.task_id = task_id
        self.spout = spout
        self.stats = stats
        self.collector: SpoutCollector | None = None
        self.pending = 0  # trees in flight
        self.idle = 0  # next_tuple calls in a row that emitted nothing
        self.wake = 0.0  # when next_tuple may be called again (the wait strategy)
        self.untracked_acks: list[tuple[Any, str]] = []
        self.opened = False  # its open() returned: only then is it polled, activated and closed


class PendingTree:
    """A tree in flight: the task that emitted it, its message id and stream, when it was emitted."""

    __slots__ = ("task", "msg_id", "stream", "start")

    def __init__(self, task: SpoutTask, msg_id: Any, stream: str, start: float) -> None:
        self.task = task
        self.msg_id = msg_id
        self.stream = stream
        self.start = start


class SpoutExecutor(Executor):
    kind = "spout"

    def __init__(self, *, component: str, tasks: tuple[int, ...], transfer: Transfer, max_pending: int | None,
                 wait: WaitStrategy, clock: Callable[[], float], report: Callable[[BaseException, int], None]) -> None:
        super().__init__(component=component, tasks=tasks, transfer=transfer)
        self.tasks: dict[int, SpoutTask] = {}
        self.pending = RotatingMap(SPOUT_BUCKETS)
        self.max_pending = max_pending
        self.wait = wait
        self.clock = clock
        self.report = report
        self.active = False  # the runtime activates spouts once the process is ready
        self.opens: dict[int, Callable[[], None]] = {}
        self.retries = SetupRetries(component, "open", log)
        #: exactly once: each task's side of the checkpoints that reach it (task id → its ``checkpoint(tuple)``)
        self.checkpoints: dict[int, Any] = {}

    def add_task(self, task: SpoutTask, open_: Callable[[], None]) -> None:
        self.tasks[task.task_id] = task
        self.opens[task.task_id] = open_

    def on_emit(self, task: SpoutTask) -> Callable[[int, Any, str], None]:
        def track(root: int, msg_id: Any, stream: str) -> None:
            task.pending += 1
            self.pending.put(root, PendingTree(task, msg_id, stream, self.clock()))
        return track

    def start(self) -> None:
        now = self.clock()
        for task in self.tasks.values():  # a spout whose open raises is reported and retried; the others go on
            self._open(task, now)

    def _open(self, task: SpoutTask, now: float) -> None:
        """Call the task's open(). If it raises, the task is not polled, activated or closed until a later
        call returns (its state is half-built: each next_tuple would only report what that breaks,
        thousands of times a second, burying the one error that says why), and is called again at its
        wake, after a growing wait."""
        task.opened = self._call(task, self.opens[task.task_id])
        if not task.opened:
            task.wake = self.retries.failed(task.task_id, now)
            return
        task.wake = now
        if self.retries.returned(task.task_id) and self.active:
            self._call(task, task.spout.activate)

    def stop(self) -> None:
        for task in self.tasks.values():
            if task.opened:  # close is for what open built
                self._call(task, task.spout.close)
        for checkpointed in self.checkpoints.values():
            checkpointed.close()

    def _call(self, task: SpoutTask, fn: Callable[..., None], arg: Any = _NO_ARG) -> bool:
        """Run user code, ``fn()`` or ``fn(arg)``; an exception is reported instead of killing the executor,
        and False returned. (One optional argument, not ``*args``: compiled, this is then a C call, about
        three times a tree.)"""
        try:
            if arg is _NO_ARG:
                fn()
            else:
                fn(arg)
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            self.report(exc, task.task_id)
            return False
        return True

    def set_active(self, active: bool) -> None:
        if active == self.active:
            return
        self.active = active
        for task in self.tasks.values():
            if task.opened:
                self._call(task, task.spout.activate if active else task.spout.deactivate)

    def _settle(self, tree: PendingTree, acked: bool, timed_out: bool = False) -> None:
        task = tree.task
        task.pending -= 1
        if acked:
            task.stats.acked.add(tree.stream)
            latency = self.clock() - tree.start
            buckets: Histogram = task.stats.complete_latency[tree.stream]
            buckets.observe(latency)
            recorded: HdrHistogram = task.stats.complete_recorded[tree.stream]
            recorded.record(latency)
            self._call(task, task.spout.ack, tree.msg_id)
        else:
            (task.stats.timed_out if timed_out else task.stats.failed).add(tree.stream)
            self._call(task, task.spout.fail, tree.msg_id)

    def rotate(self) -> None:
        """Called every message timeout: trees pending for two rotations have timed out. The verdicts and
        resets that reached the inbox before count first: a tree reset while a slow bolt held the
        scheduler thread, or acked just before, does not time out."""
        self._take_verdicts()
        for tree in self.pending.rotate().values():
            self._settle(tree, False, True)  # acked, timed_out: positional, so compiled it is a C call

    def _take_verdicts(self) -> bool:
        """Apply the ACK, FAIL and RESET notes in the inbox; whether there were any."""
        inbox = self.inbox
        if not inbox:
            return False
        while inbox:
            item = inbox.popleft()
            if type(item) is Tuple:  # exactly once, the checkpoint spout's tuples reach the spouts
                self.checkpoints[item.task].checkpoint(item)
                continue
            note: Notification = item
            if note.kind == ACK or note.kind == FAIL:
                tree = self.pending.pop(note.root)
                if tree is not None:  # None: it timed out already; a late ack never turns into an ack
                    self._settle(tree, note.kind == ACK)  # acked
            else:
                self.pending.touch(note.root)
        return True

    def run_once(self, now: float) -> bool:
        # Verdicts are always taken in, even under backpressure: they are what frees pending slots.
        progress = self._take_verdicts()
        if self.overflow and not self.flush():
            return progress
        if not self.active:
            return progress
        limited, limit = self.max_pending is not None, self.max_pending or 0
        clock = self.clock
        began = clock()  # its own turn's start: bolts that ran first this round do not shorten it
        for task in self.tasks.values():
            if task.wake > now:
                continue
            if not task.opened:
                self._open(task, now)
                continue
            for _ in range(BURST):
                if limited and task.pending >= limit:
                    break
                before = task.collector.emits
                self._call(task, task.spout.next_tuple)
                if task.untracked_acks:
                    self._ack_untracked(task)
                if task.collector.emits == before:
                    task.idle += 1
                    task.wake = now + self.wait.delay(task.idle)
                    break
                task.idle = 0
                progress = True
                if self.overflow:
                    return progress
                if clock() - began >= BURST_SECONDS:  # a slow next_tuple: the others' turns come first
                    break
        return progress

    def _ack_untracked(self, task: SpoutTask) -> None:
        acks, task.untracked_acks = task.untracked_acks, []
        for msg_id, stream in acks:
            task.stats.acked.add(stream)
            self._call(task, task.spout.ack, msg_id)

    def wake_at(self) -> float | None:
        if not self.active or self.overflow:
            return None
        wakes = [t.wake for t in self.tasks.values()
                 if self.max_pending is None or t.pending < self.max_pending]
        return min(wakes) if wakes else None
