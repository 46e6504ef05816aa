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
