"""OffsetManager: only the contiguous acked prefix is committable; compaction gaps are skipped."""

from squall.spouts.offsets import OffsetManager


def emitted(committed, offsets):
    manager = OffsetManager(committed)
    for offset in offsets:
        manager.add_emitted(offset)
    return manager


def test_commit_stops_at_the_first_unacked_offset():
    m = emitted(0, range(6))
    for offset in (0, 1, 3, 4):
        m.ack(offset)
    assert m.next_commit_offset() == 2
    m.ack(2)
    assert m.next_commit_offset() == 5
    m.ack(5)
    assert m.next_commit_offset() == 6


def test_nothing_acked_commits_nothing():
    m = emitted(7, [7, 8])
    m.ack(8)
    assert m.next_commit_offset() == 7


def test_offsets_never_emitted_do_not_hold_the_commit_back():
    m = emitted(10, [10, 11, 14, 15])  # 12 and 13 were compacted away
    for offset in (10, 11, 14, 15):
        m.ack(offset)
    assert m.next_commit_offset() == 16

    m = emitted(10, [10, 11, 14, 15])
    for offset in (10, 11, 15):
        m.ack(offset)
    assert m.next_commit_offset() == 12, "an emitted, unacked offset after a gap still holds it"


def test_a_committed_offset_below_the_first_record_is_skipped_over():
    m = emitted(0, [100, 101])  # retention removed 0-99 before the spout read them
    m.ack(100)
    assert m.next_commit_offset() == 101


def test_commit_forgets_what_it_covers_and_counts_the_rest_as_uncommitted():
    m = emitted(0, range(5))
    for offset in (0, 1, 2):
        m.ack(offset)
    assert m.num_uncommitted == 5
    m.commit(m.next_commit_offset())
    assert m.committed == 3
    assert m.num_uncommitted == 2 and m.nth_uncommitted(1) == 3
    assert not m.is_acked(0) and not m.is_emitted(2)


def test_emitted_offsets_stay_sorted_and_unique():
    m = emitted(0, [0, 3, 1, 3, 2])
    assert m.num_uncommitted == 4
    assert [m.nth_uncommitted(n) for n in (1, 2, 3, 4)] == [0, 1, 2, 3]
    assert m.emitted_between(1, 3) == [1, 2]
