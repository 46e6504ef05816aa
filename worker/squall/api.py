"""The public component API: spouts, bolts, the streams they declare, and what Squall hands them.

Names follow Storm's, in snake_case. A bolt that splits sentences into words::

    >>> from squall import BasicBolt
    >>> class SplitSentence(BasicBolt):
    ...     outputs = ["word"]
    ...
    ...     def execute(self, tup, collector):
    ...         for word in tup["sentence"].split():
    ...             collector.emit([word])
    >>> SplitSentence.declared_streams()
    {'default': OutputStream(fields=('word',), direct=False)}

The collectors and the :class:`TopologyContext` are declared here as protocols: what a spout or
bolt may call. Squall's executors provide them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from squall.system import DEFAULT_STREAM
from squall.tuples import Tuple

if TYPE_CHECKING:
    from squall.state.kv import KeyValueState

__all__ = ["DEFAULT_STREAM", "Anchors", "BasicBolt", "BasicOutputCollector", "Bolt", "Component", "OutputCollector",
           "OutputStream", "Spout", "SpoutOutputCollector", "StatefulBolt", "TopologyContext", "direct"]

#: What ``OutputCollector.emit(anchors=...)`` takes: one input tuple, several, or None (unanchored).
Anchors = Tuple | Sequence[Tuple] | None


@dataclass(frozen=True)
class OutputStream:
    """A declared output stream: its field names and whether it is a direct stream."""

    fields: tuple[str, ...]
    direct: bool = False


def direct(*fields: str) -> OutputStream:
    """Declare a direct stream in ``outputs``: ``outputs = {"default": ["w"], "to": direct("w")}``.

    >>> direct("word")
    OutputStream(fields=('word',), direct=True)
    """
    return OutputStream(tuple(fields), direct=True)


Outputs = list[str] | dict[str, "list[str] | OutputStream"]


class TopologyContext(Protocol):
    """What a running task knows of its topology (Storm's ``TopologyContext``)."""

    task_id: int
    component_id: str
    topology_name: str

    @property
    def message_timeout_seconds(self) -> int:
        """How long a spout tuple tree may take before it fails (``reset_timeout`` restarts it)."""

    @property
    def max_value_bytes(self) -> int:
        """``transfer.maxValueBytes``: the largest tuple value an emit takes."""

    @property
    def max_frame_bytes(self) -> int:
        """``transfer.maxFrameBytes``: what a tuple's values and anchors together must fit in."""

    @property
    def this_component_tasks(self) -> list[int]:
        """The task ids of this task's component."""

    @property
    def this_task_index(self) -> int:
        """This task's index among its component's tasks (0-based): handy for partitioning work."""

    @property
    def worker_tasks(self) -> frozenset[int]:
        """The task ids that run in this worker process."""

    def get_component_tasks(self, component: str) -> list[int]:
        """The task ids of ``component`` (``KeyError`` naming the topology when there is none)."""

    def get_component_output_fields(self, component: str, stream: str = DEFAULT_STREAM) -> list[str]:
        """The fields ``component`` declares for ``stream``."""

    def get_this_output_fields(self, stream: str = DEFAULT_STREAM) -> list[str]:
        """The fields this component declares for ``stream``."""

    def get_this_streams(self) -> list[str]:
        """The streams this component declares."""


class SpoutOutputCollector(Protocol):
    """Given to :meth:`Spout.open`. ``emit`` with a ``msg_id`` starts a tracked tuple tree: the spout's
    ``ack(msg_id)`` or ``fail(msg_id)`` is called when it completes, fails or times out."""

    def emit(self, values: Sequence[Any], *, stream: str = DEFAULT_STREAM, msg_id: Any = None) -> list[int]:
        """Emit ``values`` on ``stream``; returns the task ids they were sent to."""

    def emit_direct(self, task: int, values: Sequence[Any], *, stream: str = DEFAULT_STREAM,
                    msg_id: Any = None) -> list[int]:
        """Emit to one task of a bolt that consumes ``stream`` with a direct grouping."""

    def report_error(self, exc: BaseException) -> None:
        """Log and record an error for this component (throttled: beyond the limit it is only counted)."""


class OutputCollector(Protocol):
    """Given to :meth:`Bolt.prepare`: emit (anchored or not), ack, fail and reset_timeout.

    Not thread-safe: work done on another thread comes back through :meth:`call_soon_threadsafe`.
    """

    #: Set to True (on the executor thread) to receive no input until it is set back to False:
    #: backpressure for a bolt whose background work (e.g. a Spark job) has fallen behind.
    paused: bool

    def emit(self, values: Sequence[Any], *, anchors: Anchors = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit ``values``; anchored to ``anchors`` (a tuple or a list), they join those tuples' trees."""

    def emit_direct(self, task: int, values: Sequence[Any], *, anchors: Anchors = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit to one task of a bolt that consumes ``stream`` with a direct grouping."""

    def ack(self, tup: Tuple) -> None:
        """The tuple is fully processed by this bolt: its edges (and its children's) go to the acker."""

    def fail(self, tup: Tuple) -> None:
        """Fail the tuple: every spout tuple tree it belongs to fails and its spout's ``fail`` is called."""

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the message timeout of every tree the tuple belongs to (for slow work)."""

    def report_error(self, exc: BaseException) -> None:
        """Log and record an error for this component (throttled: beyond the limit it is only counted)."""

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on this bolt's executor thread soon; callable from any thread."""


class BasicOutputCollector(Protocol):
    """Given to :meth:`BasicBolt.execute`: emits are anchored to the input tuple being executed."""

    def emit(self, values: Sequence[Any], *, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit ``values`` anchored to the input."""

    def emit_direct(self, task: int, values: Sequence[Any], *, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit to one task, anchored to the input."""

    def reset_timeout(self) -> None:
        """Restart the message timeout of the input's trees."""

    def report_error(self, exc: BaseException) -> None:
        """Log and record an error for this component (throttled: beyond the limit it is only counted)."""


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

    @classmethod
    def check_config(cls, component: str, conf: dict[str, Any], *, message_timeout_seconds: int) -> None:
        """Refuse a config this component cannot run with: raise ``ConfigError`` or ``TopologyError`` naming the key.

        Called whenever the topology is validated (``squall validate``, submit, every process
        start), before any task starts, with the component's merged config; the default accepts all.
        """


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


class StatefulBolt(Bolt):
    """A bolt whose state survives its process (Storm's ``IStatefulBolt``): Squall checkpoints it.

    :meth:`init_state` is called after ``prepare`` and before any tuple, with the task's state as the
    last checkpoint committed it (empty the first time). Its emits are anchored to the input being
    executed, and its inputs are acked when the checkpoint that holds their effect commits (every
    ``topology.state.checkpoint.interval.ms``, 1 s by default), so a crash replays exactly what the
    committed state lacks; ``collector.ack`` only says the bolt is done with a tuple, ``fail`` fails
    it at once. Declare it ``stateful: true`` in a YAML topology (``TopologyBuilder`` does it)::

        >>> class WordCount(StatefulBolt):
        ...     outputs = ["word", "count"]
        ...     def execute(self, tup):
        ...         count = self.state.get(tup["word"], 0) + 1
        ...         self.state.put(tup["word"], count)
        ...         self.collector.emit([tup["word"], count])
    """

    def init_state(self, state: KeyValueState) -> None:
        """The task's state, as last committed; keeps it as ``self.state``."""
        self.state = state

    def pre_prepare(self, txid: int) -> None:
        """Before the state's changes are frozen for checkpoint ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Before checkpoint ``txid`` is written to the store."""

    def pre_rollback(self) -> None:
        """Before the state goes back to its last commit (a checkpoint failed, or a task restarted)."""


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
