"""The batch being filled for one link: tuples, verdicts, or acker messages folded per tree as they come."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from squall.acker.acker import ACK, INIT
from squall.proto.squall_pb2 import Batch
from squall.transport.codec import I32, U8, U64, acker_columns, encode_acker_columns, tuple_columns
from squall.tuples import Tuple


class Outbox:
    """Items for one link (a peer and lane) since ``since``, ``size`` of them, until :meth:`frame`
    encodes them with ``encode`` and starts the next batch (subclasses that keep columns instead
    encode them in their own :meth:`frame`)."""

    def __init__(self, link: Any, encode: Callable[[list[Any]], bytes] | None = None) -> None:
        self.link = link
        self.size = 0
        self.since = 0.0
        self._items: list[Any] = []
        self._encode = encode

    def add(self, item: Any) -> None:
        self._items.append(item)
        self.size += 1

    def frame(self) -> bytes:
        frame = self._encode(self._items)
        self._items = []
        self.size = 0
        return frame


class AckerOutbox(Outbox):
    """Acker messages for one acker process, kept as the frame's columns, with each tree's INIT and
    ACKs folded into one message as they come: XOR is associative, so the acker reaches the same
    value, from one message instead of many (a tree's 10 leave a worker as 1 to 3), and a folded
    message costs an XOR, not an allocation. A FAIL or RESET is never folded, and starts a new
    message for the acks after it, so every verdict stays what the messages one by one give.

    ``capacity``: messages a batch holds at most (the transport flushes a full batch before adding).
    """

    def __init__(self, link: Any, capacity: int) -> None:
        super().__init__(link)
        # Fixed columns, written in place: the batch never outgrows the transport's batch size.
        self._kinds, self._tasks = array(U8, bytes(capacity)), array(I32, bytes(4 * capacity))
        self._roots, self._vals = array(U64, bytes(8 * capacity)), array(U64, bytes(8 * capacity))
        self.kinds, self.tasks, self.roots, self.vals = self._kinds, self._tasks, self._roots, self._vals
        self._open: dict[int, int] = {}  # root → its INIT or ACK message that later ones fold into
        self._n = 0  # messages in the columns

    def add(self, item: Any) -> None:
        kind, root, val, task = item
        if kind > ACK:
            self._open.pop(root, None)
        else:
            at = self._open.get(root, -1)
            if at >= 0:
                self.vals[at] ^= val
                if kind == INIT:
                    self.kinds[at] = INIT
                    self.tasks[at] = task
                return
            self._open[root] = self._n
        at = self._n
        if at == len(self.kinds):
            raise OverflowError(f"an acker batch holds {at} messages at most")
        self.kinds[at] = kind
        self.roots[at] = root
        self.vals[at] = val
        self.tasks[at] = task
        self._n = at + 1
        self.size += 1

    def _columns(self) -> tuple[array, array, array, array]:
        """The messages so far, as new arrays; the columns start the next batch."""
        n = self._n
        self._open.clear()
        self._n = 0
        return self._kinds[:n], self._roots[:n], self._vals[:n], self._tasks[:n]

    def frame(self) -> bytes:
        self.size = 0
        return encode_acker_columns(*self._columns())


class DataOutbox(AckerOutbox):
    """Tuples for one worker, and the acker messages it forwards to their acker: those of the ackers
    whose home it is (:attr:`squall.topology.assignment.Assignment.acker_homes`), folded as they come."""

    def add(self, item: Any) -> None:
        if type(item) is Tuple:
            self._items.append(item)
            self.size += 1
        else:
            AckerOutbox.add(self, item)

    def frame(self) -> bytes:
        acker = acker_columns(*self._columns()) if self._n else None
        tuples = None
        if self._items:
            tuples = tuple_columns(self._items)
            self._items = []
        self.size = 0
        return Batch(tuples=tuples, acker=acker).SerializeToString()
