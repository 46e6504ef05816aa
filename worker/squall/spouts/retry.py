"""Retrying failed tuples with exponential backoff (storm-kafka-client's retry service)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from squall.errors import SquallError
from squall.spouts.records import MessageId, TopicPartition


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a failed tuple waits before it is emitted again, and how often it may be.

    The first failure waits ``initial_delay``; failure ``n`` > 1 waits ``delay_period * 2**(n-1)``;
    no wait exceeds ``max_delay``. After ``max_retries`` retries (``None``: no limit) a further
    failure gives the offset up: it is acked, so the commit moves past it, and reported.
    Durations are in seconds.
    """

    initial_delay: float = 0.0
    delay_period: float = 0.002
    max_retries: int | None = None
    max_delay: float = 10.0

    def delay(self, fails: int) -> float:
        """The wait after the ``fails``-th failure of a tuple."""
        if fails <= 1:
            wait = self.initial_delay
        else:
            # The exponent is capped so the float stays finite for a tuple that fails forever.
            wait = self.delay_period * 2.0 ** min(fails - 1, 64)
        return min(wait, self.max_delay)


class RetriesExhausted(SquallError):
    """A record failed more often than ``retry.max.retries`` allows; it was skipped (acked)."""

    def __init__(self, msg_id: MessageId, *, fails: int, max_retries: int | None) -> None:
        super().__init__(
            f"record {msg_id} failed {fails} time(s) and retry.max.retries is {max_retries}, so it is "
            "skipped: its offset is acked and will be committed. Raise retry.max.retries (or unset it "
            "for no limit) to keep retrying such records"
        )
        self.msg_id = msg_id
        self.fails = fails


class RetryService:
    """Failed message ids waiting for their retry time, and how often each has failed."""

    def __init__(self, policy: RetryPolicy, *, now: Callable[[], float]) -> None:
        self.policy = policy
        self._now = now
        self._due: dict[MessageId, float] = {}
        self._fails: dict[MessageId, int] = {}

    def schedule(self, msg_id: MessageId) -> bool:
        """Count a failure of ``msg_id`` and schedule its retry; False when retries are exhausted."""
        fails = self._fails.get(msg_id, 0) + 1
        self._fails[msg_id] = fails
        limit = self.policy.max_retries
        if limit is not None and fails > limit:
            self._due.pop(msg_id, None)
            return False
        self._due[msg_id] = self._now() + self.policy.delay(fails)
        return True

    def fails(self, msg_id: MessageId) -> int:
        """How often ``msg_id`` has failed since it was last acked."""
        return self._fails.get(msg_id, 0)

    def is_scheduled(self, msg_id: MessageId) -> bool:
        return msg_id in self._due

    def is_ready(self, msg_id: MessageId) -> bool:
        """Whether ``msg_id`` is scheduled and its retry time has come."""
        due = self._due.get(msg_id)
        return due is not None and due <= self._now()

    def remove(self, msg_id: MessageId) -> None:
        """``msg_id`` was emitted again: it is no longer waiting (its failure count stays)."""
        self._due.pop(msg_id, None)

    def forget(self, msg_id: MessageId) -> None:
        """``msg_id`` is done (acked or given up): drop its schedule and failure count."""
        self._due.pop(msg_id, None)
        self._fails.pop(msg_id, None)

    def retain(self, partitions: Collection[TopicPartition]) -> None:
        """Forget every message id of a partition not in ``partitions`` (after a rebalance)."""
        keep = set(partitions)
        self._due = {m: t for m, t in self._due.items() if m.tp in keep}
        self._fails = {m: n for m, n in self._fails.items() if m.tp in keep}

    def earliest_retriable_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the lowest offset whose retry time has come: where to seek to retry."""
        now = self._now()
        earliest: dict[TopicPartition, int] = {}
        for msg_id, due in self._due.items():
            if due <= now:
                tp = msg_id.tp
                if tp not in earliest or msg_id.offset < earliest[tp]:
                    earliest[tp] = msg_id.offset
        return earliest
