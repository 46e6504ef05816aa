"""The batch being filled for one link: tuples, verdicts, or acker messages folded per tree as they come;
a worker's young trees, kept from their acker while they may still complete here."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from squall.acker.acker import ACK, INIT, Notification, notification
from squall.executor.base import Transfer
from squall.proto.squall_pb2 import Batch
from squall.transport.codec import I32, U8, U64, acker_columns, encode_acker_columns, tuple_columns
from squall.tuples import Tuple
from squall.values import ANCHOR_BYTES, FRAME_ROOM, TUPLE_ROOM, size

#: Seconds an acker's home keeps a tree from the acker, for the tree to complete there first.
YOUNG_SECONDS = 0.1


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

    def message(self, kind: int, root: int, val: int, task: int) -> None:
        """Add the acker message ``(kind, root, val, task)`` (the acker outboxes fold it without the tuple)."""
        self.add((kind, root, val, task))

    def frame(self) -> bytes:
        frame = self._encode(self._items)
        self._items = []
        self.size = 0
        return frame


class _Young:
    """A tree kept in its worker (see :class:`AckerOutbox`): its acks folded so far, its spout task, and
    since when it is kept. Compiled, a fold is an XOR in place, where a list's slot took a new int."""

    __slots__ = ("value", "task", "since")


class AckerOutbox(Outbox):
    """Acker messages for one acker process, kept as the frame's columns, with each tree's INIT and
    ACKs folded into one message as they come: XOR is associative, so the acker reaches the same
    value, from one message instead of many, and a folded message costs an XOR, not an allocation. A
    FAIL or RESET is never folded, and starts a new message for the acks after it, so every verdict
    stays what the messages one by one give.

    **Young trees.** A tree's INIT does not go into the batch at once: the tree is kept here, young,
    and its ACKs fold into it. One whose value returns to 0 is complete, as its acker would find
    from the folded message: the worker delivers its verdict itself (see :meth:`_complete`), and the
    acker never hears of it. A tree goes to its acker, as one INIT message holding what
    folded so far, once it was kept ``keep`` seconds (see :meth:`expire`), or when a FAIL or RESET
    of it comes, which follows its INIT into the batch. At the acker's home every message of the
    tree passes here (the other workers forward theirs through it), so keeping a tree never delays
    its verdict, and the transport keeps trees :data:`YOUNG_SECONDS`; elsewhere the other workers'
    acks go to the acker directly, and waiting for the INIT would delay the tree, so trees are kept
    for the scheduler round they started in (``keep`` 0). An ACK that came before its tree's INIT
    (the INIT waited in the spout's overflow) keeps the tree in the batch, and an INIT message there
    that holds 0 is complete too.

    A tree is acked that way even after a FAIL of it: its value is 0 only if every tuple of it was
    acked, and a bolt's fail of a tuple leaves that tuple's edge unacked (a fail after an ack comes
    after the ack). What can come first is a worker's FAIL for a frame that might have been lost and
    was read after all (``Runtime._fail_lost``), which the acker would let win, and so replay a tree
    that was processed.

    ``capacity``: messages a batch holds at most (the transport flushes a full batch before adding),
    and one more: a young tree's FAIL or RESET adds two, its INIT and itself; ``keep``: seconds a
    young tree is kept.
    """

    def __init__(self, link: Any, capacity: int, keep: float = 0.0) -> None:
        super().__init__(link)
        self.keep = keep
        self.capacity = capacity
        # Fixed columns, written in place: the batch never outgrows the transport's batch size, and one more.
        rows = capacity + 1
        self._kinds, self._tasks = array(U8, bytes(rows)), array(I32, bytes(4 * rows))
        self._roots, self._vals = array(U64, bytes(8 * rows)), array(U64, bytes(8 * rows))
        self.kinds, self.tasks, self.roots, self.vals = self._kinds, self._tasks, self._roots, self._vals
        self._open: dict[int, int] = {}  # root → its INIT or ACK message that later ones fold into
        self._n = 0  # messages in the columns
        self._young: dict[int, _Young] = {}  # root → its young tree, oldest first
        self._now = 0.0  # the clock at the last :meth:`expire`: trees kept after it are kept since then
        #: the process's inboxes (set by the transport): a verdict goes into its spout task's at once
        self.transfer: Transfer | None = None
        #: (spout task, ACK verdict) of trees completed here that did not go to :attr:`transfer` at once
        #: (see :meth:`_complete`): the transport delivers them through its ingress.
        self.verdicts: list[tuple[int, Notification]] = []
        self.completed = 0  #: trees completed here

    def add(self, item: Any) -> None:
        kind, root, val, task = item
        self.message(kind, root, val, task)

    def message(self, kind: int, root: int, val: int, task: int) -> None:
        tree = self._young.get(root)
        if tree is not None:
            if kind == ACK:
                tree.value ^= val
                if not tree.value:
                    del self._young[root]
                    self._complete(root, tree.task, True)
                return
            del self._young[root]  # a FAIL or RESET follows the tree's INIT to its acker
            self._fold(INIT, root, tree.value, tree.task)
        elif kind == INIT and root not in self._open:
            if not val:  # no tuple to wait for (the spout's went to no task): complete, as its acker finds
                self._complete(root, task, True)
                return
            tree = _Young.__new__(_Young)  # compiled: no boxing of its C fields through __init__
            tree.value, tree.task, tree.since = val, task, self._now
            self._young[root] = tree
            return
        self._fold(kind, root, val, task)

    def _fold(self, kind: int, root: int, val: int, task: int) -> None:
        """Add a message to the batch, folded into its tree's open INIT or ACK message if there is one."""
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

    def expire(self, now: float) -> None:
        """Move the trees kept :attr:`keep` seconds or longer (every one if it is < 0) into the batch, as
        far as it has room; trees kept from now on are kept since ``now``."""
        self._now = now
        young = self._young
        if not young:
            return
        room = self.capacity - self._n
        if room <= 0:  # full, or one past it: a young tree's FAIL or RESET added its INIT and itself
            return
        before = now - self.keep
        old = []
        for root, tree in young.items():  # oldest first
            if tree.since > before or len(old) == room:
                break
            old.append(root)
        for root in old:
            tree = young.pop(root)
            self._fold(INIT, root, tree.value, tree.task)

    def _complete(self, root: int, task: int, at_once: bool) -> None:
        """Tree ``root`` of spout task ``task`` is complete. ``at_once``: a message completed it, while an
        executor runs; its ACK verdict goes into the spout task's inbox now, as a local acker's would
        (parked in the ingress, it waited for the next round: a round more of every tree's latency).
        Otherwise, or if that inbox cannot take it, the verdict waits in :attr:`verdicts`: a tree found
        complete as a frame is built, at the end of a round that may have done nothing else, goes
        through the ingress, which wakes the loop for a round to deliver it."""
        self.completed += 1
        note = notification(ACK, root, task)
        if not at_once or self.transfer is None or not self.transfer.try_local(task, note):
            self.verdicts.append((task, note))

    def kept(self) -> int:
        """Young trees kept here."""
        return len(self._young)

    def _columns(self) -> tuple[array, array, array, array]:
        """The messages so far, less the trees they complete (see :meth:`_complete`), as new arrays; the
        columns start the next batch."""
        kinds, roots, vals, tasks = self.kinds, self.roots, self.vals, self.tasks
        kept = 0
        for at in range(self._n):
            kind = kinds[at]
            if kind == INIT and vals[at] == 0:
                self._complete(roots[at], tasks[at], False)
                continue
            if kept < at:
                kinds[kept], roots[kept], vals[kept], tasks[kept] = kind, roots[at], vals[at], tasks[at]
            kept += 1
        self._open.clear()
        self._n = 0
        self.size = 0
        return self._kinds[:kept], self._roots[:kept], self._vals[:kept], self._tasks[:kept]

    def frame(self) -> bytes:
        """The batch's frame; empty when every message in it completed its tree here."""
        columns = self._columns()
        return encode_acker_columns(*columns) if len(columns[0]) else b""


class DataOutbox(AckerOutbox):
    """Tuples for one worker, and the acker messages it forwards to their acker: those of the ackers
    whose home it is (:attr:`squall.topology.assignment.Assignment.acker_homes`), folded as they come
    (no young trees: it is not their spouts' worker).

    A batch whose tuples together encode to more than ``max_frame`` bytes goes out in parts, a frame at a
    time (gRPC refuses a larger one, and the stream breaks, failing every frame in flight): its acker
    messages alone, then its tuples in halves. A single tuple over it is the transport's to drop."""

    def __init__(self, link: Any, capacity: int, max_frame: int) -> None:
        super().__init__(link, capacity)
        self.max_frame = max_frame
        self._rest = False  # the items are what is left of a batch too large for one frame

    def add(self, item: Any) -> None:
        if type(item) is Tuple:
            self._items.append(item)
            self.size += 1
        else:
            kind, root, val, task = item
            self._fold(kind, root, val, task)

    def message(self, kind: int, root: int, val: int, task: int) -> None:
        self._fold(kind, root, val, task)

    def frame(self) -> bytes:
        acker = acker_columns(*self._columns()) if self._n else None
        items = self._items
        self._items = []
        self.size = 0
        if not items:
            return Batch(acker=acker).SerializeToString()
        if not self._rest:  # the rest of a batch found too large is cut at once, not encoded whole again
            frame = Batch(tuples=tuple_columns(items), acker=acker).SerializeToString()
            if len(frame) <= self.max_frame or len(items) == 1 and acker is None:
                return frame
        if acker is not None:  # the acker messages now, the tuples as the batch's next frames
            self._items, self.size, self._rest = items, len(items), True
            return Batch(acker=acker).SerializeToString()
        # The longest run of tuples that fits by their values' size, encoded once (halving and encoding
        # again for every part took seconds for a batch of large values, on the scheduler thread)
        budget, n, total = self.max_frame - FRAME_ROOM, 0, 0
        for tup in items:
            total += size(tup.values) + TUPLE_ROOM
            if tup.trees is not None:
                total += ANCHOR_BYTES * len(tup.trees)
            if n and total > budget:
                break
            n += 1
        frame = Batch(tuples=tuple_columns(items[:n])).SerializeToString()
        while n > 1 and len(frame) > self.max_frame:  # an estimate short of the encoding: rare
            n = (n + 1) // 2
            frame = Batch(tuples=tuple_columns(items[:n])).SerializeToString()
        self._items = items[n:]
        self.size = len(self._items)
        self._rest = self.size > 0
        return frame
