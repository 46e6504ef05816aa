"""Per-task counters and latency histograms, updated on the hot path with plain integer adds.

The metrics endpoint and ``LocalCluster`` read them; nothing here does I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from squall.executor.hdr import HdrHistogram

# Like Storm (topology.stats.sample.rate = 0.05), bolts time one tuple in SAMPLE_EVERY and weigh
# the sample accordingly: the clock reads and histogram updates cost more than most executes.
SAMPLE_EVERY = 20

# Latency bucket upper bounds in seconds (Prometheus ``le`` values): from 10 µs, since a bolt's execute
# takes microseconds and a tree in one worker completes in well under a millisecond.
LATENCY_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The same bounds for observe's scan: a C array where compiled (bisect was a Python call per sample).
_BOUNDS = list(LATENCY_BUCKETS)
_N_BOUNDS = len(LATENCY_BUCKETS)


class Histogram:
    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float, weight: int = 1) -> None:
        i = 0
        while i < _N_BOUNDS and _BOUNDS[i] < seconds:  # bisect_left: most samples fall in the first few
            i += 1
        self.counts[i] += weight
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


_NONE = object()  # no key counted yet


class _Cell:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class Counts:
    """A task's counts by stream (or by (component, stream)), read like a dict (a key never counted
    reads 0, as from a ``defaultdict``). Counting is :meth:`add` (or :meth:`add_pair`): an integer
    add in place, where ``counts[key] += 1`` on a dict looked the key up twice and stored a new int.
    """

    __slots__ = ("_cells", "_key", "_cell", "_first", "_second", "_pair_cell")

    def __init__(self) -> None:
        self._cells: dict[Hashable, _Cell] = {}
        # The key counted last and its cell, compared by identity: a task counts the same stream
        # (the same str object) tuple after tuple, so most adds skip hashing and the dict lookup.
        self._key: Any = _NONE
        self._cell = _Cell()
        self._first: Any = _NONE  # the same for add_pair
        self._second: Any = _NONE
        self._pair_cell = _Cell()

    def add(self, key: Hashable, n: int = 1) -> None:
        if key is not self._key:
            self._cell = self._lookup(key)
            self._key = key
        self._cell.n += n

    def add_pair(self, first: Hashable, second: Hashable) -> None:
        """Count the key ``(first, second)`` once, without building the tuple when the pair is the last one."""
        if first is not self._first or second is not self._second:
            self._pair_cell = self._lookup((first, second))
            self._first, self._second = first, second
        self._pair_cell.n += 1

    def _lookup(self, key: Hashable) -> _Cell:
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell()
        return cell

    def get(self, key: Hashable, default: Any = None) -> Any:
        cell = self._cells.get(key)
        return default if cell is None else cell.n

    def __getitem__(self, key: Hashable) -> int:
        return self.get(key, 0)

    # Reads come from other threads too (the metrics endpoint): each takes its snapshot in one step.
    def items(self) -> list[tuple[Hashable, int]]:
        return [(key, cell.n) for key, cell in list(self._cells.items())]

    def keys(self) -> list[Hashable]:
        return list(self._cells)

    def values(self) -> list[int]:
        return [cell.n for cell in list(self._cells.values())]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._cells))

    def __len__(self) -> int:
        return len(self._cells)

    def __contains__(self, key: object) -> bool:
        return key in self._cells

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __repr__(self) -> str:
        return f"Counts({dict(self.items())!r})"


Mapping.register(Counts)


class TaskStats:
    """Counters of one task, keyed by stream (``executed``: by (source component, source stream)).

    Complete latency is kept twice: in fixed buckets for Prometheus, and every sample in an
    :class:`HdrHistogram` for percentiles with a stated precision (``squall run``, benchmarks).
    """

    __slots__ = ("emitted", "transferred", "acked", "failed", "timed_out", "executed", "complete_latency",
                 "complete_recorded", "execute_latency", "process_latency", "errors", "busy_seconds")

    def __init__(self) -> None:
        self.emitted = Counts()
        self.transferred = Counts()
        self.acked = Counts()
        self.failed = Counts()  # explicit fails
        self.timed_out = Counts()
        self.executed = Counts()  # by (source component, source stream)
        self.complete_latency: defaultdict[str, Histogram] = defaultdict(Histogram)
        self.complete_recorded: defaultdict[str, HdrHistogram] = defaultdict(HdrHistogram)
        self.execute_latency: defaultdict[tuple[str, str], Histogram] = defaultdict(Histogram)
        self.process_latency: defaultdict[tuple[str, str], Histogram] = defaultdict(Histogram)
        self.errors = 0
        self.busy_seconds = 0.0  # time spent in execute, for Storm's capacity metric
