"""A task's counters: counted in place, read like the dicts they replace."""

from __future__ import annotations

from collections.abc import Mapping

from squall.executor.stats import Counts, TaskStats


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


def test_every_counter_of_a_task_is_a_counts():
    stats = TaskStats()
    for counts in (stats.emitted, stats.transferred, stats.acked, stats.failed, stats.timed_out, stats.executed):
        assert isinstance(counts, Counts) and len(counts) == 0
