"""The HDR histogram behind reported latency percentiles: every sample counted, 0.8 % precision."""

from __future__ import annotations

import random

import pytest

from squall.executor.hdr import PRECISION, HdrHistogram, bucket_high, bucket_of


def test_every_value_falls_in_a_bucket_no_wider_than_the_stated_precision():
    values = [*range(0, 5000), *(random.Random(1).randrange(1, 2**40) for _ in range(5000))]
    for v in values:
        b = bucket_of(v)
        assert bucket_high(b) >= v > (bucket_high(b - 1) if b else -1)
        assert bucket_high(b) - v <= v * PRECISION


def test_quantiles_are_the_sample_quantiles_within_the_precision():
    rng = random.Random(7)
    samples = [rng.lognormvariate(-5, 1.5) for _ in range(20_000)]  # µs to seconds, heavy tail
    h = HdrHistogram()
    for s in samples:
        h.record(s)
    ordered = sorted(samples)
    for q in (0.5, 0.9, 0.99, 0.999, 1.0):
        exact = ordered[max(1, round(q * len(ordered))) - 1]
        exact_us = int(exact * 1_000_000)
        assert exact_us / 1e6 <= h.quantile(q) <= (exact_us * (1 + PRECISION) + 1) / 1e6
    assert h.count == len(samples)


def test_merge_and_json_round_trip_keep_every_count():
    a, b = HdrHistogram(), HdrHistogram()
    for ms in range(1, 101):
        (a if ms % 2 else b).record(ms / 1000)
    back = HdrHistogram.from_json(a.to_json())
    back.merge(HdrHistogram.from_json(b.to_json()))
    assert back.count == 100
    assert back.quantile(0.5) == pytest.approx(0.050, rel=PRECISION)
    assert back.quantile(1.0) == 0.1


def test_minus_gives_the_samples_of_a_window():
    h = HdrHistogram()
    for _ in range(1000):
        h.record(0.001)
    before = HdrHistogram.from_json(h.to_json())
    for _ in range(10):
        h.record(0.5)
    window = h.minus(before)
    assert window.count == 10
    assert window.quantile(0.5) == pytest.approx(0.5, rel=PRECISION)


def test_empty_histogram_has_zero_percentiles():
    assert HdrHistogram().quantile(0.99) == 0.0


@pytest.mark.parametrize("bad", [[], {"counts": [[1]]}, {"counts": [[1, -2]]}, {"counts": [], "max_us": "x"}])
def test_malformed_json_is_refused_with_what_is_wrong(bad):
    with pytest.raises(ValueError, match="HDR histogram"):
        HdrHistogram.from_json(bad)
