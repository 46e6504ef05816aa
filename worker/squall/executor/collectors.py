"""The collectors user code emits, acks and fails through: Squall's implementations of the protocols
:class:`squall.api.SpoutOutputCollector`, :class:`~squall.api.OutputCollector` and
:class:`~squall.api.BasicOutputCollector`, which carry the user documentation."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from squall.acker.acker import ACK, FAIL, INIT, RESET
from squall.api import Anchors
from squall.errors import EmitError
from squall.executor.routing import Router
from squall.executor.stats import SAMPLE_EVERY, TaskStats
from squall.system import DEFAULT_STREAM
from squall.topology.assignment import acker_shares
from squall.tuples import ACKED, FAILED, Fields, Tuple
from squall.values import ANCHORS_IN_ROOM

if TYPE_CHECKING:
    from squall.executor.base import Executor

# splitmix64's constants (Steele, Lea and Flood; Vigna's variant). Compiled, these and the state are C
# uint64s and arithmetic wraps by itself; interpreted, masking with _MASK does the same.
_MASK = 0xFFFFFFFFFFFFFFFF
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


class EdgeIds:
    """Random 64-bit edge ids, one per tuple sent in a tracked tree: splitmix64 from a seed drawn from
    ``os.urandom``. Compiled, an id is a few C operations; ``random.getrandbits(64)`` built a Python
    int and the XOR unpacked it again, on every emit. Its ids are as random as XOR acking needs: the
    generator passes BigCrush and repeats no id within 2**64 of them."""

    __slots__ = ("_state",)

    def __init__(self, seed: int | None = None) -> None:
        self._state = int.from_bytes(os.urandom(8), "little") if seed is None else seed & _MASK

    def next(self) -> int:
        self._state = (self._state + _GAMMA) & _MASK
        z = self._state
        z = ((z ^ (z >> 30)) * _MIX1) & _MASK
        z = ((z ^ (z >> 27)) * _MIX2) & _MASK
        return z ^ (z >> 31)


def root_of(draw: int, n: int, k: int) -> int:
    """The root id a 64-bit ``draw`` gives for acker ``k`` of ``n`` (``root % n == k``), or 0 when the
    draw is refused: its root would pass 2**64 - 1, or be 0 or 1, which the acker's table reserves."""
    base = draw - draw % n
    if base > _MASK - k:
        return 0
    root = base + k
    return root if root >= 2 else 0


def new_root(ids: EdgeIds, n: int, residues: tuple[int, ...]) -> int:
    """A random 64-bit root id whose acker, ``root % n``, is one of ``residues``, drawn from ``ids`` as
    the tree's edge ids are (Storm draws both from one generator too)."""
    k = residues[0] if len(residues) == 1 else residues[ids.next() % len(residues)]
    while True:
        root = root_of(ids.next(), n, k)
        if root:
            return root


class AckerRoute:
    """Where acker messages go: the acker task that owns a root is ``tasks[root % n]``, as in Storm.

    A spout task draws the roots of its trees for its own share of the ackers (``residues``,
    :func:`~squall.topology.assignment.acker_shares`), so an acker's verdicts go to the workers of its
    spout tasks only, not to every worker: between N workers and N ackers, N verdict links carry frames
    instead of N² (each frame costs the processes at both ends far more than the verdicts in it;
    docs/performance.md).
    """

    __slots__ = ("tasks", "n", "residues")

    def __init__(self, acker_tasks: Sequence[int], spout_tasks: Sequence[int]) -> None:
        self.tasks = tuple(acker_tasks)
        self.n = len(self.tasks)
        self.residues: dict[int, tuple[int, ...]] = acker_shares(self.n, tuple(sorted(spout_tasks)))


class HeldCount:
    """Tracked input tuples this process's bolts have received and not yet acked or failed, counted per
    tuple (a tuple may be acked through another task's collector): a draining worker waits for 0."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class SpoutCollector:
    """A spout task's :class:`squall.api.SpoutOutputCollector`."""

    def __init__(self, *, executor: Executor, router: Router, stats: TaskStats,
                 acker: AckerRoute | None, on_emit: Callable[[int, Any, str], None],
                 on_untracked_ack: Callable[[Any, str], None], report: Callable[[BaseException], None]) -> None:
        self._executor = executor
        self._router = router
        self._stats = stats
        self._ids = EdgeIds()
        self._acker = acker
        self._residues = acker.residues[router.task_id] if acker is not None else ()
        self._on_emit = on_emit
        self._on_untracked_ack = on_untracked_ack
        self._report = report
        self.emits = 0

    def emit(self, values: Sequence[Any], *, stream: str = DEFAULT_STREAM, msg_id: Any = None) -> list[int]:
        values = list(values)
        targets = self._router.route(stream, values)
        return self._emit(targets, values, self._router.routed, stream, msg_id)

    def emit_direct(self, task: int, values: Sequence[Any], *, stream: str = DEFAULT_STREAM,
                    msg_id: Any = None) -> list[int]:
        values = list(values)
        fields, targets = self._router.direct_route(stream, task, values)
        return self._emit(targets, values, fields, stream, msg_id)

    def _emit(self, targets: list[int], values: list[Any], fields: Fields, stream: str, msg_id: Any) -> list[int]:
        self.emits += 1
        src, task_id, executor = self._router.component, self._router.task_id, self._executor
        acker = self._acker
        if msg_id is not None and acker is not None:
            ids = self._ids
            root = new_root(ids, acker.n, self._residues)
            ack_val = 0
            for t in targets:  # hot path: one edge id per receiving task
                edge = ids.next()
                ack_val ^= edge
                executor.send(t, Tuple.make(values, fields, src, stream, task_id, root, edge, None, t))
            self._on_emit(root, msg_id, stream)
            executor.send_message(acker.tasks[root % acker.n], INIT, root, ack_val, task_id)
        else:
            for t in targets:
                executor.send(t, Tuple.make(values, fields, src, stream, task_id, None, 0, None, t))
            if msg_id is not None:
                self._on_untracked_ack(msg_id, stream)  # ackers = 0: acked as soon as emitted
        self._stats.emitted.add(stream)
        self._stats.transferred.add(stream, len(targets))
        return targets

    def report_error(self, exc: BaseException) -> None:
        self._report(exc)


def _not_a_tuple(call: str, value: object) -> TypeError:
    return TypeError(f"{call} takes a Tuple the bolt received, not {type(value).__name__}")


class BoltCollector:
    """A bolt task's :class:`squall.api.OutputCollector`."""

    def __init__(self, *, executor: Executor, router: Router, stats: TaskStats,
                 acker: AckerRoute | None, report: Callable[[BaseException], None],
                 clock: Callable[[], float], post: Callable[[Callable[[], None]], None], held: HeldCount) -> None:
        self._executor = executor
        self._post = post
        self.paused = False  # see squall.api.OutputCollector.paused
        self._held = held
        self._router = router
        self._stats = stats
        self._acked = stats.acked
        self._ids = EdgeIds()
        self._acker = acker
        self._report = report
        self._clock = clock

    def emit(self, values: Sequence[Any], *, anchors: Anchors = None, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._route_and_emit(list(values), anchors, stream)

    def emit_direct(self, task: int, values: Sequence[Any], *, anchors: Anchors = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        values = list(values)
        fields, targets = self._router.direct_route(stream, task, values)
        return self._emit(targets, values, fields, stream, anchors)

    def _route_and_emit(self, values: list[Any], anchors: Anchors, stream: str) -> list[int]:
        targets = self._router.route(stream, values)
        return self._emit(targets, values, self._router.routed, stream, anchors)

    def _emit(self, targets: list[int], values: list[Any], fields: Fields, stream: str, anchors: Anchors) -> list[int]:
        src, task_id, executor = self._router.component, self._router.task_id, self._executor
        one = None  # the one anchor, if there is one: the common case, taken without a sequence of it
        if type(anchors) is Tuple:
            one = anchors
            if one.done:
                raise self._anchored_to_decided(one, stream)
        elif anchors is not None:
            for anchor in anchors:
                if type(anchor) is not Tuple:  # compiled, a None typed as a Tuple would be read as one
                    raise _not_a_tuple("emit(anchors=...)", anchor)
                if anchor.done:
                    raise self._anchored_to_decided(anchor, stream)
            if len(anchors) == 1:
                one = anchors[0]
        if self._acker is None:
            one = anchors = None
        if one is not None and one.root is not None:
            # One anchor in one tree: one edge id per receiving task, no dict merging.
            ids = self._ids
            root = one.root
            for t in targets:
                edge = ids.next()
                one.ack_val ^= edge
                executor.send(t, Tuple.make(values, fields, src, stream, task_id, root, edge, None, t))
        else:
            many = (anchors,) if type(anchors) is Tuple else (anchors or ())
            trees = 0
            for anchor in many:
                trees += 1 if anchor.trees is None else len(anchor.trees)
            if trees > ANCHORS_IN_ROOM:  # their ids take room in the tuple's frame, counted before any is drawn
                self._check_room(stream, values, many, trees)
            for t in targets:
                executor.send(t, Tuple.anchored(values, fields, src, stream, task_id, self._edges(many), t))
        self._stats.emitted.add(stream)
        self._stats.transferred.add(stream, len(targets))
        return targets

    def _anchored_to_decided(self, anchor: Tuple, stream: str) -> EmitError:
        """A child would join a tree whose edges went to the acker already."""
        return EmitError(f"component {self._router.component!r} emitted on stream {stream!r} anchored to a "
                         f"tuple it has already {'acked' if anchor.done == ACKED else 'failed'} ({anchor!r}); "
                         "emit anchored before acking or failing the input, or emit unanchored")

    def _check_room(self, stream: str, values: list[Any], anchors: Sequence[Tuple], trees: int) -> None:
        """Raise unless ``values`` fit a frame beside the ids of ``anchors``' trees, ``trees`` of them at most.
        The distinct trees are counted only if that many do not fit: a batch's rows, each anchored to its
        10,000 inputs, built a set of their roots per row (bench/HISTORY.md, "Anchoring a batch")."""
        try:
            self._router.check(stream, values, trees)
        except EmitError:
            self._router.check(stream, values, len({root for anchor in anchors for root in anchor.roots()}))

    def _edges(self, anchors: Sequence[Tuple]) -> dict[int, int]:
        """A new child's ids: per anchor a fresh edge id, xor-ed into each of the anchor's trees."""
        edges: dict[int, int] = {}
        ids = self._ids
        for anchor in anchors:
            root = anchor.root
            if root is not None:  # one tree: the common case, without a list of its roots
                edge = ids.next()
                anchor.ack_val ^= edge
                prior = edges.get(root)
                edges[root] = edge if prior is None else prior ^ edge
            elif anchor.trees is not None:
                edge = ids.next()
                anchor.ack_val ^= edge
                for root in anchor.trees:
                    edges[root] = edges.get(root, 0) ^ edge
        return edges

    def ack(self, tup: Tuple) -> None:
        if type(tup) is not Tuple:  # compiled, a None typed as a Tuple would be read as one
            raise _not_a_tuple("ack()", tup)
        if tup.done:  # a second ack changes nothing; after a fail, the fail stands
            return
        tup.done = ACKED
        acker = self._acker
        root = tup.root
        if root is not None:  # one tree: the common case
            self._held.n -= 1
            if acker is not None:
                at = root  # the tree's acker in C arithmetic, compiled
                self._executor.send_message(acker.tasks[at % acker.n], ACK, root, tup.edge ^ tup.ack_val, -1)
        elif tup.trees is not None:
            self._held.n -= 1
            if acker is not None:
                executor, tasks, n, ack_val = self._executor, acker.tasks, acker.n, tup.ack_val
                for root, edge in tup.trees.items():
                    at = root
                    executor.send_message(tasks[at % n], ACK, root, edge ^ ack_val, -1)
        self._acked.add(tup.source_stream)
        if tup.received:  # set on sampled tuples only (see BoltExecutor)
            self._stats.process_latency[(tup.source_component, tup.source_stream)].observe(
                self._clock() - tup.received, SAMPLE_EVERY)

    def fail(self, tup: Tuple) -> None:
        # A fail after an ack still fails the tuple's trees (Storm's way): while a tree is pending at
        # its acker, a fail always wins, so a bolt can force a replay of what it already acked.
        if type(tup) is not Tuple:
            raise _not_a_tuple("fail()", tup)
        if tup.done == FAILED:
            return
        if tup.tracked() and not tup.done:
            self._held.n -= 1
        tup.done = FAILED
        acker = self._acker
        if acker is not None:
            for root in tup.roots():
                self._executor.send_message(acker.tasks[root % acker.n], FAIL, root, 0, -1)
        self._stats.failed.add(tup.source_stream)

    def reset_timeout(self, tup: Tuple) -> None:
        if type(tup) is not Tuple:
            raise _not_a_tuple("reset_timeout()", tup)
        acker = self._acker
        if acker is not None:
            for root in tup.roots():
                self._executor.send_message(acker.tasks[root % acker.n], RESET, root, 0, -1)

    def report_error(self, exc: BaseException) -> None:
        self._report(exc)

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - user code may raise anything
                self._report(exc)

        self._post(guarded)


class BasicCollector:
    """A BasicBolt task's :class:`squall.api.BasicOutputCollector`: emits anchor to the input."""

    __slots__ = ("_out", "input")

    def __init__(self, out: BoltCollector) -> None:
        self._out = out
        self.input: Tuple | None = None

    def emit(self, values: Sequence[Any], *, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out._route_and_emit(list(values), self.input, stream)

    def emit_direct(self, task: int, values: Sequence[Any], *, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out.emit_direct(task, values, anchors=self.input, stream=stream)

    def reset_timeout(self) -> None:
        if self.input is None:
            raise EmitError("reset_timeout is only valid inside execute")
        self._out.reset_timeout(self.input)

    def report_error(self, exc: BaseException) -> None:
        self._out.report_error(exc)
