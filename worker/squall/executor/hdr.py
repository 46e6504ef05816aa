"""Latency percentiles from every recorded sample, with a stated precision (an HDR-style histogram).

Values are recorded in whole microseconds into log-linear buckets: below 256 µs every microsecond
has its own bucket; above, each power of two is split into 128 equal buckets, so a bucket is at
most 1/128 (0.8 %) as wide as the values it holds. A percentile is the upper end of the bucket its
rank falls in: the true value lies within 0.8 % below it (two significant digits), whatever the
range, unlike the fixed buckets Prometheus histograms keep (a p99 "≤ 50 ms" could be 26 ms).

Histograms merge exactly (bucket counts add), so processes send theirs to ``squall run`` as JSON.
"""

from __future__ import annotations

import math
from typing import Any

SUB_BUCKETS = 128  # per power of two above EXACT: 2 significant decimal digits
EXACT = 2 * SUB_BUCKETS  # values below this (µs) are recorded exactly
PRECISION = 1 / SUB_BUCKETS
_EXACT = EXACT  # a C constant where compiled (hdr.pxd); the public name stays a Python int


def bucket_of(us: int) -> int:
    """The bucket index of a value in whole microseconds (>= 0): its top 8 bits (8 = log2(EXACT)) and
    how far they are shifted. In C integers where compiled: it runs once a tree."""
    shift = 0
    while us >> shift >= _EXACT:
        shift += 1
    return us if shift == 0 else (shift << 7) + (us >> shift)


def bucket_high(index: int) -> int:
    """The largest value (µs) that falls in bucket ``index``."""
    if index < EXACT:
        return index
    shift = (index >> 7) - 1
    sub = index - (shift << 7)  # in [128, 256): the value's top 8 bits
    return ((sub + 1) << shift) - 1


class HdrHistogram:
    """Counts of recorded latencies per log-linear bucket (sparse: only buckets that were hit)."""

    __slots__ = ("counts", "count", "max_us")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.max_us = 0

    def record(self, seconds: float) -> None:
        us = int(seconds * 1_000_000) if seconds > 0 else 0
        index = bucket_of(us)
        counts = self.counts
        counts[index] = counts.get(index, 0) + 1
        self.count += 1
        if us > self.max_us:
            self.max_us = us

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) in seconds: at most 0.8 % above the true sample (0 if empty)."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(round(q * self.count, 6)))  # round: 0.99 * 100 is 99.00000000000001
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return min(bucket_high(index), self.max_us) / 1_000_000
        return self.max_us / 1_000_000

    def merge(self, other: HdrHistogram) -> None:
        # list(): atomic under the GIL, so a metrics thread may merge what the scheduler records into.
        for index, n in list(other.counts.items()):
            self.counts[index] = self.counts.get(index, 0) + n
        self.count += other.count
        self.max_us = max(self.max_us, other.max_us)

    def minus(self, earlier: HdrHistogram) -> HdrHistogram:
        """The samples recorded since ``earlier`` (a snapshot of this histogram): for a window."""
        out = HdrHistogram()
        for index, n in self.counts.items():
            d = n - earlier.counts.get(index, 0)
            if d:
                out.counts[index] = d
        out.count = self.count - earlier.count
        out.max_us = min(max((bucket_high(i) for i in out.counts), default=0), self.max_us)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"counts": [[i, n] for i, n in sorted(self.counts.items())], "max_us": self.max_us}

    @classmethod
    def from_json(cls, data: Any) -> HdrHistogram:
        """Read what :meth:`to_json` wrote; raises ValueError naming what is wrong."""
        if not isinstance(data, dict) or not isinstance(data.get("counts"), list):
            raise ValueError("an HDR histogram must be a JSON object with a 'counts' list of [bucket, count]")
        h = cls()
        for pair in data["counts"]:
            if (not isinstance(pair, list) or len(pair) != 2 or not all(type(x) is int and x >= 0 for x in pair)):
                raise ValueError(f"HDR histogram counts must be [bucket, count] pairs of non-negative ints, "
                                 f"not {pair!r}")
            h.counts[pair[0]] = h.counts.get(pair[0], 0) + pair[1]
            h.count += pair[1]
        max_us = data.get("max_us", 0)
        if type(max_us) is not int or max_us < 0:
            raise ValueError(f"HDR histogram max_us must be a non-negative int, not {max_us!r}")
        h.max_us = max_us
        return h
