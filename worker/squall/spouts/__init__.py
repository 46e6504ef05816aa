"""Offset spouts: storm-kafka-client's processing guarantees over partitioned, offset-addressed sources.

- :class:`~squall.spouts.log.LogSpout` reads the embedded durable log (no server needed);
- :class:`~squall.spouts.kafka.KafkaSpout` reads Kafka (needs the ``kafka`` extra);
- :class:`OffsetSpout` is their base: subclass it, with :meth:`~OffsetSpout.make_source`, for
  another source that implements :class:`Source`.

See ``docs/offset-spouts.md`` for the config keys.
"""

from squall.spouts.config import OffsetSpoutConfig
from squall.spouts.core import OffsetCore
from squall.spouts.guarantees import FirstPollOffsetStrategy, ProcessingGuarantee
from squall.spouts.records import MessageId, Record, TopicPartition, Translated
from squall.spouts.retry import RetriesExhausted, RetryPolicy
from squall.spouts.source import CommitError, Committed, Source
from squall.spouts.spout import OffsetSpout

__all__ = ["CommitError", "Committed", "FirstPollOffsetStrategy", "MessageId", "OffsetCore", "OffsetSpout",
           "OffsetSpoutConfig", "ProcessingGuarantee", "Record", "RetriesExhausted", "RetryPolicy", "Source",
           "TopicPartition", "Translated"]
