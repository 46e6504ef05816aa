"""The public component API: spouts, bolts and the streams they declare.

Names follow Storm's, in snake_case::

    class SplitSentence(BasicBolt):
        outputs = ["word"]

        def execute(self, tup, collector):
            for word in tup["sentence"].split():
                collector.emit([word])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from squall.executor.collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
    from squall.topology.context import TopologyContext
    from squall.tuples import Tuple

DEFAULT_STREAM = "default"


@dataclass(frozen=True)
class OutputStream:
    """A declared output stream: its field names and whether it is a direct stream."""

    fields: tuple[str, ...]
    direct: bool = False


def direct(*fields: str) -> OutputStream:
    """Declare a direct stream in ``outputs``: ``outputs = {"default": ["w"], "to": direct("w")}``."""
    return OutputStream(tuple(fields), direct=True)


Outputs = list[str] | dict[str, "list[str] | OutputStream"]


class Component:
    """What spouts and bolts share: their declared output streams."""

    #: ``["f1", "f2"]`` for the default stream, or ``{"stream": ["f1"], "other": direct("f")}``.
    outputs: ClassVar[Outputs] = []

    @classmethod
    def declared_streams(cls) -> dict[str, OutputStream]:
        """The declared output streams, normalised: stream id → :class:`OutputStream`."""
        declared = cls.outputs
        if isinstance(declared, (list, tuple)):
            declared = {DEFAULT_STREAM: list(declared)}
        if not isinstance(declared, dict):
            raise TypeError(f"{cls.__name__}.outputs must be a list of field names or a dict of streams")
        streams = {}
        for stream, spec in declared.items():
            if isinstance(spec, OutputStream):
                streams[stream] = spec
            elif isinstance(spec, (list, tuple)) and all(isinstance(f, str) for f in spec):
                streams[stream] = OutputStream(tuple(spec))
            else:
                raise TypeError(f"{cls.__name__}.outputs[{stream!r}] must be a list of field names or direct(...)")
        return streams


class Spout(Component):
    """A source of tuples. ``next_tuple`` should emit a few tuples at most and never block."""

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        """Called once before the first ``next_tuple``; keeps ``conf``, ``context`` and ``collector``."""
        self.conf, self.context, self.collector = conf, context, collector

    def next_tuple(self) -> None:
        """Emit the next tuple(s), if any. Emitting nothing lets the wait strategy back off."""

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out; replay it if it must not be lost."""

    def activate(self) -> None:
        """The spout is active again after :meth:`deactivate`; ``next_tuple`` will be called."""

    def deactivate(self) -> None:
        """The spout is deactivated: ``next_tuple`` is not called until :meth:`activate`."""

    def close(self) -> None:
        """Called at shutdown (not guaranteed when the process is killed)."""


class Bolt(Component):
    """Processes tuples; acks or fails each input through its collector."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        """Called once before the first ``execute``; keeps ``conf``, ``context`` and ``collector``."""
        self.conf, self.context, self.collector = conf, context, collector

    def execute(self, tup: Tuple) -> None:
        """Process one input tuple; call ``collector.ack(tup)`` or ``collector.fail(tup)`` for it."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup)")

    def cleanup(self) -> None:
        """Called at shutdown (not guaranteed when the process is killed)."""


class BasicBolt(Component):
    """A bolt whose emits are anchored to the input and whose input is acked when ``execute`` returns.

    Raising :class:`~squall.FailedException` fails the input quietly; any other exception
    fails it and is reported.
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once before the first ``execute``."""
        self.conf, self.context = conf, context

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        """Process one tuple; ``collector.emit`` anchors to it."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup, collector)")

    def cleanup(self) -> None:
        """Called at shutdown (not guaranteed when the process is killed)."""
