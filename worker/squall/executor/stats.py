"""Per-task counters and latency histograms, updated on the hot path with plain integer adds.

The metrics endpoint and ``LocalCluster`` read them; nothing here does I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict

from squall.executor.hdr import HdrHistogram

# Like Storm (topology.stats.sample.rate = 0.05), bolts time one tuple in SAMPLE_EVERY and weigh
# the sample accordingly: the clock reads and histogram updates cost more than most executes.
SAMPLE_EVERY = 20

# Latency bucket upper bounds in seconds (Prometheus ``le`` values).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0)


class Histogram:
    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float, weight: int = 1) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += weight
        self.sum += seconds * weight
        self.count += weight

    def quantile(self, q: float) -> float:
        """An upper bound of the ``q`` quantile (the bucket boundary it falls under)."""
        if not self.count:
            return 0.0
        rank, seen = q * self.count, 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return LATENCY_BUCKETS[i] if i < len(LATENCY_BUCKETS) else float("inf")
        return float("inf")

    def merge(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.sum += other.sum
        self.count += other.count


class TaskStats:
    """Counters of one task, keyed by stream (``executed``: by (source component, source stream)).

    Complete latency is kept twice: in fixed buckets for Prometheus, and every sample in an
    :class:`HdrHistogram` for percentiles with a stated precision (``squall run``, benchmarks).
    """

    __slots__ = ("emitted", "transferred", "acked", "failed", "timed_out", "executed", "complete_latency",
                 "complete_recorded", "execute_latency", "process_latency", "errors", "busy_seconds")

    def __init__(self) -> None:
        self.emitted: defaultdict[str, int] = defaultdict(int)
        self.transferred: defaultdict[str, int] = defaultdict(int)
        self.acked: defaultdict[str, int] = defaultdict(int)
        self.failed: defaultdict[str, int] = defaultdict(int)  # explicit fails
        self.timed_out: defaultdict[str, int] = defaultdict(int)
        self.executed: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.complete_latency: defaultdict[str, Histogram] = defaultdict(Histogram)
        self.complete_recorded: defaultdict[str, HdrHistogram] = defaultdict(HdrHistogram)
        self.execute_latency: defaultdict[tuple[str, str], Histogram] = defaultdict(Histogram)
        self.process_latency: defaultdict[tuple[str, str], Histogram] = defaultdict(Histogram)
        self.errors = 0
        self.busy_seconds = 0.0  # time spent in execute, for Storm's capacity metric
