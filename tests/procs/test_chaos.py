"""A short chaos run (bench/chaos.py): processes SIGKILLed every 3 s, one SIGSTOPped for two message
timeouts and the link to a worker cut for 10 s while records flow through 2 workers and 2 ackers. At
least once loses nothing; at most once counts nothing twice."""

from __future__ import annotations

import pytest
from bench import chaos


@pytest.mark.long
@pytest.mark.parametrize("guarantee", ["at_least_once", "at_most_once"])
def test_chaos_loses_nothing_at_least_once_and_duplicates_nothing_at_most_once(tmp_path, guarantee):
    result = chaos.run(directory=tmp_path, records=20_000, seconds=30, guarantee=guarantee, kill_every=3,
                       cut=10, finish_within=120)
    assert result.kills >= 5 and result.stops == 1 and result.cuts == 1
    if guarantee == "at_least_once":
        assert result.lost == 0, result
    else:
        assert result.twice == 0, result


@pytest.mark.long
def test_chaos_leaves_no_key_of_a_stateful_count_under_its_true_count(tmp_path):
    """The same chaos over a stateful count (its state in the embedded store): once every record is
    acked, every key's committed count is at least its true count (at least once)."""
    result = chaos.run(directory=tmp_path, records=20_000, seconds=30, guarantee="at_least_once", kill_every=3,
                       cut=10, finish_within=120, state="embedded")
    assert result.kills >= 5 and result.stops == 1 and result.cuts == 1
    assert result.lost == 0, result


@pytest.mark.long
def test_chaos_leaves_every_key_of_an_exactly_once_count_at_its_true_count(tmp_path):
    """The same chaos over the stateful count with ``topology.state.guarantee: exactly_once``: once the
    spouts' checkpointed positions reach the end of the log, every key's committed count is its true
    count, neither under nor over."""
    result = chaos.run(directory=tmp_path, records=20_000, seconds=30, guarantee="exactly_once", kill_every=3,
                       cut=10, finish_within=120, state="embedded")
    assert result.kills >= 5 and result.stops == 1 and result.cuts == 1
    assert result.lost == 0 and result.twice == 0, result
