"""Build a topology in Python, Storm style; ``build()`` returns the same spec YAML loads into::

    >>> from squall import BasicBolt
    >>> from squall.testing import TestingSink, TestingSpout
    >>> class Split(BasicBolt):
    ...     outputs = ["word"]
    ...     def execute(self, tup, collector):
    ...         for word in tup["value"].split():
    ...             collector.emit([word])
    >>> builder = TopologyBuilder("wordcount")
    >>> builder.set_spout("sentences", TestingSpout)
    >>> _ = builder.set_bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
    >>> _ = builder.set_bolt("count", TestingSink, parallelism=2).fields_grouping("split", ["word"])
    >>> spec = builder.build(workers=2)
    >>> spec.workers, [b.name for b in spec.bolts], spec.bolts[1].inputs[0].grouping.fields
    (2, ['split', 'count'], ['word'])
"""

from __future__ import annotations

from typing import Any

from pydantic.alias_generators import to_camel

from squall.api import StatefulBolt
from squall.system import DEFAULT_STREAM
from squall.topology.spec import TopologySpec
from squall.windows.api import Count, Duration


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _component(name: str, cls: type, parallelism: int, tasks: int | None, config: dict[str, Any] | None) -> dict:
    doc: dict[str, Any] = {"name": name, "className": class_path(cls), "parallelism": parallelism}
    if tasks is not None:
        doc["tasks"] = tasks
    if config:
        doc["config"] = config
    return doc


class BoltDeclarer:
    """Returned by ``set_bolt``; each grouping method subscribes the bolt to a stream."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def grouping(self, component: str, grouping: dict[str, Any], stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        self.doc["inputs"].append({"component": component, "stream": stream, "grouping": grouping})
        return self

    def shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "shuffle"}, stream)

    def fields_grouping(self, component: str, fields: list[str], stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "fields", "fields": list(fields)}, stream)

    def all_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "all"}, stream)

    def global_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "global"}, stream)

    def none_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "none"}, stream)

    def direct_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "direct"}, stream)

    def local_or_shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "localOrShuffle"}, stream)

    def custom_grouping(self, component: str, grouping_cls: type, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, {"type": "custom", "customClass": class_path(grouping_cls)}, stream)

    # A windowed bolt's window (Storm's BaseWindowedBolt.withWindow and the rest): lengths and intervals
    # are squall.windows.Count or Duration.

    def _window(self, **keys: Any) -> BoltDeclarer:
        self.doc.setdefault("window", {}).update(keys)
        return self

    def with_window(self, length: Count | Duration, sliding_interval: Count | Duration) -> BoltDeclarer:
        """A sliding window: ``with_window(Duration(minutes=5), Duration(minutes=1))``."""
        return self._window(length=length.to_dict(), slidingInterval=sliding_interval.to_dict())

    def with_tumbling_window(self, length: Count | Duration) -> BoltDeclarer:
        """A tumbling window: each tuple in exactly one window."""
        return self._window(length=length.to_dict(), slidingInterval=None)

    def with_timestamp_field(self, name: str) -> BoltDeclarer:
        """Event time: each tuple's timestamp (ms) is this field of it."""
        return self._window(timestampField=name)

    def with_lag(self, lag: Duration) -> BoltDeclarer:
        """Event time: how far behind the latest timestamp of its stream a tuple may be and not be late."""
        return self._window(lagSeconds=lag.seconds)

    def with_watermark_interval(self, interval: Duration) -> BoltDeclarer:
        """How often the watermark is computed (processing time: the clock read between tuples)."""
        return self._window(watermarkIntervalSeconds=interval.seconds)

    def with_late_tuple_stream(self, stream: str) -> BoltDeclarer:
        """Event time: late tuples are emitted on this stream of the bolt (with their own fields)."""
        return self._window(lateTupleStream=stream)

    def with_persistence(self) -> BoltDeclarer:
        """Durable windows (Storm 2's ``withPersistence``): the windows are checkpointed as a stateful bolt's
        state, and a tuple is acked by the checkpoint after it rather than when it leaves its last window."""
        self.doc["stateful"] = True
        return self

    def with_max_anchors(self, n: int) -> BoltDeclarer:
        """An emit of ``execute`` is anchored to at most the newest ``n`` tuples of the window."""
        return self._window(maxAnchors=n)


class TopologyBuilder:
    """Storm's ``TopologyBuilder``: declare spouts and bolts, then ``build()`` a :class:`TopologySpec`."""

    def __init__(self, name: str = "topology") -> None:
        self.name = name
        self._spouts: list[dict[str, Any]] = []
        self._bolts: list[dict[str, Any]] = []
        self._classes: dict[str, type] = {}

    def set_spout(self, name: str, cls: type, parallelism: int = 1, *, tasks: int | None = None,
                  config: dict[str, Any] | None = None) -> None:
        self._spouts.append(_component(name, cls, parallelism, tasks, config))
        self._classes[name] = cls

    def set_bolt(self, name: str, cls: type, parallelism: int = 1, *, tasks: int | None = None,
                 config: dict[str, Any] | None = None, tick_frequency_seconds: float | None = None) -> BoltDeclarer:
        doc = _component(name, cls, parallelism, tasks, config)
        doc["inputs"] = []
        if isinstance(cls, type) and issubclass(cls, StatefulBolt):
            doc["stateful"] = True
        if tick_frequency_seconds is not None:
            doc["tickFrequencySeconds"] = tick_frequency_seconds
        self._bolts.append(doc)
        self._classes[name] = cls
        return BoltDeclarer(doc)

    def build(self, **settings: Any) -> TopologySpec:
        """The spec; ``settings`` are top-level fields (``workers=2``, ``message_timeout_seconds=10``)."""
        doc = {"name": self.name, **{to_camel(k): v for k, v in settings.items()},
               "spouts": self._spouts, "bolts": self._bolts}
        spec = TopologySpec.from_dict(doc, source=f"topology {doc['name']!r}", strict=False)
        spec._classes.update(self._classes)
        return spec
