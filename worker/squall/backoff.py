"""A growing wait between tries of something that keeps failing."""

from __future__ import annotations


class Backoff:
    """Waits ``first`` seconds after a failure, twice as long after each further failure in a row, at
    most ``last``; a success forgets the run. Times come from the caller's clock, so that tests need
    no sleeping."""

    __slots__ = ("first", "last", "delay", "retry_at")

    def __init__(self, first: float, last: float) -> None:
        self.first, self.last = first, last
        self.delay = 0.0  # the wait after the last failure; 0: not failing
        self.retry_at = 0.0  # when to try again

    @property
    def failing(self) -> bool:
        return self.delay > 0

    def failed(self, now: float) -> bool:
        """Count a failure at ``now`` (the wait counts from the failure: a try may take long); True for the
        first of a run, which is the one to report."""
        first = not self.failing
        self.delay = self.first if first else min(2 * self.delay, self.last)
        self.retry_at = now + self.delay
        return first

    def succeeded(self) -> None:
        self.delay = self.retry_at = 0.0

    def due(self, now: float) -> bool:
        """Whether a try may be made at ``now``."""
        return now >= self.retry_at
