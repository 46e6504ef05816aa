"""``OffsetSpout``: the base of spouts that read partitioned, offset-addressed records (Kafka, the log)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from squall.api import Spout, SpoutOutputCollector, TopologyContext
from squall.conf_keys import refuse_misspelled, warn_unknown
from squall.spouts.config import COMMON_KEYS, OffsetSpoutConfig
from squall.spouts.core import OffsetCore, PartitionOffsets
from squall.spouts.records import MessageId, Record, TopicPartition, Translated, default_translate
from squall.spouts.source import Source
from squall.state.config import exactly_once


class OffsetSpout(Spout):
    """Emits the records of a :class:`~squall.spouts.source.Source` with storm-kafka-client's guarantees.

    Subclasses provide :meth:`make_source`; override :meth:`translate` (and ``outputs``) to
    choose the tuple a record becomes::

        class Clicks(LogSpout):
            outputs = ["user", "url"]

            def translate(self, record):
                return [record.value["user"], record.value["url"]]
    """

    outputs: ClassVar = ["topic", "partition", "offset", "key", "value"]

    #: Config keys read besides the common ones; unknown keys under ``config_prefixes`` get a warning.
    config_keys: ClassVar[frozenset[str]] = frozenset()
    config_prefixes: ClassVar[tuple[str, ...]] = ("retry.",)

    core: OffsetCore

    def make_source(self) -> Source:
        """The source to read; ``self.conf`` and ``self.context`` are set when this is called."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_source()")

    def translate(self, record: Record) -> list[Any] | Translated | None:
        """The tuple for ``record``: its values (default stream), a :class:`Translated`, or None to skip
        it (a skipped record counts as processed at once)."""
        return default_translate(record)

    @classmethod
    def check_config(cls, component: str, conf: dict[str, Any], *, message_timeout_seconds: int) -> None:
        """Refuse a misspelled key, and a bad value of the common keys, before any task starts."""
        refuse_misspelled(component, conf, COMMON_KEYS | cls.config_keys)
        OffsetSpoutConfig.from_conf(conf)

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        super().open(conf, context, collector)
        warn_unknown(conf, prefixes=self.config_prefixes, known=COMMON_KEYS | self.config_keys, what="offset spout")
        config = OffsetSpoutConfig.from_conf(conf)
        # exactly once, nothing is read before the topology's checkpoints say where from (the first rewind)
        self._rewound = not exactly_once(conf)
        source = self.make_source()
        try:
            self.core = OffsetCore(source, config=config, emit=self._emit, translate=self.translate,
                                   report=collector.report_error, topology=context.topology_name,
                                   task=context.this_task_index, exactly_once=not self._rewound)
            self.core.start()
        except BaseException:
            source.close()  # a spout that failed to open is not closed by anyone else
            raise

    def partition_offsets(self) -> dict[TopicPartition, PartitionOffsets]:
        """Committed and end offsets per assigned partition: the ``squall_spout_*`` metrics read them."""
        core = getattr(self, "core", None)  # None until open() succeeded
        return core.partition_offsets() if core is not None else {}

    def next_tuple(self) -> None:
        if self._rewound:
            self.core.next_tuple()

    def ack(self, msg_id: Any) -> None:
        self.core.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.core.fail(msg_id)

    def deactivate(self) -> None:
        # Storm commits on deactivate too: a deactivated topology may be killed next.
        self.core.commit()

    def close(self) -> None:
        self.core.close()

    # -- exactly once: what the topology's checkpoints record of this task, and the rewind to it ------------

    def snapshot(self) -> dict[str, int] | None:
        """Each partition's position (``"topic/partition"`` → the first offset not emitted yet), for a
        checkpoint to record; None when a tuple emitted since the last rewind failed (no checkpoint may
        record its offset as done: the topology goes back instead)."""
        core = self.core
        return None if core.lost else {str(tp): offset for tp, offset in core.positions().items()}

    def rewind(self, positions: Mapping[str, int]) -> None:
        """Read again from the positions the last committed checkpoint recorded."""
        self.core.rewind({_partition(name): offset for name, offset in positions.items()})
        self._rewound = True

    def commit_positions(self, positions: Mapping[str, int]) -> None:
        """A checkpoint that recorded ``positions`` committed: commit them to the source as well."""
        self.core.commit_positions({_partition(name): offset for name, offset in positions.items()})

    def _emit(self, values: list[Any], stream: str, msg_id: MessageId | None) -> None:
        self.collector.emit(values, stream=stream, msg_id=msg_id)


def _partition(name: str) -> TopicPartition:
    topic, _, partition = name.rpartition("/")
    return TopicPartition(topic, int(partition))
