"""A process's engine: the executors assigned to it, their timers, and the loop that runs them.

All executors of a process share one scheduler thread: a tuple handed from one executor to
another in the same process is an append to a deque, never a thread hop or a serialization.
Other threads (the gRPC transport) only ever talk to the loop through :meth:`Runtime.post`.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from squall.acker.acker import FAIL, Notification
from squall.api import BasicBolt, StatefulBolt
from squall.executor.acker import AckerExecutor
from squall.executor.base import Executor, Transfer
from squall.executor.bolt import BoltExecutor, BoltTask
from squall.executor.checkpointing import CheckpointedSpout, CheckpointedTask, CheckpointingBoltExecutor, in_background
from squall.executor.collectors import AckerRoute, BasicCollector, BoltCollector, HeldCount, SpoutCollector
from squall.executor.reporting import ErrorLog, ErrorReporter
from squall.executor.routing import Router
from squall.executor.spout import SpoutExecutor, SpoutTask, WaitStrategy
from squall.executor.stats import TaskStats
from squall.executor.windowing import WindowedBoltExecutor
from squall.state.checkpoint import Barrier
from squall.state.stores import open_store
from squall.system import CHECKPOINT_COMPONENT, SYSTEM_COMPONENT, TICK_STREAM
from squall.topology.assignment import ExecutorPlan
from squall.topology.context import TaskContext
from squall.topology.plan import Plan
from squall.tuples import NO_FIELDS, Tuple

log = logging.getLogger("squall.runtime")

INGRESS_FRAMES = 4  # decoded frames buffered per lane before receivers block (backpressure)
IDLE_WAIT = 0.05  # longest sleep with nothing to do, so posted work and stop requests are seen promptly
ROTATE_PASSES = 4  # ingress deliveries before a rotation at most: frames that keep coming wait for the round


@dataclass(order=True)
class Timer:
    due: float
    seq: int
    period: float = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class Link(Protocol):
    """What the runtime needs of the transport to other processes (``squall.transport.Transport``, a
    :class:`~squall.executor.base.Remote`)."""

    def try_send(self, task: int, item: Any) -> bool: ...

    def attach(self, *, transfer: Transfer, wake: Callable[[], None], frames: int, flusher: bool) -> None: ...

    def deliver(self) -> bool: ...

    @property
    def lost(self) -> deque[tuple[int, int]]: ...

    def flush(self) -> bool: ...

    def due_in(self) -> float: ...


class Runtime:
    """Runs ``executors`` (and ``acker_tasks``) of ``plan`` in this process."""

    def __init__(self, plan: Plan, *, executors: Iterable[ExecutorPlan], acker_tasks: Iterable[int],
                 remote: Link | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        spec = plan.spec
        self.clock = clock
        self.transfer = Transfer(capacity=spec.executor_queue_size, remote=remote)
        self._held = HeldCount()
        self.errors = ErrorLog(spec.error_reporting.keep_last)
        self.stats: dict[int, TaskStats] = {}
        self.executors: list[Executor] = []
        self.spouts: list[SpoutExecutor] = []
        self.ackers: list[AckerExecutor] = []
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._posted: list[Callable[[], None]] = []
        self._posted_lock = threading.Lock()
        self._wake = threading.Event()
        # Waking a sleeping loop is a lock and a notify; most wakes find it running. Other threads
        # set _kicked, and the Event only while _sleeping (see idle_wait).
        self._kicked = False
        self._sleeping = False
        self._stop = False
        self._rng = random.Random()
        self.remote = remote
        self.heartbeat = clock()

        executors = list(executors)
        self.local_tasks = frozenset(t for e in executors for t in e.tasks)
        self._acker_route = AckerRoute(plan.acker_tasks, plan.spout_tasks) if plan.acker_tasks else None
        for task in acker_tasks:
            acker = AckerExecutor(task=task, transfer=self.transfer)
            self.ackers.append(acker)
            self.executors.append(acker)
        for ex in executors:
            self.executors.append(self._spout(ex) if ex.component in plan.spout_names else self._bolt(ex))

        if self.spouts or self.ackers:
            self.every(spec.message_timeout_seconds, self._rotate)
        for bolt in spec.bolts:
            bolt_execs = [e for e in self.executors if e.component == bolt.name]
            ticks = bolt.tick_frequency_seconds or (bolt.window.timer_seconds if bolt.window else None)
            if ticks and bolt_execs:
                self.every(ticks, functools.partial(self._tick, bolt_execs))
        if remote is not None:
            remote.attach(transfer=self.transfer, wake=self.wake, frames=INGRESS_FRAMES,
                          flusher=len(self.executors) > len(self.ackers))

    # -- building ---------------------------------------------------------------------------

    def _reporter(self, component: str) -> Callable[[BaseException, int], None]:
        conf = self.plan.spec.error_reporting
        reporter = ErrorReporter(component=component, log_=self.errors, max_per_interval=conf.max_per_interval,
                                 interval=conf.interval_seconds, clock=self.clock)

        def report(exc: BaseException, task: int) -> None:
            self.stats[task].errors += 1
            reporter.report(exc, task=task)
        return report

    def _task(self, task_id: int) -> tuple[TaskStats, TaskContext, Router]:
        """What every task gets: its counters, its context and the routes of its emits."""
        stats = self.stats[task_id] = TaskStats()
        context = TaskContext(plan=self.plan, task_id=task_id, worker_tasks=self.local_tasks)
        return stats, context, Router(plan=self.plan, context=context, rng=self._rng,
                                     inboxes=self.transfer.inboxes)

    def _spout(self, plan_ex: ExecutorPlan) -> SpoutExecutor:
        spec = self.plan.spec
        report = self._reporter(plan_ex.component)
        ex = SpoutExecutor(component=plan_ex.component, tasks=plan_ex.tasks, transfer=self.transfer,
                           max_pending=spec.max_spout_pending, wait=WaitStrategy(spec.spout_wait),
                           clock=self.clock, report=report)
        cls = self.plan.classes[plan_ex.component]
        conf = self.plan.component_config(plan_ex.component)
        for task_id in plan_ex.tasks:
            stats, context, router = self._task(task_id)
            task = SpoutTask(task_id, cls(), stats)
            task.collector = SpoutCollector(
                executor=ex, router=router, stats=stats, acker=self._acker_route,
                on_emit=ex.on_emit(task),
                on_untracked_ack=lambda msg_id, stream, t=task: t.untracked_acks.append((msg_id, stream)),
                report=lambda exc, t=task_id: report(exc, t))
            ex.add_task(task, lambda t=task, c=context: t.spout.open(dict(conf), c, t.collector))
            if spec.exactly_once and plan_ex.component != CHECKPOINT_COMPONENT:
                # counters of its own: a spout's acks count its trees, and a checkpoint is no input a bolt holds
                forward = BoltCollector(executor=ex, router=router, stats=TaskStats(), acker=self._acker_route,
                                        report=lambda exc, t=task_id: report(exc, t), clock=self.clock,
                                        post=self.post, held=HeldCount())
                ex.checkpoints[task_id] = CheckpointedSpout(
                    spout=task.spout, collector=forward,
                    open_store=functools.partial(open_store, conf, topology=spec.name, component=ex.component,
                                                 task=task_id))
        self.spouts.append(ex)
        return ex

    def _bolt(self, plan_ex: ExecutorPlan) -> BoltExecutor:
        report = self._reporter(plan_ex.component)
        plan = self.plan
        checkpointing = plan.spec.checkpointing
        spec = plan.spec.component(plan_ex.component)
        window = spec.window
        kind = WindowedBoltExecutor if window else CheckpointingBoltExecutor if checkpointing else BoltExecutor
        ex = kind(
            component=plan_ex.component, tasks=plan_ex.tasks, transfer=self.transfer, held=self._held,
            clock=self.clock, report=report)
        cls = plan.classes[plan_ex.component]
        conf = plan.component_config(plan_ex.component)
        for task_id in plan_ex.tasks:
            stats, context, router = self._task(task_id)
            collector = BoltCollector(executor=ex, router=router, stats=stats,
                                        acker=self._acker_route, report=lambda exc, t=task_id: report(exc, t),
                                        clock=self.clock, post=self.post, held=self._held)
            bolt = cls()
            basic = BasicCollector(collector) if isinstance(bolt, BasicBolt) else None
            task = BoltTask(task_id, bolt, stats, collector, basic)
            if basic is None:
                prepare = lambda b=bolt, c=context, o=collector: b.prepare(dict(conf), c, o)  # noqa: E731
            else:
                prepare = lambda b=bolt, c=context: b.prepare(dict(conf), c)  # noqa: E731
            if window:
                inputs = [(i.component, i.stream) for i in spec.inputs]
                prepare = ex.add_windowed(task, window=window, inputs=inputs, conf=conf, context=context,
                                          durable=spec.stateful)
            if checkpointing:
                prepare = self._checkpointed(ex, task, conf, context, prepare)
            ex.add_task(task, prepare)
        return ex

    def _checkpointed(self, ex: CheckpointingBoltExecutor, task: BoltTask, conf: dict[str, Any],
                      context: TaskContext, prepare: Callable[[], None]) -> Callable[[], None]:
        """The task's side of the checkpoint protocol; for a stateful bolt, the prepare that opens its store
        and hands the bolt its anchoring collector."""
        barrier = Barrier(self.plan.checkpoint_inputs[task.task_id])
        exactly_once = self.plan.spec.exactly_once
        run = functools.partial(BoltExecutor._execute, ex, task)
        if not isinstance(task.bolt, StatefulBolt):
            ex.checkpointed[task.task_id] = CheckpointedTask(barrier=barrier, collector=task.collector, bolt=task.bolt,
                                                             run=run, exactly_once=exactly_once)
            return prepare
        store = functools.partial(open_store, conf, topology=self.plan.spec.name, component=ex.component,
                                  task=task.task_id)
        checkpointed = ex.checkpointed[task.task_id] = CheckpointedTask(
            barrier=barrier, collector=task.collector, bolt=task.bolt, open_store=store, run=run,
            submit=in_background(task.collector, f"commit-{task.task_id}"), exactly_once=exactly_once)

        def prepare_stateful() -> None:
            checkpointed.open()
            task.bolt.prepare(dict(conf), context, checkpointed.collector)
        return prepare_stateful

    # -- timers and cross-thread work -------------------------------------------------------

    def every(self, period: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, Timer(self.clock() + period, next(self._seq), period, action))

    def _fail_lost(self, lost: deque[tuple[int, int]]) -> None:
        """Fail the trees of frames the transport dropped (a peer died or was replaced): a tuple's tree
        at its acker, a tree whose INIT never reached its acker at the spout itself. A FAIL that finds
        its inbox or batch full waits, with those after it, for a later round: dropped, its tree would
        wait for its timeout, and keep a draining process up that long. Those that were lost when it began
        only: a FAIL for a peer that is gone is dropped at once, and its tree lost again, so taking them as
        they came kept this loop going for ever (a draining worker whose acker had left never exited)."""
        route = self._acker_route
        for _ in range(len(lost)):
            task, root = lost[0]
            if task >= 0:
                sent = self.transfer.try_send(task, Notification(FAIL, root, task))
            else:
                sent = route is None or self.transfer.try_send(route.tasks[root % route.n], (FAIL, root, 0, -1))
            if not sent:
                return
            lost.popleft()

    def _rotate(self) -> None:
        """Every message timeout: spouts time out their oldest trees, ackers forget theirs. What reached
        this process before counts first: a RESET or a verdict on its way in (the ingress, an acker's
        inbox, a spout's) reaches its tree before the tree can time out, as a RESET queued before Storm's
        timeout tick does."""
        for _ in range(ROTATE_PASSES):  # an acker that takes in what waits makes room for more from the ingress
            moved = self.remote is not None and self.remote.deliver()
            for acker in self.ackers:
                acker.take_waiting()
            if not moved:
                break
        for spout in self.spouts:
            spout.rotate()
        for acker in self.ackers:
            acker.rotate()

    def _tick(self, executors: list[Executor]) -> None:
        # Tick tuples skip the capacity check: one per period cannot flood a queue.
        for ex in executors:
            for task in ex.task_ids:
                ex.inbox.append(Tuple([], NO_FIELDS, SYSTEM_COMPONENT, TICK_STREAM, -1, {}, task))

    def post(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the scheduler thread (thread-safe); wakes the loop."""
        with self._posted_lock:
            self._posted.append(action)
        self.wake()

    def wake(self) -> None:
        """Wake the loop from another thread (new input arrived, room in a link): the loop sees it
        before it next sleeps, or is woken if it sleeps already."""
        self._kicked = True
        if self._sleeping:
            self._wake.set()

    # -- the loop ---------------------------------------------------------------------------

    def start(self, *, active: bool = True) -> None:
        """Open every spout and prepare every bolt (on the calling thread), then activate the spouts."""
        for ex in self.executors:
            ex.start()
        if active:
            self.set_active(True)

    def step(self) -> bool:
        """One round: due timers fire, then every executor does a slice of work. Returns progress."""
        self._kicked = False  # what woke us before now is taken in by this round
        now = self.heartbeat = self.clock()
        progress = False
        if self._posted:  # before the timers: a reset_timeout posted before a due rotation counts first
            with self._posted_lock:
                posted, self._posted = self._posted, []
            for action in posted:
                action()
            progress = True
        self._fire_timers(now)
        remote = self.remote
        if remote is not None:
            # Delivered first: a peer that exits closes its own streams (their last frames are in our
            # ingress) before it stops reading ours (our frames after its count are reported as lost).
            # Its last acks, which we may forward to their acker, then go out before our FAILs for the
            # same trees, so a tree it did complete is not failed for a frame it did read.
            if remote.deliver():
                progress = True
            if remote.lost:
                self._fail_lost(remote.lost)
        for ex in self.executors:
            if ex.run_once(now):
                progress = True
        if remote is not None:
            remote.flush()
        return progress

    def _fire_timers(self, now: float) -> None:
        """Run the due timers, each at most once, with the clock just read: before the executors, so a
        round that stalled (a blocking bolt, a GC pause) delays the next rotation but never makes it fire
        on a stale clock. A late timer runs once and next runs a whole period later: missed runs are
        skipped, never caught up, so two rotations are at least a period apart and no tree times out
        less than a message timeout after its emit or its last reset."""
        timers = self._timers
        while timers and timers[0].due <= now:
            timer = heapq.heappop(timers)
            timer.action()
            timer.due = max(timer.due, now) + timer.period
            heapq.heappush(timers, timer)

    def idle_wait(self) -> None:
        """Sleep until the next timer, a spout's wait strategy expires, a batch the transport holds back
        is due, or another thread wakes us."""
        deadline = self._timers[0].due if self._timers else self.clock() + IDLE_WAIT
        for ex in self.executors:
            wake = ex.wake_at()
            if wake is not None and wake < deadline:
                deadline = wake
        delay = min(deadline - self.clock(), IDLE_WAIT)
        if self.remote is not None:
            delay = min(delay, self.remote.due_in())
        self._sleeping = True
        # a wake after the round began set _kicked: that input may have come too late for the round
        if delay > 0 and not self._kicked:
            self._wake.wait(delay)
        else:
            time.sleep(0)  # a yield, so the transport threads get the GIL
        self._sleeping = False
        self._wake.clear()

    def run(self, stop: Callable[[], bool] = lambda: False) -> None:
        """Run the loop on this thread until ``stop()`` is true or :meth:`request_stop` is called."""
        self._stop = False
        while not self._stop and not stop():
            if not self.step():
                self.idle_wait()

    def request_stop(self) -> None:
        self._stop = True
        self._wake.set()

    def set_active(self, active: bool) -> None:
        for spout in self.spouts:
            if spout.component == CHECKPOINT_COMPONENT and spout.active:
                # Deactivated, the checkpoint spout runs on until a last checkpoint has committed what the
                # stateful bolts hold, so that their inputs are acked and a drain ends (see CheckpointSpout.wind_down)
                for task in spout.tasks.values():
                    if task.opened:
                        task.spout.wind_down(not active)
                continue
            spout.set_active(active)

    def active(self) -> bool:
        """The spouts emit here (the checkpoint spout, which runs on while the topology winds down, aside)."""
        return any(spout.active for spout in self.spouts if spout.component != CHECKPOINT_COMPONENT)

    def close(self) -> None:
        """Close spouts and clean up bolts."""
        for ex in self.executors:
            ex.stop()

    # -- reading ---------------------------------------------------------------------------

    def queued(self) -> int:
        """Items waiting in this process's inboxes and overflows."""
        return sum(len(ex.inbox) + len(ex.overflow) for ex in self.executors)

    def held(self) -> int:
        """Tracked input tuples bolts have executed but not yet acked or failed."""
        return self._held.n

    def pending_trees(self) -> int:
        return sum(len(s.pending) for s in self.spouts)

    def component_stats(self, component: str) -> list[TaskStats]:
        return [self.stats[t] for t in self.plan.component_tasks.get(component, ()) if t in self.stats]
