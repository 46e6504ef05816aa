"""A validated topology resolved for running: its layout (task ids and executors, see
:mod:`squall.topology.assignment`) with the imported classes, their streams and subscribers.
Every process derives the same plan from the same spec.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from squall.api import BasicBolt, Bolt, Component, OutputStream, Spout, StatefulBolt
from squall.errors import TopologyError
from squall.state.checkpoint import FIELDS, CheckpointSpout
from squall.state.config import GUARANTEE_KEY
from squall.system import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, SYSTEM_COMPONENT, TICK_STREAM
from squall.topology.assignment import invalid, layout
from squall.topology.spec import BoltSpec, Grouping, GroupingType, Input, TopologySpec
from squall.tuples import NO_FIELDS, Fields
from squall.windows.api import WindowedBolt


@dataclass(frozen=True)
class Subscriber:
    """A bolt consuming a stream, with the grouping it uses and its tasks."""

    component: str
    input: Input
    tasks: tuple[int, ...]


def import_class(path: str, *, what: str) -> type:
    """Import ``'module:Class'`` (a parsed spec's: its form is CLASS_PATTERN's, checked with the spec);
    raise :class:`TopologyError` that says how to fix it."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TopologyError(f"{what}: cannot import module {module_name!r} ({exc}); "
                            "check the spelling and that it is on PYTHONPATH") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user module may raise anything while it is imported
        raise TopologyError(f"{what}: importing module {module_name!r} raised {type(exc).__name__}: {exc}; "
                            "fix the module (it runs when imported; a script's code belongs under "
                            "`if __name__ == '__main__':`)") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise TopologyError(f"{what}: module {module_name!r} has no {attr!r}")
    if not isinstance(obj, type):
        raise TopologyError(f"{what}: {path!r} is not a class")
    return obj


class Plan:
    """Everything the runtime needs to know about a topology, derived once from the spec."""

    def __init__(self, spec: TopologySpec) -> None:
        self.spec = spec
        self.layout = lay = layout(spec)  # checks the structure before any user code is imported
        self.component_tasks = lay.component_tasks
        self.task_component = lay.task_component
        self.acker_tasks = lay.acker_tasks
        self.executors = lay.executors
        self.spout_names = lay.spouts
        #: every spout task of the topology, in id order
        self.spout_tasks = lay.spout_tasks
        self.classes: dict[str, type[Component]] = {}
        self.outputs: dict[str, dict[str, OutputStream]] = {}
        for comp in spec.spouts:
            self.classes[comp.name] = self._resolve(comp.name, comp.class_name, Spout, "Spout")
        for comp in spec.bolts:
            if comp.window is not None:
                self.classes[comp.name] = self._resolve(comp.name, comp.class_name, WindowedBolt, "WindowedBolt")
                continue
            if comp.stateful:
                self.classes[comp.name] = self._resolve(comp.name, comp.class_name, StatefulBolt, "StatefulBolt")
                continue
            cls = self._resolve(comp.name, comp.class_name, (Bolt, BasicBolt, WindowedBolt), "Bolt or BasicBolt")
            if issubclass(cls, WindowedBolt):
                raise TopologyError(f"bolt {comp.name!r}: {cls.__name__} is a WindowedBolt; declare its window "
                                    "(window: in YAML, with_window(...) in TopologyBuilder)")
            if issubclass(cls, StatefulBolt):
                raise TopologyError(f"bolt {comp.name!r}: {cls.__name__} is a StatefulBolt; declare the bolt with "
                                    "stateful: true, so that the topology checkpoints its state")
            self.classes[comp.name] = cls
        for name, cls in self.classes.items():
            try:
                self.outputs[name] = cls.declared_streams()
            except TypeError as exc:
                raise TopologyError(f"component {name!r}: {exc}") from None
        for comp in spec.bolts:
            if comp.window is not None:
                self._window_streams(comp)
        #: bolt task → the tasks that send it the checkpoint stream (all of them, before it acts on a checkpoint)
        self.checkpoint_inputs: dict[int, frozenset[int]] = {}
        if spec.checkpointing:
            self._checkpoint_stream()
        for name, cls in self.classes.items():
            cls.check_config(name, self.component_config(name), message_timeout_seconds=spec.message_timeout_seconds)
        self._fields = {(c, s): Fields(o.fields) for c, streams in self.outputs.items() for s, o in streams.items()}
        self._fields[(SYSTEM_COMPONENT, TICK_STREAM)] = NO_FIELDS

        self.subscribers: dict[tuple[str, str], list[Subscriber]] = {}
        errors = []
        for bolt in spec.bolts:
            for i, inp in enumerate(bolt.inputs):
                error = self._check_input(bolt.name, i, inp)
                if error:
                    errors.append(error)
                    continue
                sub = Subscriber(bolt.name, inp, self.component_tasks[bolt.name])
                self.subscribers.setdefault((inp.component, inp.stream), []).append(sub)
        if errors:
            raise invalid(spec, errors)
        if spec.checkpointing:
            self._refuse_cycles()
        for bolt in spec.bolts if spec.checkpointing else ():
            # Storm's checkpoint stream follows the topology: from the checkpoint spout to the bolts that
            # read spouts, from each bolt to the bolts that read it. Exactly once, the checkpoint spout sends it
            # to the spouts, and each spout on to its bolts behind what it emitted (an aligned barrier).
            sources = sorted({CHECKPOINT_COMPONENT if i.component in self.spout_names and not spec.exactly_once
                              else i.component for i in bolt.inputs})
            for source in sources:
                self._subscribe_checkpoints(source, bolt.name)
            tasks = self.component_tasks[bolt.name]
            inputs = frozenset(t for source in sources for t in self.component_tasks[source])
            self.checkpoint_inputs.update(dict.fromkeys(tasks, inputs))
        for spout in spec.spouts if spec.exactly_once else ():
            self._subscribe_checkpoints(CHECKPOINT_COMPONENT, spout.name)

    def _subscribe_checkpoints(self, source: str, component: str) -> None:
        """``component``'s tasks take the checkpoint stream from every task of ``source``."""
        checkpoint = Input(component=source, stream=CHECKPOINT_STREAM, grouping=Grouping(type=GroupingType.ALL))
        self.subscribers.setdefault((source, CHECKPOINT_STREAM), []).append(
            Subscriber(component, checkpoint, self.component_tasks[component]))

    def _refuse_cycles(self) -> None:
        """A checkpoint reaches a bolt once every input task sent it: in a cycle of bolts, each would wait
        for the others for ever (Storm refuses such a topology's checkpoints too)."""
        inputs = {bolt.name: {i.component for i in bolt.inputs if i.component not in self.spout_names}
                  for bolt in self.spec.bolts}
        visiting: list[str] = []
        done: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            if name in visiting:
                cycle = visiting[visiting.index(name):] + [name]
                raise TopologyError(f"bolts {' -> '.join(reversed(cycle))} form a cycle, which a topology with "
                                    "stateful bolts cannot have (a checkpoint would wait for itself); break the "
                                    "cycle, or make no bolt stateful")
            visiting.append(name)
            for source in sorted(inputs[name]):
                visit(source)
            visiting.pop()
            done.add(name)

        for name in sorted(inputs):
            visit(name)

    def _checkpoint_stream(self) -> None:
        """The checkpoint spout, and the checkpoint stream every bolt declares (it forwards checkpoints)."""
        self.classes[CHECKPOINT_COMPONENT] = CheckpointSpout
        stream = OutputStream(FIELDS)
        self.outputs[CHECKPOINT_COMPONENT] = {CHECKPOINT_STREAM: stream}
        forwarding = [*self.spec.bolts, *(self.spec.spouts if self.spec.exactly_once else ())]
        for comp in forwarding:
            if CHECKPOINT_STREAM in self.outputs[comp.name]:
                raise TopologyError(f"component {comp.name!r} declares stream {CHECKPOINT_STREAM!r}, which Squall "
                                    "reserves for checkpoints; rename it")
            self.outputs[comp.name] = {**self.outputs[comp.name], CHECKPOINT_STREAM: stream}
        for spout in self.spec.spouts if self.spec.exactly_once else ():
            if not callable(getattr(self.classes[spout.name], "rewind", None)):
                raise TopologyError(f"spout {spout.name!r}: {GUARANTEE_KEY}: exactly_once reads every record "
                                    f"again from the last checkpoint after a failure, which only an offset spout "
                                    f"can (LogSpout, KafkaSpout, an OffsetSpout of your own); "
                                    f"{self.classes[spout.name].__name__} is not one: read its data through one, "
                                    "or use at_least_once")

    def _window_streams(self, bolt: BoltSpec) -> None:
        """A windowed bolt's timestamp field is a field of every input, and its late-tuple stream carries
        their fields."""
        window = bolt.window
        assert window is not None
        declared = {(i.component, i.stream): self.outputs[i.component].get(i.stream) for i in bolt.inputs}
        fields = {key: out.fields for key, out in declared.items() if out is not None}  # else _check_input says
        field = window.timestamp_field
        for (component, stream), names in fields.items():
            if field is not None and field not in names:
                raise TopologyError(f"bolt {bolt.name!r} window: timestampField {field!r} is not a field of its input "
                                    f"{component}/{stream} (declared: {', '.join(names) or 'none'})")
        late = window.late_tuple_stream
        if late is None:
            return
        if late in self.outputs[bolt.name]:
            raise TopologyError(f"bolt {bolt.name!r} window: lateTupleStream {late!r} is a stream the bolt declares "
                                "itself; name another (Squall declares it, with the late tuples' fields)")
        kinds = set(fields.values())
        if len(kinds) > 1:
            raise TopologyError(f"bolt {bolt.name!r} window: lateTupleStream {late!r} carries the late tuples with "
                                "their fields, but the bolt's inputs declare different ones ("
                                + "; ".join(f"{c}/{s}: {', '.join(f)}" for (c, s), f in fields.items())
                                + "); give them the same fields, or drop lateTupleStream")
        self.outputs[bolt.name] = {**self.outputs[bolt.name], late: OutputStream(kinds.pop() if kinds else ())}

    def _resolve(self, name: str, class_name: str, base: type | tuple[type, ...], kind: str) -> type[Component]:
        cls = self.spec._classes.get(name) or import_class(class_name, what=f"component {name!r} className")
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TopologyError(f"component {name!r}: className {class_name!r} is not a {kind} subclass; "
                                f"derive it from squall.{kind.split()[0]}")
        return cls

    def _check_input(self, bolt: str, i: int, inp: Input) -> str | None:
        where = f"bolt {bolt!r} inputs[{i}] ({inp.component}/{inp.stream})"
        streams = self.outputs[inp.component]
        declared = streams.get(inp.stream)
        source = self.classes[inp.component]
        if source.outputs is Component.outputs:  # inherited, not declared: every emit would fail at run time
            return (f"{where}: {source.__name__}, the class of {inp.component!r}, declares no outputs; set "
                    f"outputs = ['field', ...] on it (the fields of what it emits), or a dict of streams")
        if declared is None:
            return (f"{where}: component {inp.component!r} does not declare stream {inp.stream!r} "
                    f"(declared: {', '.join(streams) or 'none'})")
        kind = inp.grouping.type
        if kind == GroupingType.DIRECT.value and not declared.direct:
            return (f"{where}: direct grouping on a stream that is not direct; declare it with "
                    f"squall.direct(...) in {inp.component!r}.outputs or use another grouping")
        if declared.direct and kind != GroupingType.DIRECT.value:
            return f"{where}: stream {inp.stream!r} is direct, so it must be consumed with a direct grouping"
        if kind == GroupingType.FIELDS.value:
            missing = [f for f in inp.grouping.fields or () if f not in declared.fields]
            if missing:
                return (f"{where}: fields grouping on {', '.join(map(repr, missing))}, which stream "
                        f"{inp.stream!r} of {inp.component!r} does not declare (declared: "
                        f"{', '.join(declared.fields) or 'none'})")
        if kind == GroupingType.CUSTOM.value:
            try:
                cls = import_class(inp.grouping.custom_class or "", what=f"{where} customClass")
            except TopologyError as exc:
                return str(exc)
            if not callable(getattr(cls, "choose_tasks", None)):
                return f"{where}: customClass {inp.grouping.custom_class!r} has no choose_tasks(task_id, values)"
        return None

    def stream_fields(self, component: str, stream: str) -> Fields:
        try:
            return self._fields[(component, stream)]
        except KeyError:
            raise KeyError(f"component {component!r} declares no stream {stream!r}") from None

    def component_config(self, component: str) -> dict[str, Any]:
        """The topology config with the component's own config merged over it."""
        conf = dict(self.spec.config)
        if component in self.classes and component != CHECKPOINT_COMPONENT:
            conf.update(self.spec.component(component).config)
        return conf


def validate(spec: TopologySpec, *, imports: bool = True) -> None:
    """Raise :class:`TopologyError` if the topology cannot run (``imports=False``: skip user code)."""
    if imports:
        Plan(spec)
    else:
        layout(spec)
