"""The offset core's guarantees, driven by hand over the real embedded log with a fake clock."""

from __future__ import annotations

import json
import sqlite3

import pytest

from squall.spouts import FirstPollOffsetStrategy, ProcessingGuarantee, RetriesExhausted, RetryPolicy, Translated
from squall.spouts.records import MessageId, TopicPartition
from squall.spouts.source import CommitError

TOPIC = "t"  # the topic the rig fixture fills
TP0 = TopicPartition(TOPIC, 0)


def delete_records(log_path, offsets, partition=0):
    """Remove records as compaction would: the offsets are gone, the end offset stays."""
    with sqlite3.connect(log_path) as db:
        db.executemany("DELETE FROM records WHERE topic = ? AND partition = ? AND off = ?",
                       [(TOPIC, partition, o) for o in offsets])


# ---- retries ------------------------------------------------------------------------------------

def test_failed_offset_is_retried_after_its_backoff_and_never_while_in_flight(rig, clock):
    r = rig(per_partition=6, retry=RetryPolicy(initial_delay=1.0, delay_period=2.0, max_delay=60.0))
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 4, 5]
    ids = r.emits.ids
    assert ids[2] == MessageId(TOPIC, 0, 2)

    r.core.fail(ids[2])
    r.core.ack(ids[4])
    clock.advance(0.999)
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 4, 5], "retried before the initial delay passed"

    clock.advance(0.001)
    r.drain()
    # Seeking back to 2 re-reads 3, 4 and 5: 3 and 5 are in flight and 4 is acked, so only 2 goes out.
    assert r.emits.offsets == [0, 1, 2, 3, 4, 5, 2]

    r.core.fail(ids[2])  # second failure: delay_period * 2
    clock.advance(3.999)
    r.drain()
    assert r.emits.offsets.count(2) == 2
    clock.advance(0.001)
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 4, 5, 2, 2]


def test_at_max_retries_the_offset_is_skipped_reported_and_committed_past(rig, clock):
    r = rig(per_partition=3, commit_period=10.0, retry=RetryPolicy(max_retries=2, delay_period=0.0))
    r.drain()
    one = r.emits.ids[1]
    for _ in range(2):
        r.core.fail(one)
        r.drain()
    assert r.emits.offsets == [0, 1, 2, 1, 1]
    assert r.reports == []

    r.core.fail(one)  # the third failure is one more than max_retries allows
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 1, 1], "an offset past its retry limit was emitted again"
    [report] = r.reports
    assert isinstance(report, RetriesExhausted) and report.msg_id == one and report.fails == 3
    assert "retry.max.retries" in str(report)

    r.core.ack(r.emits.ids[0])
    r.core.ack(r.emits.ids[2])
    clock.advance(10)
    r.step()
    assert r.committed() == {0: 3}


def test_a_record_the_translator_refuses_is_retried_not_skipped(rig):
    attempts = []

    def translate(record):
        attempts.append(record.offset)
        if record.offset == 1 and attempts.count(1) == 1:
            raise ValueError("bad record")
        return [record.offset]

    r = rig(per_partition=3, translate=translate, retry=RetryPolicy(delay_period=0.0))
    with pytest.raises(ValueError):
        r.drain()
    r.drain()
    assert [values[0] for values, _, _ in r.emits.calls] == [0, 2, 1]


# ---- max.uncommitted.offsets --------------------------------------------------------------------

def test_max_uncommitted_offsets_pauses_polling_until_a_commit(rig, clock):
    r = rig(per_partition=10, max_uncommitted_offsets=3, max_poll_records=2, commit_period=10.0,
            retry=RetryPolicy(delay_period=0.0))
    r.drain()
    # Polls of two: 0-1 (2 uncommitted, under the limit), 2-3 (4 uncommitted): then the partition pauses.
    assert r.emits.offsets == [0, 1, 2, 3]
    ids = r.emits.ids

    r.core.fail(ids[3])  # beyond the offset at the limit (the 3rd uncommitted, 2): stays paused
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3]

    r.core.fail(ids[1])  # within the limit: polled for the retry, though 3 is still not retried
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 1]

    for i in (0, 1, 2):
        r.core.ack(ids[i])
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 1], "acks alone do not free the limit; the commit does"

    clock.advance(10)
    r.drain()
    assert r.committed() == {0: 3}
    # Resumed: 3 is retried, then new records until the limit is reached again.
    assert r.emits.offsets == [0, 1, 2, 3, 1, 3, 4, 5, 6]


# ---- commit timing of each guarantee ------------------------------------------------------------

def test_at_least_once_commits_the_acked_prefix_synchronously_every_period(rig, clock):
    r = rig(per_partition=5, commit_period=10.0)
    r.drain()
    ids = r.emits.ids
    for i in (0, 1, 3):
        r.core.ack(ids[i])

    clock.advance(9.999)
    r.step()
    assert r.source.commits == [] and r.committed() == {}

    clock.advance(0.001)
    r.step()
    assert r.source.commits == [({TP0: 2}, True)], "commits only up to the first unacked offset (2)"
    assert r.committed() == {0: 2}

    r.core.ack(ids[2])
    r.core.ack(ids[4])
    clock.advance(10)
    r.step()
    assert r.source.commits[-1] == ({TP0: 5}, True)
    assert r.committed() == {0: 5}


def test_at_most_once_commits_synchronously_after_each_poll_before_emitting(rig, clock):
    r = rig(per_partition=5, guarantee=ProcessingGuarantee.AT_MOST_ONCE, max_poll_records=3)
    r.emits.observe = r.committed
    r.step()
    assert r.source.commits == [({TP0: 3}, True)]
    assert r.emits.offsets == [0] and r.emits.observed == [{0: 3}], "emitted before the commit"
    assert r.emits.ids == [None], "at most once emits untracked tuples"

    r.core.fail(MessageId(TOPIC, 0, 0))  # ignored: nothing is ever retried
    clock.advance(60)
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 4]
    assert r.source.commits == [({TP0: 3}, True), ({TP0: 5}, True)], "no periodic commit at most once"
    assert r.emits.observed[3] == {0: 5}


def test_at_most_once_emits_nothing_it_could_not_commit(rig):
    r = rig(per_partition=2, guarantee=ProcessingGuarantee.AT_MOST_ONCE)
    r.source.fail_commits = 1
    r.step()
    assert r.emits.offsets == [] and isinstance(r.reports[0], CommitError)
    r.drain()
    assert r.emits.offsets == [0, 1] and r.committed() == {0: 2}


def test_exactly_once_records_positions_rewinds_to_them_and_neither_commits_nor_retries_on_its_own(rig, clock):
    """Exactly once, the topology's checkpoints decide: the core reports where it stands (the first offset not
    emitted), goes back there when told, commits what it is given, and a failure only marks it lost (the
    topology goes back instead of a retry), whatever processing.guarantee says."""
    r = rig(per_partition=6, max_poll_records=4, exactly_once=True, guarantee=ProcessingGuarantee.AT_MOST_ONCE)
    r.step(3)
    assert r.emits.offsets == [0, 1, 2] and all(isinstance(i, MessageId) for i in r.emits.ids), "tracked"
    assert r.core.positions() == {TP0: 3}, "offset 3 is polled, not emitted"
    r.core.fail(r.emits.ids[1])
    assert r.core.lost
    clock.advance(60)
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 4, 5], "no retry"
    assert r.source.commits == [], "no commit of its own: not after a poll, not every period"
    r.core.rewind({TP0: 2})
    assert not r.core.lost and r.core.positions() == {TP0: 2}
    r.drain()
    assert r.emits.offsets[6:] == [2, 3, 4, 5]
    r.core.commit_positions({TP0: 6})
    assert r.committed() == {0: 6}


def test_no_guarantee_commits_the_polled_position_asynchronously_every_period(rig, clock):
    r = rig(per_partition=5, guarantee=ProcessingGuarantee.NO_GUARANTEE, commit_period=10.0)
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 4] and r.emits.ids == [None] * 5
    assert r.source.commits == []

    clock.advance(10)
    r.step()
    assert r.source.commits == [({TP0: 5}, False)], "the polled position, acked or not, asynchronously"
    assert r.committed() == {0: 5}

    clock.advance(10)
    r.step()
    assert len(r.source.commits) == 1, "an unchanged position is not committed again"


def test_a_failed_commit_keeps_the_acked_offsets_for_the_next_period(rig, clock):
    r = rig(per_partition=2, commit_period=10.0)
    r.drain()
    for msg_id in r.emits.ids:
        r.core.ack(msg_id)
    r.source.fail_commits = 1
    clock.advance(10)
    r.step()
    assert r.committed() == {} and isinstance(r.reports[0], CommitError)
    clock.advance(10)
    r.step()
    assert r.committed() == {0: 2}


# ---- holes --------------------------------------------------------------------------------------

def test_commits_skip_offsets_removed_by_compaction(rig, clock, log_path):
    first = rig(per_partition=8)
    delete_records(log_path, [2, 3])
    r = rig(per_partition=8, commit_period=10.0)
    first.core.close()
    r.drain()
    assert r.emits.offsets == [0, 1, 4, 5, 6, 7]
    for msg_id in r.emits.ids:
        r.core.ack(msg_id)
    clock.advance(10)
    r.step()
    assert r.committed() == {0: 8}, "the commit waited for offsets that no longer exist"


def test_a_retriable_offset_that_was_compacted_away_is_acked(rig, clock, log_path):
    r = rig(per_partition=6, commit_period=10.0, retry=RetryPolicy(delay_period=0.0))
    r.drain()
    ids = r.emits.ids
    r.core.fail(ids[2])
    delete_records(log_path, [2])
    for i in (0, 1, 3, 4, 5):
        r.core.ack(ids[i])
    r.drain()
    assert r.emits.offsets == [0, 1, 2, 3, 4, 5]
    clock.advance(10)
    r.step()
    assert r.committed() == {0: 6}


def test_after_a_commit_overtakes_the_read_position_reading_skips_ahead(rig, clock):
    r = rig(per_partition=6, max_poll_records=2, commit_period=10.0, retry=RetryPolicy(delay_period=0.0))
    r.drain()
    ids = r.emits.ids
    r.core.fail(ids[0])
    r.step()  # the retry re-reads 0-1 (polls of two) and emits 0: the read position is back at 2
    assert r.emits.offsets == [0, 1, 2, 3, 4, 5, 0]
    assert r.source.position(TP0) == 2
    for msg_id in ids:
        r.core.ack(msg_id)
    clock.advance(10)
    r.step()
    assert r.committed() == {0: 6}
    assert r.source.position(TP0) == 6


# ---- translation --------------------------------------------------------------------------------

def test_translator_picks_the_stream_and_a_none_tuple_is_acked_at_once(rig, clock):
    def evens_only(record):
        return None if record.offset % 2 else Translated([record.value["i"]], stream="evens")

    r = rig(per_partition=6, translate=evens_only, commit_period=10.0)
    r.drain()
    assert [(values, stream) for values, stream, _ in r.emits.calls] == [([0], "evens"), ([2], "evens"),
                                                                         ([4], "evens")]
    for msg_id in r.emits.ids:
        r.core.ack(msg_id)
    clock.advance(10)
    r.step()
    assert r.committed() == {0: 6}, "skipped (None) records must not hold the commit back"


# ---- first poll -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("strategy", "committed_by", "first"), [
    (FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST, None, 0),
    (FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST, "other", 4),
    (FirstPollOffsetStrategy.UNCOMMITTED_LATEST, None, 10),
    (FirstPollOffsetStrategy.UNCOMMITTED_LATEST, "other", 4),
    (FirstPollOffsetStrategy.EARLIEST, "other", 0),
    (FirstPollOffsetStrategy.EARLIEST, "topo", 4),
    (FirstPollOffsetStrategy.LATEST, "other", 10),
    (FirstPollOffsetStrategy.LATEST, "topo", 4),
])
def test_first_poll_offset_strategy(rig, strategy, committed_by, first):
    setup = rig(per_partition=10)
    if committed_by:
        setup.log.commit("g", TOPIC, {0: 4}, metadata=json.dumps({"topology": committed_by, "task": 0}))
    r = rig(first_poll=strategy, topology="topo")
    setup.log.append(TOPIC, [(None, {"p": 0, "i": 10})])  # so a spout that starts at the end reads one
    r.drain()
    assert r.emits.offsets[0] == first


# ---- rebalance ----------------------------------------------------------------------------------

def test_revoked_partitions_commit_first_and_their_late_acks_and_fails_are_ignored(rig, clock):
    r = rig(partitions=2, per_partition=3, commit_period=10.0)
    r.drain()
    by_partition = {p: [m for m in r.emits.ids if m.partition == p] for p in (0, 1)}
    r.core.ack(by_partition[0][0])
    r.core.ack(by_partition[0][1])

    r.core.on_revoked([TP0])
    assert r.committed() == {0: 2}, "acked offsets of a revoked partition are committed on revoke"
    assert r.core.assigned == {TopicPartition(TOPIC, 1)}

    r.core.ack(by_partition[0][2])
    r.core.fail(by_partition[0][2])
    emitted = len(r.emits.calls)
    clock.advance(10)
    r.drain()
    assert len(r.emits.calls) == emitted and r.committed() == {0: 2}

    r.core.ack(by_partition[1][0])
    r.core.on_revoked([TopicPartition(TOPIC, 1)], lost=True)
    assert r.committed() == {0: 2}, "a lost partition cannot be committed for"


def test_a_partition_paused_at_its_uncommitted_limit_is_read_again_when_a_rebalance_gives_it_back(rig, clock):
    """The core forgot that it had paused a revoked partition, and a Kafka client keeps the pause across an
    eager rebalance: given back to the same task, the partition was never read again (found by the
    offset-spout audit; tests/spouts/test_kafka.py shows it with librdkafka)."""
    r = rig(per_partition=10, max_uncommitted_offsets=2, max_poll_records=2)
    r.drain()
    assert r.emits.offsets == [0, 1]  # at the limit: paused
    r.core.ack(r.emits.ids[0])
    r.core.on_revoked([TP0])  # commits offset 1
    assert r.committed() == {0: 1}
    r.core.on_assigned([TP0])
    clock.advance(1)
    r.drain()
    assert r.emits.offsets[2:4] == [1, 2]  # from the commit, up to the limit again


@pytest.mark.parametrize(("guarantee", "again"), [
    (ProcessingGuarantee.AT_LEAST_ONCE, [3, 4, 5, 6]),  # from the first offset not acked: 3 is emitted again
    (ProcessingGuarantee.NO_GUARANTEE, [4, 5, 6]),  # from what it had read to
])
@pytest.mark.parametrize("strategy", [FirstPollOffsetStrategy.LATEST, FirstPollOffsetStrategy.UNCOMMITTED_LATEST])
def test_a_partition_given_back_before_anything_was_committed_starts_where_this_task_left_it(
        rig, strategy, guarantee, again):
    """The first-poll strategy applied again to a partition a rebalance revoked and gave back before any
    commit: with ``latest`` it sought to the end, skipping what was read and not processed and what was
    not read yet; at least once, those records were never processed (found by the offset-spout audit)."""
    r = rig(per_partition=3, first_poll=strategy, guarantee=guarantee, max_poll_records=1, commit_period=3600.0)
    r.log.append(TOPIC, [(None, {"p": 0, "i": i}) for i in range(3, 6)])  # offsets 3, 4 and 5, after the start
    r.step()
    assert r.emits.offsets == [3]  # not acked; 4 and 5 not read yet
    r.core.on_revoked([TP0])
    assert r.committed() == {}
    r.core.on_assigned([TP0])
    r.log.append(TOPIC, [(None, {"p": 0, "i": 6})])
    r.drain()
    assert r.emits.offsets[1:] == again


def test_close_commits_the_acked_offsets(rig):
    r = rig(per_partition=3, commit_period=3600.0)
    r.drain()
    r.core.ack(r.emits.ids[0])
    r.core.close()
    assert r.committed() == {0: 1}


# ---- lag ----------------------------------------------------------------------------------------

def test_partition_offsets_give_the_lag_from_the_commit_to_the_end_refreshed_every_second(rig, clock):
    r = rig(partitions=2, per_partition=5, commit_period=10.0)
    tp1 = TopicPartition(TOPIC, 1)
    r.step()
    assert {tp: (o.committed, o.latest, o.lag) for tp, o in r.core.partition_offsets().items()} == {
        TP0: (0, 5, 5), tp1: (0, 5, 5)}
    r.drain()
    for msg_id in r.emits.ids:
        if msg_id.partition == 0:
            r.core.ack(msg_id)
    clock.advance(10)
    r.step()  # commits partition 0's acked offsets
    assert r.core.partition_offsets()[TP0].lag == 0 and r.core.partition_offsets()[tp1].lag == 5

    r.log.append(TOPIC, [(None, {"more": i}) for i in range(6)])  # 3 more records in each partition
    clock.advance(0.999)
    r.step()
    assert r.core.partition_offsets()[TP0].latest == 5, "end offsets are read once a second, not every call"
    clock.advance(0.001)
    r.step()
    offsets = r.core.partition_offsets()
    assert (offsets[TP0].latest, offsets[TP0].lag, offsets[tp1].lag) == (8, 3, 8)


def test_without_a_commit_or_an_end_offset_there_is_no_lag(rig):
    r = rig(guarantee=ProcessingGuarantee.NO_GUARANTEE)
    offsets = r.core.partition_offsets()[TP0]
    assert (offsets.committed, offsets.latest, offsets.lag) == (None, None, None)
    r.step()
    assert r.core.partition_offsets()[TP0].lag is None  # no position committed yet
