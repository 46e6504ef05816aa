"""Reading Kafka with storm-kafka-client's guarantees, through confluent-kafka (the ``kafka`` extra).

``confluent_kafka`` is imported when a spout opens, so the engine runs without it. The consumer's
own offset management is switched off: the offset core decides what to commit and when.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from squall.errors import ConfigError, SquallError
from squall.spouts.config import get_enum
from squall.spouts.records import Record, TopicPartition
from squall.spouts.source import CommitError, Committed, RebalanceListener
from squall.spouts.spout import OffsetSpout
from squall.state.config import exactly_once

if TYPE_CHECKING:
    import confluent_kafka

log = logging.getLogger(__name__)

#: How long the calls that must wait for the broker (committed offsets, watermarks, metadata,
#: synchronous commits) may take before they fail.
REQUEST_TIMEOUT = 30.0

#: Seconds between two queries of the assigned partitions' end offsets from the broker (for the lag
#: metrics), and how long one query may wait. librdkafka's cached high watermark moves only with fetch
#: responses, and fetching stops while a partition is paused (max.uncommitted.offsets) or the consumer's
#: queue is full: without the queries the lag would freeze while the backlog grows.
END_OFFSETS_REFRESH = 5.0
END_OFFSETS_TIMEOUT = 2.0

# librdkafka's "no offset": what position/committed report for a partition without one.
_NO_OFFSET = -1001


def _import() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise ConfigError("the Kafka spout needs confluent-kafka: pip install 'squall[kafka]'") from None
    return confluent_kafka


def consumer_config(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The librdkafka consumer config for ``kafka.config``: checked, with the spout's defaults filled in."""
    config = dict(settings)
    if "enable.auto.commit" in config:
        raise ConfigError("kafka.config: remove 'enable.auto.commit'; the spout commits offsets itself, "
                          "when processing.guarantee says (at_least_once, at_most_once or no_guarantee)")
    for required, example in (("bootstrap.servers", "kafka:9092"), ("group.id", "my-topology")):
        if not config.get(required):
            raise ConfigError(f"kafka.config needs {required!r} (e.g. {example!r})")
    config["enable.auto.commit"] = False
    # Only used when a committed offset no longer exists (retention): read what is left, lose nothing.
    config.setdefault("auto.offset.reset", "earliest")
    # librdkafka's log lines go to Python logging rather than straight to stderr.
    config.setdefault("logger", logging.getLogger("squall.spouts.kafka.librdkafka"))
    config.setdefault("on_commit", _log_commit_errors)
    return config


def _log_commit_errors(err: Any, partitions: list[Any]) -> None:
    if err is not None:
        log.warning("asynchronous commit failed: %s", err)


class EndOffsetsRefresher(threading.Thread):
    """Asks the broker for the end offsets of ``partitions`` every :data:`END_OFFSETS_REFRESH` seconds, on
    a thread of its own: a query waits (up to :data:`END_OFFSETS_TIMEOUT`), the spout's thread must not.
    librdkafka's client is thread-safe, so it shares the spout's consumer."""

    def __init__(self, consumer: confluent_kafka.Consumer, ck: Any) -> None:
        super().__init__(name="kafka-end-offsets", daemon=True)
        self._consumer, self._ck = consumer, ck
        #: What the spout's thread has assigned; replaced whole, never mutated.
        self.partitions: frozenset[TopicPartition] = frozenset()
        #: The broker's latest answers; replaced whole by this thread.
        self.latest: dict[TopicPartition, int] = {}
        self._stopped = threading.Event()

    def run(self) -> None:
        while True:
            partitions = self.partitions
            latest = {tp: end for tp, end in self.latest.items() if tp in partitions}
            for tp in sorted(partitions):
                if self._stopped.is_set():
                    return
                try:
                    marks = self._consumer.get_watermark_offsets(self._ck.TopicPartition(tp.topic, tp.partition),
                                                                 timeout=END_OFFSETS_TIMEOUT, cached=False)
                except self._ck.KafkaException as exc:
                    log.debug("end offset of %s unknown: %s", tp, exc)  # the last answer stands
                    continue
                if marks is not None and marks[1] >= 0:
                    latest[tp] = marks[1]
            self.latest = latest
            if self._stopped.wait(END_OFFSETS_REFRESH):
                return

    def stop(self) -> None:
        """Stop, and wait for a query in progress: the consumer must outlive it (its timeout bounds the wait)."""
        self._stopped.set()
        if self.is_alive():
            self.join()


class KafkaSource:
    """A :class:`~squall.spouts.source.Source` over a confluent-kafka ``Consumer``.

    ``subscribe=True`` joins the consumer group (partitions come and go with rebalances);
    ``subscribe=False`` assigns partitions statically: task ``task_index`` of ``num_tasks`` takes
    the partitions ``p`` with ``p % num_tasks == task_index`` of each topic.
    """

    def __init__(self, config: Mapping[str, Any], *, topics: list[str], subscribe: bool = True,
                 task_index: int = 0, num_tasks: int = 1) -> None:
        self.config = consumer_config(config)
        self.topics = topics
        self.subscribe = subscribe
        self.task_index, self.num_tasks = task_index, num_tasks
        self._ck = _import()
        self._consumer: confluent_kafka.Consumer | None = None
        self._end_offsets: EndOffsetsRefresher | None = None
        self._listener: RebalanceListener | None = None
        # Positions are kept here, not asked of librdkafka: it knows none until a record is consumed,
        # while the core needs them right after a seek (for commits and the catch-up check).
        self._positions: dict[TopicPartition, int] = {}
        # Set while the core handles an assignment: seeks then become the starting offsets of assign().
        self._starting: dict[TopicPartition, int] | None = None
        self._cooperative = "cooperative" in str(self.config.get("partition.assignment.strategy", ""))

    @property
    def consumer(self) -> confluent_kafka.Consumer:
        if self._consumer is None:
            raise RuntimeError("KafkaSource.start() was not called")
        return self._consumer

    def start(self, listener: RebalanceListener) -> None:
        self._listener = listener
        try:
            self._consumer = self._ck.Consumer(self.config)
        except self._ck.KafkaException as exc:
            raise ConfigError(f"kafka.config is invalid: {exc.args[0].str()}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"kafka.config is invalid: {exc}") from None
        self._end_offsets = EndOffsetsRefresher(self._consumer, self._ck)
        if self.subscribe:
            self.consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                    on_lost=self._on_lost)
        else:
            self._assign(self._my_partitions(), incremental=False)
        self._end_offsets.start()

    def _my_partitions(self) -> list[TopicPartition]:
        """Assign mode: this task's share of the topics' partitions."""
        mine = []
        metadata = self.consumer.list_topics(timeout=REQUEST_TIMEOUT)
        for topic in self.topics:
            found = metadata.topics.get(topic)
            if topic.startswith("^"):
                raise ConfigError(f"kafka.topics: {topic!r} is a pattern, which only kafka.subscription: subscribe "
                                  "reads (assign mode assigns the partitions of named topics); subscribe, or name "
                                  "the topics")
            if found is None or found.error is not None:
                why = found.error.str() if found else "not in the metadata"
                raise ConfigError(f"kafka.topics: topic {topic!r} does not exist on "
                                  f"{self.config['bootstrap.servers']} ({why}); create it first")
            mine += [TopicPartition(topic, p) for p in sorted(found.partitions)
                     if p % self.num_tasks == self.task_index]
        return mine

    def _assign(self, partitions: list[TopicPartition], *, incremental: bool) -> None:
        self._starting = {}
        try:
            if self._listener is not None:
                self._listener.on_assigned(partitions)
            offsets = [self._ck.TopicPartition(tp.topic, tp.partition,
                                               self._starting.get(tp, self._positions.get(tp, _NO_OFFSET)))
                       for tp in partitions]
        finally:
            self._starting = None
        if incremental:
            self.consumer.incremental_assign(offsets)
        else:
            self.consumer.assign(offsets)
        if self._end_offsets is not None:
            kept = self._end_offsets.partitions if incremental else frozenset()
            self._end_offsets.partitions = kept | set(partitions)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        self._assign(tps, incremental=self._cooperative)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._revoked(partitions, lost=False)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._revoked(partitions, lost=True)

    def _revoked(self, partitions: list[Any], *, lost: bool) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        if self._listener is not None:
            self._listener.on_revoked(tps, lost=lost)
        for tp in tps:
            self._positions.pop(tp, None)
        if self._end_offsets is not None:
            self._end_offsets.partitions = self._end_offsets.partitions - set(tps)
        # The client unassigns after this returns (eager) or incrementally (cooperative).

    def poll(self, max_records: int) -> list[Record]:
        records = []
        # timeout=0: next_tuple must not block; librdkafka fetches in its own threads meanwhile.
        for message in self.consumer.consume(num_messages=max_records, timeout=0):
            err = message.error()
            if err is not None:
                if err.fatal():
                    raise SquallError(f"Kafka consumer failed: {err.str()}")
                if err.code() != self._ck.KafkaError._PARTITION_EOF:
                    log.warning("Kafka consumer: %s", err.str())
                continue
            kind, stamp = message.timestamp()
            tp = TopicPartition(message.topic(), message.partition())
            records.append(Record(tp.topic, tp.partition, message.offset(), message.key(), message.value(),
                                  None if kind == self._ck.TIMESTAMP_NOT_AVAILABLE else stamp / 1000.0))
            self._positions[tp] = message.offset() + 1
        return records

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if self._starting is not None:
            self._starting[tp] = offset
        else:
            self.consumer.seek(self._ck.TopicPartition(tp.topic, tp.partition, offset))
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def watermarks(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: self.consumer.get_watermark_offsets(self._ck.TopicPartition(tp.topic, tp.partition),
                                                        timeout=REQUEST_TIMEOUT)
                for tp in partitions}

    def end_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        # The newer of librdkafka's cached high watermark (updated by every fetch response, no request to
        # the broker) and the broker's last answer to the refresher (fetches stop for a paused partition).
        queried = self._end_offsets.latest if self._end_offsets is not None else {}
        out = {}
        for tp in partitions:
            known = [queried[tp]] if tp in queried else []
            try:
                marks = self.consumer.get_watermark_offsets(self._ck.TopicPartition(tp.topic, tp.partition),
                                                            cached=True)
            except self._ck.KafkaException:
                marks = None  # not fetched from yet
            if marks is not None and marks[1] >= 0:
                known.append(marks[1])
            if known:
                out[tp] = max(known)
        return out

    def committed(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, Committed]:
        if not partitions:
            return {}
        request = [self._ck.TopicPartition(tp.topic, tp.partition) for tp in partitions]
        found = self.consumer.committed(request, timeout=REQUEST_TIMEOUT)
        return {TopicPartition(p.topic, p.partition): Committed(p.offset, p.metadata or "")
                for p in found if p.offset >= 0}

    def commit(self, offsets: Mapping[TopicPartition, int], *, metadata: str, sync: bool) -> None:
        request = [self._ck.TopicPartition(tp.topic, tp.partition, offset, metadata=metadata)
                   for tp, offset in offsets.items()]
        try:
            result = self.consumer.commit(offsets=request, asynchronous=not sync)
        except self._ck.KafkaException as exc:
            raise CommitError(f"Kafka commit failed: {exc.args[0].str()}") from exc
        failed = [f"{p.topic}/{p.partition}: {p.error.str()}" for p in result or () if p.error is not None]
        if failed:
            raise CommitError("Kafka commit failed for " + "; ".join(failed))

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        self.consumer.pause([self._ck.TopicPartition(tp.topic, tp.partition) for tp in partitions])

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        self.consumer.resume([self._ck.TopicPartition(tp.topic, tp.partition) for tp in partitions])

    def close(self) -> None:
        if self._end_offsets is not None:
            self._end_offsets.stop()
            self._end_offsets = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class Subscription(StrEnum):
    """How a Kafka spout gets its partitions: from the consumer group, or statically by task index."""

    SUBSCRIBE = "subscribe"
    ASSIGN = "assign"


class KafkaSpout(OffsetSpout):
    """Reads Kafka topics. Config keys (besides the common ones): ``kafka.topics`` (required),
    ``kafka.config`` (librdkafka consumer settings; ``bootstrap.servers`` and ``group.id`` required),
    ``kafka.subscription`` (``subscribe``, the default, or ``assign``).

    Records' keys and values are bytes; override :meth:`translate` to decode them.
    """

    config_keys: ClassVar[frozenset[str]] = frozenset({"kafka.topics", "kafka.config", "kafka.subscription"})
    config_prefixes: ClassVar[tuple[str, ...]] = ("kafka.", "retry.")

    @classmethod
    def check_config(cls, component: str, conf: dict[str, Any], *, message_timeout_seconds: int) -> None:
        super().check_config(component, conf, message_timeout_seconds=message_timeout_seconds)
        mode = get_enum(conf, "kafka.subscription", Subscription, Subscription.SUBSCRIBE)
        if exactly_once(conf) and mode is not Subscription.ASSIGN:
            raise ConfigError(f"spout {component!r}: topology.state.guarantee: exactly_once keeps each task's "
                              "partitions and positions in its checkpoints, and a consumer group's rebalance would "
                              "move partitions between tasks; set kafka.subscription: assign")

    def make_source(self) -> KafkaSource:
        topics = self.conf.get("kafka.topics")
        if isinstance(topics, str):
            topics = [topics]
        if not topics or not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
            raise ConfigError(f"kafka.topics must be a topic name or a list of them, got {topics!r}")
        settings = self.conf.get("kafka.config")
        if not isinstance(settings, dict):
            raise ConfigError("kafka.config must be a mapping of librdkafka consumer settings, e.g. "
                              "{bootstrap.servers: 'kafka:9092', group.id: 'my-topology'}")
        mode = get_enum(self.conf, "kafka.subscription", Subscription, Subscription.SUBSCRIBE)
        return KafkaSource(settings, topics=topics, subscribe=mode is Subscription.SUBSCRIBE,
                           task_index=self.context.this_task_index,
                           num_tasks=len(self.context.this_component_tasks))
