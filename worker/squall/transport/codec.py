"""Frames on the wire: protobuf envelopes, tuple values in msgpack, acker traffic as columns.

Decoding never executes anything from the network (no pickle, no msgpack extension types) and
checks every tuple against the plan: a frame that fails any check raises :class:`FrameError`.
"""

from __future__ import annotations

import reprlib
import sys
from array import array
from collections.abc import Callable
from typing import Any

import msgpack

from squall.acker.acker import INIT, RESET, AckBatch, AckerMessage, Notification, notification
from squall.proto.squall_pb2 import AckerColumns, Batch, Congestion, TupleColumns, VerdictColumns
from squall.topology.plan import Plan
from squall.tuples import Fields, Tuple
from squall.values import unsupported

# Column item types (array codes), all little-endian on the wire: kind, root and value, spout task.
U8, U32, U64, I32 = "B", "I", "Q", "i"
assert array(U64).itemsize == 8 and array(I32).itemsize == 4 and array(U32).itemsize == 4
_SWAP = sys.byteorder == "big"
_TIMESTAMP = msgpack.Timestamp  # the type msgpack decodes ext type -1 to, without asking ext_hook


class FrameError(ValueError):
    """A frame that cannot be decoded or does not fit the topology."""


def _no_ext(code: int, data: bytes) -> Any:
    raise FrameError(f"msgpack extension type {code} is not allowed")


def _shown(value: Any) -> str:
    """A value from the network as an error names it: a repr cut short, in length and in depth (a plain
    repr of a list nested 1,000 deep raised RecursionError instead of naming the field)."""
    return reprlib.repr(value)


def tuple_columns(tuples: list[Tuple]) -> TupleColumns:
    """Tuples as a frame carries them: columns of routes, values and anchors (see squall.proto)."""
    n = len(tuples)
    pairs = 0
    for t in tuples:
        if t.root is not None:
            pairs += 1
        elif t.trees is not None:
            pairs += len(t.trees)
    # Columns sized up front and filled in place: no Python int per id, no list to convert (compiled,
    # index, anchored, roots and edges are typed views of the arrays)
    index_column, anchored_column = array(U32, bytes(4 * n)), array(U32, bytes(4 * n))
    root_column, edge_column = array(U64, bytes(8 * pairs)), array(U64, bytes(8 * pairs))
    index, anchored, roots, edges = index_column, anchored_column, root_column, edge_column
    routes: dict[tuple[int, int, str], int] = {}
    values = []
    last_task = last_source = -1
    last_stream = None
    at = k = 0
    for i in range(n):
        t = tuples[i]
        if t.task != last_task or t.source_task != last_source or t.source_stream != last_stream:
            last_task, last_source, last_stream = t.task, t.source_task, t.source_stream
            key = (last_task, last_source, last_stream)
            at = routes.setdefault(key, len(routes))
        index[i] = at
        values.append(t.values)
        if t.root is not None:
            anchored[i] = 1
            roots[k] = t.root
            edges[k] = t.edge
            k += 1
        elif t.trees is not None:
            anchored[i] = len(t.trees)
            for root, edge in t.trees.items():
                roots[k] = root
                edges[k] = edge
                k += 1
    return TupleColumns(routes=msgpack.packb(list(routes)), route=_bytes(index_column),
                        values=msgpack.packb(values), anchored=_bytes(anchored_column), root=_bytes(root_column),
                        edge=_bytes(edge_column))


def encode_tuples(tuples: list[Tuple]) -> bytes:
    return Batch(tuples=tuple_columns(tuples)).SerializeToString()


def _bytes(column: array) -> bytes:
    """A column's items, little-endian."""
    if _SWAP:
        column.byteswap()
    return column.tobytes()


def _column(code: str, values: Any) -> bytes:
    return _bytes(array(code, values))


def _array(code: str, raw: bytes, name: str) -> array:
    column = array(code)
    if len(raw) % column.itemsize:
        raise FrameError(f"column {name!r} is not a whole number of {column.itemsize}-byte values")
    column.frombytes(raw)
    if _SWAP:
        column.byteswap()
    return column


def _values(code: str, raw: bytes, name: str) -> list[int]:
    return _array(code, raw, name).tolist()


def encode_acker(messages: list[AckerMessage]) -> bytes:
    kinds, roots, vals, tasks = zip(*messages, strict=True)
    return encode_acker_columns(array(U8, kinds), array(U64, roots), array(U64, vals), array(I32, tasks))


def acker_columns(kinds: array, roots: array, vals: array, tasks: array) -> AckerColumns:
    """Acker messages as a frame's columns, from arrays of the codes ``U8``, ``U64``, ``U64``, ``I32``."""
    if _SWAP:
        for column in (kinds, roots, vals, tasks):
            column.byteswap()
    return AckerColumns(kind=kinds.tobytes(), root=roots.tobytes(), val=vals.tobytes(), task=tasks.tobytes())


def encode_acker_columns(kinds: array, roots: array, vals: array, tasks: array) -> bytes:
    return Batch(acker=acker_columns(kinds, roots, vals, tasks)).SerializeToString()


def encode_verdicts(notes: list[Notification]) -> bytes:
    kinds, roots, tasks = zip(*notes, strict=True)
    cols = VerdictColumns(kind=_column(U8, kinds), root=_column(U64, roots), task=_column(I32, tasks))
    return Batch(verdicts=cols).SerializeToString()


def encode_congestion(state: dict[int, bool]) -> bytes:
    """A process's congestion (see squall.proto's ``Congestion``): task → whether it takes no more input."""
    cols = Congestion(task=_column(I32, state), congested=_column(U8, [int(v) for v in state.values()]))
    return Batch(congestion=cols).SerializeToString()


def lost_trees(frame: bytes) -> list[tuple[int, int]]:
    """(spout task, root) of the trees a frame this process encoded carried, for failing them when it
    is dropped, each once: a tuple's roots and an ACK's, FAIL's or RESET's (spout task -1: its acker
    fails it; without the ACK the tree could only time out, and a lost RESET would let it time out
    early), an INIT's root with its spout task (that acker never heard of the tree: the spout fails
    it). Verdicts carry none: their trees time out at their spouts."""
    batch = Batch.FromString(frame)
    trees = [(-1, root) for root in _values(U64, batch.tuples.root, "root")] if batch.HasField("tuples") else []
    if batch.HasField("acker"):
        cols = batch.acker
        trees += [(task if kind == INIT else -1, root)
                  for kind, root, task in zip(cols.kind, _values(U64, cols.root, "root"),
                                              _values(I32, cols.task, "task"), strict=True)]
    return list(dict.fromkeys(trees))


def _unpack(data: bytes, name: str) -> list:
    """A msgpack array of a frame's column ``name``, with msgpack's safe types only."""
    try:
        items = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_no_ext)
    except FrameError:
        raise
    except Exception as exc:  # noqa: BLE001 - msgpack raises several types on bad input
        raise FrameError(f"{name} is not valid msgpack: {exc}") from None
    if type(items) is not list:
        raise FrameError(f"{name} must be a msgpack array")
    return items


class Decoder:
    """Turns frames into items for this process's inboxes: each tuple a :class:`Tuple` (for its
    ``task``), each acker message or verdict a ``(task, item)`` pair. A peer's congestion is no item:
    it goes to :attr:`on_congestion` as ``{task: congested}`` at once, on the receiving thread."""

    def __init__(self, plan: Plan, *, bolt_tasks: frozenset[int], spout_tasks: frozenset[int],
                 acker_tasks: frozenset[int], forwards: frozenset[int] = frozenset()) -> None:
        self.plan = plan
        self.on_congestion: Callable[[dict[int, bool]], None] | None = None
        self.spout_tasks = spout_tasks
        self.acker_task = min(acker_tasks) if acker_tasks else None
        # A worker takes acker messages only for the ackers it forwards for (Assignment.acker_homes).
        self.forwards = forwards
        # INITs may name any spout task of the topology: the acker sends that task its verdict
        self.all_spout_tasks = frozenset(plan.spout_tasks)
        # Per bolt task of this process, the (source component, stream) pairs its component subscribes
        # to: a tuple on any other stream would reach a bolt that never asked for it.
        subscribed: dict[str, set[tuple[str, str]]] = {}
        for source, subs in plan.subscribers.items():
            for sub in subs:
                subscribed.setdefault(sub.component, set()).add(source)
        self._subscribed = {task: frozenset(subscribed.get(plan.task_component[task], ())) for task in bolt_tasks}
        # exactly once, spouts take the checkpoint stream too
        self._subscribed.update({task: frozenset(subscribed[plan.task_component[task]]) for task in spout_tasks
                                 if plan.task_component[task] in subscribed})
        # (task, source task, stream) → (source component, fields): the routes seen so far; only valid ones,
        # so it holds at most one per local bolt task, source task and subscribed stream
        self._routes: dict[tuple[int, int, str], tuple[str, Fields]] = {}

    def decode(self, frame: bytes) -> list[Any]:
        try:
            batch = Batch.FromString(frame)
        except Exception as exc:  # noqa: BLE001 - the protobuf runtime raises several types
            raise FrameError(f"not a Batch protobuf: {exc}") from None
        out: list[Any] = []
        if batch.HasField("tuples"):
            out += self._tuples(batch.tuples)
        if batch.HasField("acker"):
            out += self._acker(batch.acker)
        if batch.HasField("verdicts"):
            out += self._verdicts(batch.verdicts)
        if batch.HasField("congestion"):
            self._congestion(batch.congestion)
        return out

    def _route(self, task: Any, source_task: Any, stream: Any) -> tuple[str, Fields]:
        """The source component and fields of a tuple on a route not seen yet: to a bolt task of this
        process, from a known task, on a stream it declares and the bolt subscribes to (then cached,
        so the cache only ever holds routes of the plan); FrameError naming what is wrong otherwise."""
        allowed = self._subscribed.get(task) if type(task) is int else None
        if allowed is None:
            raise FrameError(f"tuple for task {_shown(task)}, which is not a bolt task of this worker")
        component = self.plan.task_component.get(source_task) if type(source_task) is int else None
        if component is None:
            raise FrameError(f"tuple from unknown source task {_shown(source_task)}")
        if type(stream) is not str:
            raise FrameError(f"tuple from task {source_task} on stream {_shown(stream)}: a stream is a string")
        try:
            fields = self.plan.stream_fields(component, stream)
        except KeyError:
            raise FrameError(f"component {component!r} declares no stream {_shown(stream)}") from None
        if (component, stream) not in allowed:
            consumed = ", ".join(sorted(f"{c}/{s}" for c, s in allowed)) or "nothing"
            raise FrameError(f"tuple on {component}/{stream} for task {task} of bolt "
                             f"{self.plan.task_component[task]!r}, which does not subscribe to it (it consumes "
                             f"{consumed})")
        self._routes[(task, source_task, stream)] = found = (component, fields)
        return found

    def _tuples(self, cols: TupleColumns) -> list[Tuple]:
        routes = []
        for route in _unpack(cols.routes, "routes"):
            if type(route) is not list or len(route) != 3:
                raise FrameError("each route must be [task, source_task, stream]")
            task, source_task, stream = route
            if type(task) is int and type(source_task) is int and type(stream) is str:
                component, fields = self._routes.get((task, source_task, stream)) or \
                    self._route(task, source_task, stream)
            else:  # type checks first: a list would not hash
                component, fields = self._route(task, source_task, stream)  # raises FrameError
            routes.append((task, source_task, stream, component, fields))
        values = _unpack(cols.values, "values")
        index = _array(U32, cols.route, "route")
        anchored = _array(U32, cols.anchored, "anchored")
        # ids stay in their arrays: a tree's tuples come together, and share one int for its root
        roots, edges = _array(U64, cols.root, "root"), _array(U64, cols.edge, "edge")
        n, pairs = len(index), len(roots)
        if len(values) != n or len(anchored) != n or len(edges) != pairs:
            raise FrameError("tuple columns have different lengths")
        out = []
        k = 0
        root, last = None, 0
        for i in range(n):
            at = index[i]
            if at >= len(routes):
                raise FrameError(f"route {at} of a tuple is not among the frame's {len(routes)} routes")
            task, source_task, stream, component, fields = routes[at]
            vals = values[i]
            if type(vals) is not list or len(vals) != len(fields):
                raise FrameError(f"tuple on {component}/{stream} must have {len(fields)} values")
            for value in vals:  # walked as an emit's are, but only what may nest (or is a timestamp)
                kind = type(value)
                if kind is list or kind is dict or kind is _TIMESTAMP:
                    reason = unsupported(value)
                    if reason:
                        raise FrameError(f"values holds what no tuple value is: {reason}")
            c = anchored[i]
            if c > pairs - k:
                raise FrameError("tuples are anchored to more trees than the frame's root and edge columns hold")
            if c == 1:  # the common case, one tree
                r = roots[k]
                if root is None or r != last:
                    if r < 2:
                        raise FrameError("root ids 0 and 1 are reserved")
                    root = last = r
                out.append(Tuple.make(vals, fields, component, stream, source_task, root, edges[k], None, task))
                k += 1
            elif c == 0:
                out.append(Tuple.make(vals, fields, component, stream, source_task, None, 0, None, task))
            else:
                trees = {roots[j]: edges[j] for j in range(k, k + c)}
                if len(trees) != c:  # an edge would be lost, and its tree could only time out
                    raise FrameError("a tuple is anchored to one tree twice (its trees' roots must differ)")
                if min(trees) < 2:
                    raise FrameError("root ids 0 and 1 are reserved")
                out.append(Tuple.anchored(vals, fields, component, stream, source_task, trees, task))
                k += c
        if k != pairs:
            raise FrameError("the frame's root and edge columns hold pairs no tuple is anchored by")
        return out

    @staticmethod
    def _columns(cols: Any, spec: tuple[tuple[str, str], ...]) -> list[array]:
        columns = [_array(code, getattr(cols, name), name) for name, code in spec]
        if len({len(c) for c in columns}) != 1:
            raise FrameError("columns have different lengths")
        return columns

    def _acker(self, cols: AckerColumns) -> list[tuple[int, Any]]:
        if self.acker_task is None and not self.forwards:
            raise FrameError("acker messages sent to a process that neither runs nor forwards for an acker")
        kinds, roots, vals, tasks = self._columns(cols, (("kind", U8), ("root", U64), ("val", U64), ("task", I32)))
        if not kinds:
            return []
        self._check_acker(kinds, roots, tasks)
        if self.acker_task is None:
            return self._forwarded(kinds, roots, vals, tasks)
        return [(self.acker_task, AckBatch(kinds, roots, vals, tasks))]

    def _check_acker(self, kinds: Any, roots: Any, tasks: Any) -> None:
        spouts, ackers, n, mine = self.all_spout_tasks, self.plan.acker_tasks, len(self.plan.acker_tasks), \
            self.acker_task
        for i in range(len(kinds)):
            kind, task = kinds[i], tasks[i]
            if kind > RESET:
                raise FrameError(f"unknown acker message kind {kind} (0 init, 1 ack, 2 fail, 3 reset)")
            if kind == INIT:
                if task not in spouts:
                    raise FrameError(f"acker INIT names task {task}, which is not a spout task of this topology")
            elif task != -1:
                raise FrameError("only an acker INIT carries a spout task (the others carry -1)")
            if roots[i] < 2:
                raise FrameError("root ids 0 and 1 are reserved")
            if mine is not None and ackers[roots[i] % n] != mine:  # another acker tracks that tree
                raise FrameError(f"acker message for root {roots[i]}, which acker task {ackers[roots[i] % n]} "
                                 f"tracks, sent to acker task {mine}")

    def _forwarded(self, kinds: array, roots: array, vals: array, tasks: array) -> list[tuple[int, Any]]:
        """Acker messages a worker forwards to their acker: each for an acker task it is the home of."""
        ackers, n, forwards = self.plan.acker_tasks, len(self.plan.acker_tasks), self.forwards
        out = []
        for i in range(len(kinds)):
            acker = ackers[roots[i] % n]
            if acker not in forwards:
                raise FrameError(f"acker message for acker task {acker}, which this worker does not forward for")
            out.append((acker, (kinds[i], roots[i], vals[i], tasks[i])))
        return out

    def _congestion(self, cols: Congestion) -> None:
        tasks, flags = [c.tolist() for c in self._columns(cols, (("task", I32), ("congested", U8)))]
        known = self.plan.task_component
        for task, flag in zip(tasks, flags, strict=True):
            if task not in known:
                raise FrameError(f"congestion of task {task}, which is not a task of this topology")
            if flag > 1:
                raise FrameError(f"congestion flag {flag} of task {task} must be 0 (clear) or 1 (congested)")
        if self.on_congestion is not None:
            self.on_congestion(dict(zip(tasks, map(bool, flags), strict=True)))

    def _verdicts(self, cols: VerdictColumns) -> list[tuple[int, Notification]]:
        kinds, roots, tasks = [c.tolist() for c in self._columns(cols, (("kind", U8), ("root", U64), ("task", I32)))]
        out = []
        for i in range(len(kinds)):
            kind, task = kinds[i], tasks[i]
            if task not in self.spout_tasks:
                raise FrameError(f"verdict for task {task}, which is not a spout task of this worker")
            if not 1 <= kind <= 3:
                raise FrameError(f"unknown verdict kind {kind} (1 ack, 2 fail, 3 reset)")
            out.append((task, notification(kind, roots[i], task)))
        return out
