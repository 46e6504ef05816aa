"""What a source yields and how a spout names it: partitions, records, message ids, translated tuples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from squall.api import DEFAULT_STREAM


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    """One partition of a topic: the unit of ordering, assignment and committed offsets."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(frozen=True, slots=True)
class Record:
    """One record read from a partition; ``timestamp`` is in seconds since the epoch, if known."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: float | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class MessageId:
    """The ``msg_id`` of a tuple emitted for a record: which offset of which partition it stands for."""

    topic: str
    partition: int
    offset: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"


@dataclass(frozen=True, slots=True)
class Translated:
    """A translator's result when the tuple goes to a stream other than ``default``."""

    values: list[Any]
    stream: str = DEFAULT_STREAM


def default_translate(record: Record) -> list[Any]:
    """The default tuple of a record: ``[topic, partition, offset, key, value]``."""
    return [record.topic, record.partition, record.offset, record.key, record.value]
