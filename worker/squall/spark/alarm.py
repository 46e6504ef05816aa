"""A one-shot alarm on its own thread that hands its firing to the executor thread.

A library bolt cannot count on tick tuples (``tickFrequencySeconds`` is the topology's choice), and
its executor thread must never sleep, so a SparkBolt keeps its deadlines here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Alarm:
    """Calls ``post(fire)`` once the earliest deadline given to :meth:`set` has passed.

    Each firing clears the deadline: ``fire`` (run on the executor thread) looks at the bolt's state
    and sets the next one. A deadline that turns out to be early is harmless for that reason.
    """

    def __init__(self, *, name: str, post: Callable[[Callable[[], None]], None], fire: Callable[[], None]) -> None:
        self._post = post
        self._fire = fire
        self._cond = threading.Condition()
        self._due: float | None = None
        self._closed = False
        # A daemon: a pending alarm must never keep the worker process alive.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def set(self, due: float) -> None:
        """Fire at ``due`` (``time.monotonic()`` seconds), unless an earlier deadline is already set."""
        with self._cond:
            if self._due is None or due < self._due:
                self._due = due
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._closed:
                    if self._due is not None:
                        delay = self._due - time.monotonic()
                        if delay <= 0:
                            break
                        cond.wait(delay)
                    else:
                        cond.wait()
                if self._closed:
                    return
                self._due = None
            self._post(self._fire)
