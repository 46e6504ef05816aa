"""The tuple: named values flowing on a stream, plus the ids that tie it into its spout tuple's tree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from squall.system import SYSTEM_COMPONENT, TICK_STREAM

PENDING, ACKED, FAILED = 0, 1, 2  # Tuple.done: what the bolt has said of the tuple so far


class Fields:
    """An ordered list of field names with O(1) lookup of a field's index."""

    __slots__ = ("names", "_index")

    def __init__(self, names: list[str] | tuple[str, ...]) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self._index = {name: i for i, name in enumerate(self.names)}

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no field {name!r}; the stream declares: {', '.join(self.names) or '(none)'}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fields) and other.names == self.names

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"Fields({list(self.names)!r})"


NO_FIELDS = Fields(())


class Tuple:
    """A tuple received by a bolt.

    ``values`` holds the values in declared order; ``tup["word"]`` reads one by field name.
    ``anchors`` maps each root id of a spout tuple tree this tuple belongs to onto the tuple's
    edge id in that tree (empty when the tuple is not tracked). ``ack_val`` accumulates the
    edge ids of the children anchored to it, sent to the acker when the tuple is acked.

    A tuple of one tree, nearly every tracked tuple, keeps that tree's ids as ``root`` and ``edge``
    rather than in a dict of its own; one of several trees keeps them in ``trees``.
    """

    __slots__ = ("values", "fields", "source_component", "source_stream", "source_task", "root", "edge",
                 "trees", "task", "ack_val", "done", "received")

    def __init__(self, values: list[Any], fields: Fields, source_component: str, source_stream: str,
                 source_task: int, anchors: dict[int, int], task: int = 0) -> None:
        self.values = values
        self.fields = fields
        self.source_component = source_component
        self.source_stream = source_stream
        self.source_task = source_task
        self.root, self.edge, self.trees = _ids(anchors)
        self.task = task  # the receiving task
        self.ack_val = 0
        self.done = PENDING  # ACKED or FAILED once the bolt said so (a fail after an ack still fails)
        self.received = 0.0  # when execute started, for the process latency

    @staticmethod
    def make(values: list[Any], fields: Fields, source_component: str, source_stream: str, source_task: int,
             root: int | None, edge: int, trees: dict[int, int] | None, task: int) -> Tuple:
        """``Tuple(...)`` for the hot paths (emits, decoding): compiled, the fields are stored directly
        instead of through a call of the class and its ``__init__``. ``root`` and ``edge``: the ids of
        a tuple of one tree, else ``root`` None and ``trees`` those of a tuple of several (see
        :meth:`anchored`), or None."""
        tup = Tuple.__new__(Tuple)
        tup.values = values
        tup.fields = fields
        tup.source_component = source_component
        tup.source_stream = source_stream
        tup.source_task = source_task
        tup.root = root
        tup.edge = edge
        tup.trees = trees
        tup.task = task
        tup.ack_val = 0
        tup.done = PENDING
        tup.received = 0.0
        return tup

    @staticmethod
    def anchored(values: list[Any], fields: Fields, source_component: str, source_stream: str, source_task: int,
                 anchors: dict[int, int], task: int) -> Tuple:
        """:meth:`make` for a tuple with ``anchors`` as a dict of root → edge id, any number of them."""
        root, edge, trees = _ids(anchors)
        return Tuple.make(values, fields, source_component, source_stream, source_task, root, edge, trees, task)

    @property
    def anchors(self) -> dict[int, int]:
        """Root id → this tuple's edge id, for each spout tuple tree it belongs to (a new dict)."""
        if self.root is not None:
            return {self.root: self.edge}
        return dict(self.trees) if self.trees is not None else {}

    def tracked(self) -> bool:
        """True when the tuple belongs to a spout tuple tree: acking or failing it counts."""
        return self.root is not None or self.trees is not None

    def roots(self) -> list[int]:
        """The root ids of the trees the tuple belongs to."""
        if self.root is not None:
            return [self.root]
        return list(self.trees) if self.trees is not None else []

    def __getitem__(self, key: str | int) -> Any:
        if type(key) is int:
            return self.values[key]
        return self.values[self.fields.index(key)]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values[self.fields.index(name)] if name in self.fields else default

    def __len__(self) -> int:
        return len(self.values)

    @property
    def is_tick(self) -> bool:
        """True for the tick tuples sent to components that set ``tickFrequencySeconds``."""
        return self.source_stream == TICK_STREAM and self.source_component == SYSTEM_COMPONENT

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.fields.names, self.values, strict=False))

    def __repr__(self) -> str:
        return (f"Tuple({self.source_component}:{self.source_task}/{self.source_stream} "
                f"{self.as_dict() if self.fields.names else self.values!r})")


def _ids(anchors: dict[int, int]) -> tuple[int | None, int, dict[int, int] | None]:
    """(root, edge, trees) of a tuple with ``anchors``: see :class:`Tuple`."""
    if len(anchors) == 1:
        ((root, edge),) = anchors.items()
        return root, edge, None
    return None, 0, (anchors or None)  # held as given, as before; `anchors` hands out copies
