"""Incoming frames, from gRPC server threads to the scheduler thread, with backpressure.

Each lane has a small bounded queue of decoded frames. A server thread that finds it full blocks,
stops reading its stream, and HTTP/2 flow control pushes back on the sender. The scheduler
moves items into executor inboxes only while they have room; the rest stays parked, in order.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

from squall.executor.base import Transfer
from squall.transport.links import CONTROL, DATA
from squall.tuples import Tuple


class _Lane:
    """A lane's decoded frames, and the one the scheduler is delivering: ``items[at:]`` are parked."""

    def __init__(self, frames: int) -> None:
        self.frames: queue.Queue[list[Any]] = queue.Queue(frames)
        self.items: list[Any] = []
        self.at = 0

    def waiting(self) -> int:
        return self.frames.qsize() + len(self.items) - self.at


class Ingress:
    """A frame's items are what :meth:`Decoder.decode <squall.transport.codec.Decoder.decode>` makes:
    a :class:`Tuple` goes to its ``task``, a ``(task, item)`` pair to that task."""

    def __init__(self, *, transfer: Transfer, wake: Callable[[], None], frames: int) -> None:
        self._transfer = transfer
        self._wake = wake
        # Control first: verdicts and acker messages never wait behind tuples for a busy bolt.
        self._control, self._data = _Lane(frames), _Lane(frames)
        self._lanes = {CONTROL: self._control, DATA: self._data}
        self.last_input = float("-inf")  # monotonic time items last reached an inbox

    def put(self, lane: str, items: list[Any], *, closed: Callable[[], bool]) -> bool:
        """Called on a server thread; blocks while the lane is full. False if closed meanwhile.
        The ingress owns ``items`` from then on."""
        q = self._lanes[lane].frames
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
        worker found complete, see ``AckerOutbox``), delivered after what the control lane holds."""
        lane = self._control
        if lane.at == len(lane.items):
            lane.items, lane.at = list(items), 0
        else:
            lane.items.extend(items)

    def waiting(self) -> int:
        """Frames received and items parked, not yet in an inbox: a draining process must not exit
        while any wait (the sender counted them as read; they would vanish, their trees left to time out)."""
        return self._control.waiting() + self._data.waiting()

    def deliver(self) -> bool:
        """On the scheduler thread: move what fits into the inboxes. Returns progress."""
        moved = self._deliver(self._control)
        moved += self._deliver(self._data)
        if moved:
            self.last_input = time.monotonic()
        return moved > 0

    def _deliver(self, lane: _Lane) -> int:
        """Deliver ``lane``'s items in order until an inbox is full or none is left; how many went."""
        transfer = self._transfer
        items, at = lane.items, lane.at
        moved = 0
        while True:
            n = len(items)
            while at < n:
                item = items[at]
                if type(item) is Tuple:
                    tup = item
                    if not transfer.try_send(tup.task, tup):
                        break
                elif not transfer.try_send(item[0], item[1]):
                    break
                at += 1
                moved += 1
            # Queue.queue is the deque the queue guards: this thread alone takes from it, so a frame
            # seen there is there to get, and an empty lane costs no Empty exception every round.
            if at < n or not lane.frames.queue:
                break
            items, at = lane.frames.get_nowait(), 0
        if at == len(items):  # all delivered: the list is let go, not its items kept alive
            items, at = [], 0
        lane.items, lane.at = items, at
        return moved
