"""The bolt executor: runs ``execute`` on input tuples while its sends are not backed up."""

from __future__ import annotations

import logging
from collections.abc import Callable

from squall.api import BasicBolt, Bolt
from squall.errors import FailedException, ReportedFailedException
from squall.executor.base import Executor, SetupRetries, Transfer
from squall.executor.collectors import BasicCollector, BoltCollector, HeldCount
from squall.executor.stats import SAMPLE_EVERY, TaskStats
from squall.tuples import Tuple

log = logging.getLogger("squall.bolt")

# A round takes a bolt's tuples in chunks of BUDGET, one more while the round has lasted under SLICE:
# a fast bolt drains what an upstream burst queued (a spout's 32 sentences make 256 words for the next
# bolt; at 64 a round, they waited whole rounds, until max spout pending's queue stood in front of it
# even at 60 % load), while a slow one cannot starve the other executors.
BUDGET = 64
SLICE = 0.001  # seconds
# A bolt whose timed execute took a SLICE or more is slow for SLOW_FOR seconds from then (a fast one timed
# meanwhile, of a bolt with mixed latencies, does not end it): its rounds read the clock after every
# tuple, or 64 tuples of a bolt taking a second each kept the loop (and its heartbeat, /healthz) still.
SLOW_FOR = 10.0


class BoltTask:
    """One bolt task of an executor: its instance, counters and collector."""

    __slots__ = ("task_id", "bolt", "stats", "collector", "basic")

    def __init__(self, task_id: int, bolt: Bolt | BasicBolt, stats: TaskStats, collector: BoltCollector,
                 basic: BasicCollector | None) -> None:
        self.task_id = task_id
        self.bolt = bolt
        self.stats = stats
        self.collector = collector
        self.basic = basic  # set for a BasicBolt


class BoltExecutor(Executor):
    kind = "bolt"

    def __init__(self, *, component: str, tasks: tuple[int, ...], transfer: Transfer, held: HeldCount,
                 clock: Callable[[], float], report: Callable[[BaseException, int], None]) -> None:
        super().__init__(component=component, tasks=tasks, transfer=transfer)
        self.held = held
        self.tasks: dict[int, BoltTask] = {}
        self.clock = clock
        self.report = report
        self.prepares: dict[int, Callable[[], None]] = {}
        self.unprepared = SetupRetries(component, "prepare", log)
        self.countdown = 1  # the first tuple is timed: a slow bolt is known from its first execute
        self.slow_until = float("-inf")

    def add_task(self, task: BoltTask, prepare: Callable[[], None]) -> None:
        self.tasks[task.task_id] = task
        self.prepares[task.task_id] = prepare

    def start(self) -> None:
        now = self.clock()
        for task_id in self.tasks:  # a bolt whose prepare raises is reported and retried; the others go on
            self._prepare(task_id, now)

    def _prepare(self, task_id: int, now: float) -> None:
        """Call the task's prepare(); if it raises, again after a growing wait (meanwhile its inputs are
        executed as they come, and what execute raises fails them)."""
        try:
            self.prepares[task_id]()
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            self.report(exc, task_id)
            self.unprepared.failed(task_id, now)
            return
        self.unprepared.returned(task_id)

    def wake_at(self) -> float | None:
        waits = self.unprepared.waits
        return min(retry.retry_at for retry in waits.values()) if waits else None

    def stop(self) -> None:
        for task in self.tasks.values():
            if task.task_id in self.unprepared.waits:  # nothing to clean up, and its state may be half-built
                continue
            try:
                task.bolt.cleanup()
            except Exception as exc:  # noqa: BLE001 - user code may raise anything
                self.report(exc, task.task_id)

    def run_once(self, now: float) -> bool:
        if self.unprepared.waits:
            for task_id, retry in list(self.unprepared.waits.items()):
                if retry.due(now):
                    self._prepare(task_id, now)
        if self.overflow and not self.flush():
            return False
        inbox, tasks, clock, held = self.inbox, self.tasks, self.clock, self.held
        if not inbox:
            return False
        for task in tasks.values():
            if task.collector.paused:
                return False
        n = 0
        began = clock()
        step = 1 if began < self.slow_until else BUDGET
        limit = step
        popleft = inbox.popleft  # looked up once a round, not once a tuple
        while inbox and not self.overflow:
            if n == limit:  # a chunk done: the clock says whether the round takes another
                if clock() - began >= SLICE:
                    break
                limit += step
            tup: Tuple = popleft()
            n += 1
            task = tasks[tup.task]
            if tup.tracked():
                held.n += 1  # a tracked input, until the bolt acks or fails it
            task.stats.executed.add_pair(tup.source_component, tup.source_stream)
            self.countdown -= 1
            if self.countdown:
                self._execute(task, tup)
            else:
                self.countdown = SAMPLE_EVERY
                start = tup.received = clock()
                self._execute(task, tup)
                took = clock() - start
                task.stats.execute_latency[(tup.source_component, tup.source_stream)].observe(took, SAMPLE_EVERY)
                if took >= SLICE:  # the round ends at the next clock reading, one tuple from now
                    self.slow_until = start + SLOW_FOR
                    limit, step = n, 1
            if task.collector.paused:  # it takes no more input (see OutputCollector.paused)
                break
        share = (clock() - began) / len(tasks)
        for task in tasks.values():  # capacity is an executor's busy share; its tasks split it evenly
            task.stats.busy_seconds += share
        return True

    def _execute(self, task: BoltTask, tup: Tuple) -> None:
        basic = task.basic
        try:
            if basic is None:
                task.bolt.execute(tup)
                return
            basic.input = tup
            try:
                task.bolt.execute(tup, basic)
            finally:
                basic.input = None
            task.collector.ack(tup)
        except FailedException as exc:
            if isinstance(exc, ReportedFailedException):
                self.report(exc, task.task_id)
            if not tup.done:  # the bolt's own ack or fail stands: only an undecided input is failed for it
                task.collector.fail(tup)
        except Exception as exc:  # noqa: BLE001 - a bolt's exception fails its input, the worker goes on
            self.report(exc, task.task_id)
            if not tup.done:
                task.collector.fail(tup)
