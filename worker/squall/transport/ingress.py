"""Incoming frames, from gRPC server threads to the scheduler thread, with backpressure per task.

Each lane has a small bounded queue of decoded frames. The scheduler moves a frame's items into
the executors' inboxes; an item whose inbox is full waits in that task's backlog, and the task's
later items wait behind it, in order. The other tasks' items go on: one busy task never stops the
frames of the rest. A task whose backlog holds a full inbox's worth (of acker messages, for an acker
task, whose inbox holds batches of them; or an acker task whose messages this worker forwards, as
its home) is *congested*: the transport tells the peers, which send it nothing more until its backlog
is gone and its inbox half empty (Storm's backpressure status, with its high and low water marks):
the half left keeps it busy while they hear and resume, and it does not flap at every item. Without
that, a bolt waiting to send to a peer whose frames waited behind a full inbox, while that peer's bolt
waited likewise, stalled both processes.

What the backlogs may hold is bounded: beyond :attr:`Ingress.limit` items (an acker's batch counted
as its messages) the lanes take no more
frames (a worker's control lane excepted, see ``Ingress``), their queues fill, the server threads
block, and HTTP/2 flow control pushes back on every sender (a peer that ignored the congestion it was
told of, or one that sent before it heard).
"""

from __future__ import annotations

import queue
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from squall.acker.acker import AckBatch
from squall.executor.base import Transfer
from squall.transport.links import CONTROL, DATA
from squall.tuples import Tuple


class Ingress:
    """A frame's items are what :meth:`Decoder.decode <squall.transport.codec.Decoder.decode>` makes:
    a :class:`Tuple` goes to its ``task``, a ``(task, item)`` pair to that task."""

    def __init__(self, *, transfer: Transfer, wake: Callable[[], None], frames: int, limit: int) -> None:
        self._transfer = transfer
        self._wake = wake
        # Control first: verdicts and acker messages never wait behind tuples for a busy bolt.
        self._control: queue.Queue[list[Any]] = queue.Queue(frames)
        self._data: queue.Queue[list[Any]] = queue.Queue(frames)
        self._lanes = {CONTROL: self._control, DATA: self._data}
        self.limit = limit
        # An acker's control lane brings the acker messages of every worker: it is bounded as the data lane
        # is. A worker's brings only verdicts (no more than its trees in flight, and spouts always take them
        # in) and its peers' word of their congestion: it is read at the limit too. Not read there, an
        # acker's word that it had room again waited behind the forwarded acker messages that word would
        # release, and the worker stalled for good (found by the acker-home audit).
        self._control_limit = limit if any(acker is not None for acker in transfer.ackers) else sys.maxsize
        self._held: dict[int, deque[Any]] = {}  # task → items that found its inbox full, in order
        self._weights: dict[int, int] = {}  # task → what its backlog holds, by _weight
        self.held = 0  # what the backlogs hold, by _weight
        #: tasks of this process that take no more input for now: from when their backlog holds as many
        #: items as an inbox until it is gone and their inbox is no more than half full
        self.congested: set[int] = set()
        self.changed = False  # ``congested`` changed since the transport last read it
        self.last_input = float("-inf")  # monotonic time items last reached an inbox

    def put(self, lane: str, items: list[Any], *, closed: Callable[[], bool]) -> bool:
        """Called on a server thread; blocks while the lane is full. False if closed meanwhile.
        The ingress owns ``items`` from then on."""
        q = self._lanes[lane]
        while not closed():
            try:
                q.put(items, timeout=0.2)
            except queue.Full:
                continue
            self._wake()
            return True
        return False

    def park(self, items: list[tuple[int, Any]]) -> None:
        """On the scheduler thread: ``(task, item)`` pairs made in this process (verdicts of the trees this
        worker found complete, see ``AckerOutbox``), delivered as a frame's."""
        self._distribute(items)

    def waiting(self) -> int:
        """Frames received and items held, not yet in an inbox: a draining process must not exit while
        any wait (the sender counted them as read; they would vanish, their trees left to time out)."""
        return self._control.qsize() + self._data.qsize() + self.held

    def deliver(self) -> bool:
        """On the scheduler thread: move what fits into the inboxes. Returns progress."""
        moved = self._release() if self.held else 0  # the backlogs first: their items came before
        moved += self._deliver(self._control, self._control_limit)
        moved += self._deliver(self._data, self.limit)
        if self.congested:
            self._ease()
        if moved:
            self.last_input = time.monotonic()
        return moved > 0

    def _deliver(self, lane: queue.Queue, limit: int) -> int:
        """Distribute ``lane``'s frames while the backlogs are below ``limit``; how many items reached an inbox."""
        moved = 0
        # Queue.queue is the deque the queue guards: this thread alone takes from it, so a frame seen
        # there is there to get, and an empty lane costs no Empty exception every round.
        while lane.queue and self.held < limit:
            moved += self._distribute(lane.get_nowait())
        return moved

    def _distribute(self, items: list[Any]) -> int:
        """Each item into its inbox, or behind its task's backlog; how many reached an inbox."""
        transfer, held = self._transfer, self._held
        moved = 0
        for item in items:
            if type(item) is Tuple:
                tup = item
                task, thing = tup.task, item
            else:
                task, thing = item[0], item[1]
            backlog = held.get(task) if held else None
            if backlog is None:
                if transfer.try_send(task, thing):
                    moved += 1
                    continue
                backlog = held[task] = deque()
            backlog.append(thing)
            weight = _weight(thing)
            self.held += weight
            queued = self._weights[task] = self._weights.get(task, 0) + weight
            # a task of this process, or an acker task this worker forwards for: the other workers send
            # its messages here, and would fill the backlogs (the lanes stop at their limit) while it lags
            if queued >= transfer.capacity and task not in self.congested:
                self.congested.add(task)
                self.changed = True
        return moved

    def _release(self) -> int:
        """Move the backlogs on, each in order while its inbox has room; how many items went."""
        transfer = self._transfer
        moved = 0
        for task in list(self._held):
            backlog = self._held[task]
            while backlog and transfer.try_send(task, backlog[0]):
                weight = _weight(backlog.popleft())
                self.held -= weight
                self._weights[task] -= weight
                moved += 1
            if not backlog:
                del self._held[task], self._weights[task]
        return moved

    def _ease(self) -> None:
        """Clear the congestion of tasks whose backlog is gone and whose inbox is no more than half full (a
        forwarded acker task's inbox is its acker's, which says so for itself)."""
        local, half = self._transfer.local, self._transfer.capacity // 2
        for task in [task for task in self.congested if task not in self._held
                     and (task >= len(local) or local[task] is None or len(local[task]) <= half)]:
            self.congested.discard(task)
            self.changed = True


def _weight(item: Any) -> int:
    """What an item held counts, against the limit and towards its task's congestion: an acker's batch (a
    frame's acker messages for one acker task) its messages, since the limit is in the smallest items a
    stream window holds; anything else 1. Counted as 1, an acker's backlog held that many whole frames
    (found by the acker-home audit)."""
    return max(len(item), 1) if type(item) is AckBatch else 1
