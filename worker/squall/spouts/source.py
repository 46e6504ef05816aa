"""The small interface an offset spout reads through: Kafka and the embedded log both implement it.

A source is driven from one thread. Offsets follow Kafka's convention: a committed offset and a
position are the offset of the *next* record to read.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from squall.errors import SquallError
from squall.spouts.records import Record, TopicPartition


@dataclass(frozen=True, slots=True)
class Committed:
    """A group's committed offset for a partition, with the metadata the committer stored."""

    offset: int
    metadata: str = ""


class CommitError(SquallError):
    """A commit did not succeed; the offsets stay uncommitted and the next commit retries them."""


class RebalanceListener(Protocol):
    """Told by the source when partitions are assigned to or taken away from this spout."""

    def on_assigned(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` are now this spout's; seek each to where reading should start."""

    def on_revoked(self, partitions: Collection[TopicPartition], *, lost: bool = False) -> None:
        """``partitions`` are no longer this spout's (``lost``: too late to commit for them)."""


class Source(Protocol):
    """Partitioned records with a consumer group's committed offsets (Kafka's consumer, minus the rest)."""

    def start(self, listener: RebalanceListener) -> None:
        """Subscribe or assign; the listener hears of every (re)assignment, possibly during :meth:`poll`."""

    def poll(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records from the assigned, unpaused partitions, without blocking."""

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record :meth:`poll` returns for ``tp``."""

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record :meth:`poll` returns for ``tp``."""

    def watermarks(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """Each partition's (beginning, end) offsets: its first record and the offset after its last."""

    def end_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end offset as far as the source knows it without waiting (for lag metrics);
        partitions it knows nothing of yet are left out."""

    def committed(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, Committed]:
        """The group's committed offsets; partitions without a commit are left out."""

    def commit(self, offsets: Mapping[TopicPartition, int], *, metadata: str, sync: bool) -> None:
        """Commit offsets for the group; ``sync`` waits for the outcome. Raises :class:`CommitError`."""

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` from :meth:`poll` until resumed."""

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        """Return records of ``partitions`` from :meth:`poll` again."""

    def close(self) -> None:
        """Release connections and files."""
