"""``report_error``: at most N errors per interval per executor are logged and recorded; the rest are counted."""

from __future__ import annotations

import logging
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("squall.errors")


@dataclass(frozen=True)
class ReportedError:
    component: str
    task: int
    time: float  # wall clock, seconds since the epoch
    error: str  # "Type: message"
    trace: str


class ErrorLog:
    """The last ``keep`` recorded errors of each component in this process, queryable."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._errors: dict[str, deque[ReportedError]] = {}

    def add(self, error: ReportedError) -> None:
        """On the scheduler thread, without a lock: the reader copies (see :meth:`recent`)."""
        self._errors.setdefault(error.component, deque(maxlen=self.keep)).append(error)

    def recent(self, component: str | None = None) -> list[ReportedError]:
        """The recorded errors, oldest first; safe from any thread (``GET /errors`` on the metrics thread).

        ``list()`` of a dict's values and of a deque copies in one C call that holds the GIL, so the
        reader gets a consistent snapshot while the scheduler thread appends.
        """
        if component is not None:
            return list(self._errors.get(component, ()))
        queues = list(self._errors.values())
        return sorted((e for q in queues for e in list(q)), key=lambda e: e.time)


class ErrorReporter:
    """Throttles one executor's errors (Storm's ``topology.max.error.report.per.interval``)."""

    def __init__(self, *, component: str, log_: ErrorLog, max_per_interval: int, interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.component = component
        self._log = log_
        self._max = max_per_interval
        self._interval = interval
        self._clock = clock
        self._window_start = -float("inf")
        self._in_window = 0
        self.reported = 0
        self.suppressed = 0

    def report(self, exc: BaseException, *, task: int) -> bool:
        """Log and record ``exc`` unless throttled. Returns whether it was recorded.

        A throttled error is only counted (by the caller, in ``squall_errors_total``): a bolt that fails
        every tuple would otherwise write a traceback per tuple, thousands a second, filling the node's
        disk and spending more on formatting them than on the work. The first one of a window says so."""
        now = self._clock()
        if now - self._window_start >= self._interval:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self._max:
            if self._in_window == self._max:
                self._in_window += 1
                log.error("component %s reported more than %d errors within %g s: until those %g s are over, "
                          "its further errors are only counted (squall_errors_total), not logged "
                          "(errorReporting.maxPerInterval, intervalSeconds)", self.component, self._max,
                          self._interval, self._interval)
            self.suppressed += 1
            return False
        self._in_window += 1
        self.reported += 1
        trace = "".join(traceback.format_exception(exc))
        log.error("component %s task %d reported an error:\n%s", self.component, task, trace.rstrip())
        self._log.add(ReportedError(self.component, task, time.time(), f"{type(exc).__name__}: {exc}", trace))
        return True
