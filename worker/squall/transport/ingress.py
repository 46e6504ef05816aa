"""Incoming frames, from gRPC server threads to the scheduler thread, with backpressure.

Each lane has a small bounded queue of decoded frames. A server thread that finds it full blocks,
stops reading its stream, and HTTP/2 flow control pushes back on the sender. The scheduler
moves items into executor inboxes only while they have room; the rest stays parked, in order.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from squall.transport.links import CONTROL, DATA


class Ingress:
    def __init__(self, *, try_deliver: Callable[[int, Any], bool], wake: Callable[[], None], frames: int) -> None:
        self._try_deliver = try_deliver
        self._wake = wake
        # Control first: verdicts and acker messages never wait behind tuples for a busy bolt.
        self._lanes = {lane: (queue.Queue(frames), deque()) for lane in (CONTROL, DATA)}
        self.last_input = float("-inf")  # monotonic time items last reached an inbox

    def put(self, lane: str, items: list[tuple[int, Any]], *, closed: Callable[[], bool]) -> bool:
        """Called on a server thread; blocks while the lane is full. False if closed meanwhile."""
        q = self._lanes[lane][0]
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
        self._lanes[CONTROL][1].extend(items)

    def waiting(self) -> int:
        """Frames received and items parked, not yet in an inbox: a draining process must not exit
        while any wait (the sender counted them as read; they would vanish, their trees left to time out)."""
        return sum(q.qsize() + len(parked) for q, parked in self._lanes.values())

    def deliver(self) -> bool:
        """On the scheduler thread: move what fits into the inboxes. Returns progress."""
        progress = False
        try_deliver = self._try_deliver
        for q, parked in self._lanes.values():
            while True:
                while parked:
                    task, item = parked[0]
                    if not try_deliver(task, item):
                        break
                    parked.popleft()
                    progress = True
                if parked:
                    break
                try:
                    parked.extend(q.get_nowait())
                except queue.Empty:
                    break
        if progress:
            self.last_input = time.monotonic()
        return progress
