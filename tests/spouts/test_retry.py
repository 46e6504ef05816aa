"""The exponential backoff retry service."""

from squall.spouts.config import OffsetSpoutConfig
from squall.spouts.records import MessageId, TopicPartition
from squall.spouts.retry import RetryPolicy, RetryService


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_storm_defaults():
    policy = OffsetSpoutConfig.from_conf({}).retry
    assert policy == RetryPolicy(initial_delay=0.0, delay_period=0.002, max_retries=None, max_delay=10.0)


def test_delay_starts_at_the_initial_delay_then_doubles_the_period_up_to_the_cap():
    policy = RetryPolicy(initial_delay=0.5, delay_period=1.0, max_delay=5.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 2.0, 4.0, 5.0, 5.0]
    assert policy.delay(10_000) == 5.0  # no overflow for a tuple that keeps failing


def test_schedule_refuses_once_max_retries_are_used_up():
    service = RetryService(RetryPolicy(max_retries=2), now=Clock())
    msg = MessageId("t", 0, 5)
    assert service.schedule(msg) and service.schedule(msg)
    assert not service.schedule(msg)
    assert service.fails(msg) == 3 and not service.is_scheduled(msg)


def test_unlimited_retries_by_default():
    service = RetryService(RetryPolicy(), now=Clock())
    msg = MessageId("t", 0, 5)
    assert all(service.schedule(msg) for _ in range(1000))


def test_earliest_retriable_offsets_are_per_partition_and_only_once_due():
    clock = Clock()
    service = RetryService(RetryPolicy(initial_delay=1.0, delay_period=1.0, max_delay=100.0), now=clock)
    a, b, c = MessageId("t", 0, 7), MessageId("t", 0, 3), MessageId("t", 1, 9)
    service.schedule(a)
    service.schedule(c)
    service.schedule(b)
    service.schedule(b)  # second failure of b: due at 2.0
    assert service.earliest_retriable_offsets() == {}
    clock.t = 1.0
    assert service.earliest_retriable_offsets() == {TopicPartition("t", 0): 7, TopicPartition("t", 1): 9}
    assert service.is_ready(a) and not service.is_ready(b)
    clock.t = 2.0
    assert service.earliest_retriable_offsets()[TopicPartition("t", 0)] == 3


def test_remove_keeps_the_failure_count_and_forget_drops_it():
    service = RetryService(RetryPolicy(), now=Clock())
    msg = MessageId("t", 0, 1)
    service.schedule(msg)
    service.remove(msg)
    assert not service.is_scheduled(msg) and service.fails(msg) == 1
    service.forget(msg)
    assert service.fails(msg) == 0


def test_retain_drops_partitions_no_longer_assigned():
    service = RetryService(RetryPolicy(), now=Clock())
    keep, drop = MessageId("t", 0, 1), MessageId("t", 1, 1)
    service.schedule(keep)
    service.schedule(drop)
    service.retain([TopicPartition("t", 0)])
    assert service.is_scheduled(keep) and not service.is_scheduled(drop) and service.fails(drop) == 0
