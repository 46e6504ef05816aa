"""The collectors user code emits, acks and fails through (Storm's names, in snake_case)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from squall.acker.acker import ACK, FAIL, INIT, RESET, AckerMessage
from squall.api import DEFAULT_STREAM
from squall.errors import EmitError
from squall.executor.routing import Router
from squall.executor.stats import TaskStats
from squall.tuples import Tuple

if TYPE_CHECKING:
    from squall.executor.base import Executor

Anchors = Tuple | Sequence[Tuple] | None


def new_root(rng: random.Random) -> int:
    """A random 64-bit root id; 0 and 1 are reserved by the acker's table."""
    root = rng.getrandbits(64)
    while root < 2:
        root = rng.getrandbits(64)
    return root


class AckerRoute:
    """Sends acker messages to the acker task that owns a root: ``acker_tasks[root % len]``."""

    __slots__ = ("tasks", "n", "send")

    def __init__(self, acker_tasks: Sequence[int], send: Callable[[int, Any], None]) -> None:
        self.tasks = tuple(acker_tasks)
        self.n = len(self.tasks)
        self.send = send

    def __call__(self, kind: int, root: int, val: int, task: int = -1) -> None:
        self.send(self.tasks[root % self.n], AckerMessage(kind, root, val, task))


class SpoutOutputCollector:
    """Given to ``Spout.open``. ``emit`` with a ``msg_id`` starts a tracked tuple tree."""

    def __init__(self, *, executor: Executor, router: Router, stats: TaskStats, rng: random.Random,
                 acker: AckerRoute | None, on_emit: Callable[[int, Any, str], None],
                 on_untracked_ack: Callable[[Any, str], None], report: Callable[[BaseException], None]) -> None:
        self._send = executor.send
        self._router = router
        self._stats = stats
        self._rng = rng
        self._acker = acker
        self._on_emit = on_emit
        self._on_untracked_ack = on_untracked_ack
        self._report = report
        self.emits = 0

    def emit(self, values: Sequence[Any], *, stream: str = DEFAULT_STREAM, msg_id: Any = None) -> list[int]:
        """Emit ``values`` on ``stream``; returns the task ids they were sent to."""
        values = list(values)
        fields = self._router.stream(stream, values)
        return self._emit(self._router.targets(stream, values), values, fields, stream, msg_id)

    def emit_direct(self, task: int, values: Sequence[Any], *, stream: str = DEFAULT_STREAM,
                    msg_id: Any = None) -> list[int]:
        """Emit to one task of a bolt that consumes ``stream`` with a direct grouping."""
        values = list(values)
        fields = self._router.stream(stream, values)
        return self._emit(self._router.direct_target(stream, task), values, fields, stream, msg_id)

    def _emit(self, targets: list[int], values: list[Any], fields, stream: str, msg_id: Any) -> list[int]:
        self.emits += 1
        src, task_id, send = self._router.component, self._router.task_id, self._send
        if msg_id is not None and self._acker is not None:
            getrandbits = self._rng.getrandbits
            root = new_root(self._rng)
            ack_val = 0
            for t in targets:  # hot path: one edge id per receiving task
                edge = getrandbits(64)
                ack_val ^= edge
                send(t, Tuple(values, fields, src, stream, task_id, {root: edge}, t))
            self._on_emit(root, msg_id, stream)
            self._acker(INIT, root, ack_val, task_id)
        else:
            for t in targets:
                send(t, Tuple(values, fields, src, stream, task_id, {}, t))
            if msg_id is not None:
                self._on_untracked_ack(msg_id, stream)  # ackers = 0: acked as soon as emitted
        self._stats.emitted[stream] += 1
        self._stats.transferred[stream] += len(targets)
        return targets

    def report_error(self, exc: BaseException) -> None:
        """Record an error for this component (throttled; always logged)."""
        self._report(exc)


class OutputCollector:
    """Given to ``Bolt.prepare``: emit (anchored or not), ack, fail and reset_timeout."""

    def __init__(self, *, executor: Executor, router: Router, stats: TaskStats, rng: random.Random,
                 acker: AckerRoute | None, report: Callable[[BaseException], None],
                 clock: Callable[[], float]) -> None:
        self._send = executor.send
        self._router = router
        self._stats = stats
        self._rng = rng
        self._acker = acker
        self._report = report
        self._clock = clock

    def emit(self, values: Sequence[Any], *, anchors: Anchors = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit ``values``; anchored to ``anchors`` (a tuple or a list), they join those tuples' trees."""
        values = list(values)
        fields = self._router.stream(stream, values)
        return self._emit(self._router.targets(stream, values), values, fields, stream, anchors)

    def emit_direct(self, task: int, values: Sequence[Any], *, anchors: Anchors = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        values = list(values)
        fields = self._router.stream(stream, values)
        return self._emit(self._router.direct_target(stream, task), values, fields, stream, anchors)

    def _emit(self, targets: list[int], values: list[Any], fields, stream: str, anchors: Anchors) -> list[int]:
        src, task_id, send = self._router.component, self._router.task_id, self._send
        if anchors is None or self._acker is None:
            anchors = ()
        elif isinstance(anchors, Tuple):
            anchors = (anchors,)
        getrandbits = self._rng.getrandbits
        for t in targets:
            ids: dict[int, int] = {}
            for anchor in anchors:
                if anchor.anchors:
                    edge = getrandbits(64)
                    anchor.ack_val ^= edge
                    for root in anchor.anchors:
                        ids[root] = ids.get(root, 0) ^ edge
            send(t, Tuple(values, fields, src, stream, task_id, ids, t))
        self._stats.emitted[stream] += 1
        self._stats.transferred[stream] += len(targets)
        return targets

    def ack(self, tup: Tuple) -> None:
        """The tuple is fully processed by this bolt: its edges (and its children's) go to the acker."""
        if tup.done:
            return
        tup.done = True
        if self._acker is not None:
            for root, edge in tup.anchors.items():
                self._acker(ACK, root, edge ^ tup.ack_val)
        self._stats.acked[tup.source_stream] += 1
        if tup.received:
            self._stats.process_latency[(tup.source_component, tup.source_stream)].observe(self._clock() - tup.received)

    def fail(self, tup: Tuple) -> None:
        """Fail the tuple: every spout tuple tree it belongs to fails and its spout's ``fail`` is called."""
        if tup.done:
            return
        tup.done = True
        if self._acker is not None:
            for root in tup.anchors:
                self._acker(FAIL, root, 0)
        self._stats.failed[tup.source_stream] += 1

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the message timeout of every tree the tuple belongs to (for slow work)."""
        if self._acker is not None:
            for root in tup.anchors:
                self._acker(RESET, root, 0)

    def report_error(self, exc: BaseException) -> None:
        self._report(exc)


class BasicOutputCollector:
    """Given to ``BasicBolt.execute``: emits are anchored to the input tuple being executed."""

    __slots__ = ("_out", "input")

    def __init__(self, out: OutputCollector) -> None:
        self._out = out
        self.input: Tuple | None = None

    def emit(self, values: Sequence[Any], *, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out.emit(values, anchors=self.input, stream=stream)

    def emit_direct(self, task: int, values: Sequence[Any], *, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out.emit_direct(task, values, anchors=self.input, stream=stream)

    def reset_timeout(self) -> None:
        if self.input is None:
            raise EmitError("reset_timeout is only valid inside execute")
        self._out.reset_timeout(self.input)

    def report_error(self, exc: BaseException) -> None:
        self._out.report_error(exc)
