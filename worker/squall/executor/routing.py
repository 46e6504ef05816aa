"""Where a task's emits go: for each declared output stream, the groupers of its subscribers."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sized
from typing import Any

from squall.errors import EmitError
from squall.grouping import Grouper, Locality, make_grouper
from squall.topology.context import TaskContext
from squall.topology.plan import Plan
from squall.tuples import NO_FIELDS, Fields
from squall.values import INT_MAX, INT_MIN, SCALAR_BYTES, SCALAR_TYPES, check_values, tuple_budget, utf8_size

try:
    import cython

    _COMPILED = cython.compiled
except ImportError:  # interpreted, with no Cython installed (a SQUALL_PURE_PYTHON=1 install)
    _COMPILED = False


def _wire_size(text: str) -> int:
    """:func:`squall.values.utf8_size` of ``text``; compiled, in one C call that reads an ASCII str's own
    characters (and keeps a non-ASCII one's UTF-8 in it, which msgpack then reuses)."""
    if _COMPILED:
        size = 0
        try:
            PyUnicode_AsUTF8AndSize(text, cython.address(size))  # noqa: F821 (routing.pxd)
        except UnicodeEncodeError:
            return -1
        return size
    return utf8_size(text)


class DirectOnly(Grouper):
    """The grouper of a direct stream for a plain ``emit``: refuses it (its tuples need a target task)."""

    __slots__ = ("message",)

    def __init__(self, component: str, stream: str) -> None:
        self.message = (f"component {component!r} called emit on stream {stream!r}, which is direct; "
                        f"use emit_direct(task, values, stream={stream!r})")

    def choose(self, values: list[Any]) -> list[int]:
        raise EmitError(self.message)


class Router:
    """One task's outgoing routes. ``targets`` validates the values and picks the destination tasks.

    ``inboxes``: the inboxes of this process's tasks, which its locality-aware shuffles watch.
    """

    def __init__(self, *, plan: Plan, context: TaskContext, rng: random.Random,
                 inboxes: Mapping[int, Sized]) -> None:
        self.component = context.component_id
        self.task_id = context.task_id
        self.max_value_bytes = plan.spec.transfer.max_value_bytes
        self.max_frame = plan.spec.transfer.max_frame_bytes
        self.fields: dict[str, Fields] = {}
        # per stream, the bytes of str and bytes values under which a tuple surely fits a frame, whatever
        # its other values (each of them, or a str's or bytes' header, takes at most SCALAR_BYTES)
        self.budgets: dict[str, int] = {}
        self.groupers: dict[str, list[Any]] = {}
        self.direct: dict[str, frozenset[int]] = {}
        aware = plan.spec.locality_aware
        locality = Locality(inboxes, plan.spec.executor_queue_size, aware.higher_bound, aware.lower_bound) \
            if aware.enabled else None
        for stream in plan.outputs[self.component]:
            fields = plan.stream_fields(self.component, stream)
            self.fields[stream] = fields
            self.budgets[stream] = tuple_budget(self.max_frame, stream) - SCALAR_BYTES * len(fields)
            subs = plan.subscribers.get((self.component, stream), [])
            groupers = [make_grouper(s, source=(self.component, stream), fields=fields, task_id=self.task_id,
                                     local_tasks=context.worker_tasks, context=context, rng=rng, locality=locality)
                        for s in subs]
            if plan.outputs[self.component][stream].direct:
                self.groupers[stream] = [DirectOnly(self.component, stream)]
            else:
                self.groupers[stream] = [g for g in groupers if g is not None]
            self.direct[stream] = frozenset(
                t for s, g in zip(subs, groupers, strict=True) if g is None for t in s.tasks)
        # the stream route() saw last, its fields and its groupers
        self._stream: str | None = None
        self.routed = NO_FIELDS
        self._groupers: list[Any] = []
        self._budget = 0

    def route(self, stream: str, values: list[Any]) -> list[int]:
        """Check ``values`` against the stream's fields and choose the receiving tasks (the hot path);
        :attr:`routed` is then that stream's fields."""
        if stream is not self._stream:  # a task emits on one stream tuple after tuple, the same str
            fields = self.fields.get(stream)
            if fields is None:
                raise self._undeclared(stream)
            self._stream, self.routed, self._groupers = stream, fields, self.groupers[stream]
            self._budget = self.budgets[stream]
        fields = self.routed
        limit = self.max_value_bytes
        if len(values) != len(fields.names):
            self.check(stream, values)
        total = 0
        for value in values:
            kind = type(value)
            if kind is str:  # its UTF-8 bytes count (the wire's), and a lone surrogate is refused
                size = _wire_size(value)
                if 0 <= size <= limit:
                    total += size
                    continue
            elif kind is bytes:
                size = len(value)
                if size <= limit:
                    total += size
                    continue
            elif kind is float or kind is int and INT_MIN <= value <= INT_MAX or kind in SCALAR_TYPES:
                continue
            self.check(stream, values)  # the whole tuple: its types, each value's size and their total
            break
        else:
            if total > self._budget:
                self.check(stream, values)
        groupers = self._groupers
        if len(groupers) == 1:
            grouper = groupers[0]
            return grouper.choose(values)
        targets: list[int] = []
        for grouper in groupers:
            targets.extend(grouper.choose(values))
        return targets

    def direct_route(self, stream: str, task: int, values: list[Any]) -> tuple[Fields, list[int]]:
        fields = self.fields.get(stream)
        if fields is None:
            raise self._undeclared(stream)
        self.check(stream, values)
        return fields, self.direct_target(stream, task)

    def check(self, stream: str, values: list[Any], anchors: int = 0) -> None:
        """Raise :class:`EmitError` unless ``values`` may go on ``stream`` (a declared one), anchored to
        ``anchors`` trees (0: no more than a frame has room for): their fields and types, each one's size
        and their total, which must fit a frame in every mode, for a tuple that runs in one process to run
        across processes."""
        check_values(values, fields=self.fields[stream].names, component=self.component, stream=stream,
                     max_bytes=self.max_value_bytes, max_frame=self.max_frame, anchors=anchors)

    def _undeclared(self, stream: str) -> EmitError:
        return EmitError(f"component {self.component!r} emitted on stream {stream!r}, which it does not "
                         f"declare (declared: {', '.join(self.fields) or 'none'}); add it to outputs")

    def direct_target(self, stream: str, task: int) -> list[int]:
        allowed = self.direct[stream]
        if task not in allowed:
            if not any(type(g) is DirectOnly for g in self.groupers[stream]):
                raise EmitError(f"component {self.component!r}: emit_direct on stream {stream!r}, which is not "
                                "direct; use emit on it, or declare it with squall.direct(...) and subscribe "
                                "with grouping type 'direct'")
            if not allowed:
                raise EmitError(f"component {self.component!r}: emit_direct on direct stream {stream!r}, which no "
                                "bolt subscribes to; subscribe one with grouping type 'direct'")
            raise EmitError(f"component {self.component!r}: emit_direct to task {task}, which does not consume "
                            f"stream {stream!r} with a direct grouping (tasks that do: {sorted(allowed)})")
        return [task]
