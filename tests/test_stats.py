"""A task's counters: counted in place, read like the dicts they replace, and exported."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from engine_kit import Numbers, PassBolt, run_until_quiet
from squall import TopologyBuilder
from squall.executor.stats import LATENCY_BUCKETS, Counts, Histogram, TaskStats
from squall.metrics.collector import RuntimeCollector
from squall.testing import LocalCluster, TestingSink


def test_counts_add_in_place_and_read_like_a_dict_whose_missing_keys_are_zero():
    counts = Counts()
    counts.add("default")
    counts.add("default", 4)
    counts.add(("split", "default"), 2)
    assert counts["default"] == 5 and counts[("split", "default")] == 2
    assert counts["never"] == 0 and "never" not in counts and len(counts) == 2  # reading adds no key
    assert counts.get("never") is None and counts.get("never", 0) == 0 and counts.get("default", 0) == 5
    assert sorted(counts.items(), key=str) == [("default", 5), (("split", "default"), 2)]
    assert sum(counts.values()) == 7 and set(counts) == set(counts.keys()) == {"default", ("split", "default")}
    assert counts == {"default": 5, ("split", "default"): 2} and counts != {"default": 5}
    assert isinstance(counts, Mapping) and dict(counts) == {"default": 5, ("split", "default"): 2}


def test_a_key_equal_to_the_last_but_another_object_counts_in_the_same_cell():
    # add() remembers the last key by identity: an equal key built anew must still find its cell,
    # and switching keys back and forth must never count into the other's cell
    counts = Counts()
    stream = "".join(["de", "fault"])
    assert stream == "default" and stream is not "default"  # noqa: F632 - the point is identity
    for key in ("default", stream, "other", "default", "other", stream):
        counts.add(key)
    assert counts == {"default": 4, "other": 2}
    counts.add_pair("split", "default")
    counts.add_pair("split", stream)
    counts.add_pair("count", "default")
    counts.add(("split", "default"), 3)  # the same key through add(): one cell, whichever way it is counted
    counts.add_pair("split", "default")
    assert counts[("split", "default")] == 6 and counts[("count", "default")] == 1 and counts["default"] == 4


def test_every_counter_of_a_task_is_a_counts():
    stats = TaskStats()
    for counts in (stats.emitted, stats.transferred, stats.acked, stats.failed, stats.timed_out, stats.executed):
        assert isinstance(counts, Counts) and len(counts) == 0


def test_a_latency_falls_in_the_first_bucket_whose_bound_it_does_not_exceed():
    """Prometheus's ``le``: a sample equal to a bound counts in that bound's bucket, one just above it in
    the next, one above the last bound in +Inf; weights add to the bucket, the count and the sum."""
    h = Histogram()
    for bound in LATENCY_BUCKETS:
        h.observe(bound)
    h.observe(LATENCY_BUCKETS[0] * 1.01, 20)
    h.observe(0.0)
    h.observe(LATENCY_BUCKETS[-1] * 2)
    assert h.counts == [2, 21, *[1] * (len(LATENCY_BUCKETS) - 2), 1]
    assert h.count == len(LATENCY_BUCKETS) + 22
    assert h.sum == pytest.approx(sum(LATENCY_BUCKETS) + LATENCY_BUCKETS[0] * 1.01 * 20 + LATENCY_BUCKETS[-1] * 2)


def test_a_declared_stream_is_exported_at_0_unless_it_has_neither_fields_nor_subscribers():
    builder = TopologyBuilder("series")
    builder.set_spout("spout", Numbers, config={"count": 3})
    builder.set_bolt("relay", PassBolt).shuffle_grouping("spout")  # fields, no subscriber: it may gain one
    builder.set_bolt("sink", TestingSink).shuffle_grouping("relay")  # a default stream of no fields, unsubscribed
    with LocalCluster(builder.build()) as cluster:
        run_until_quiet(cluster, cluster.instance("spout").done)
        collector = RuntimeCollector(cluster.runtime, role="worker", index=0)
        emitted = {(s.labels["component"], s.labels["stream"]): s.value for family in collector.collect()
                   for s in family.samples if s.name == "squall_emitted_total"}
    assert emitted == {("spout", "default"): 3, ("relay", "default"): 3}
