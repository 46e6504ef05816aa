"""Stand-ins for the engine's side of a spout, importable by tests and by child-process scripts."""

from __future__ import annotations

from typing import Any

from squall.api import Spout
from squall.topology import Plan, TopologyBuilder
from squall.topology.context import TaskContext
from squall.values import check_values


class RecordingCollector:
    """Stands in for the engine's spout collector: checks values like it does and records emits."""

    def __init__(self, spout: type[Spout], component: str) -> None:
        self.streams = spout.declared_streams()
        self.component = component
        self.emitted: list[tuple[list[Any], str, Any]] = []
        self.errors: list[BaseException] = []

    def emit(self, values: list[Any], *, stream: str = "default", msg_id: Any = None) -> list[int]:
        check_values(list(values), fields=self.streams[stream].fields, component=self.component, stream=stream)
        self.emitted.append((list(values), stream, msg_id))
        return [1]

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


def context_for(spout: type[Spout], *, tasks: int = 1, index: int = 0, name: str = "topo",
                component: str = "records") -> TaskContext:
    """A real TopologyContext of task ``index`` of a spout component with ``tasks`` tasks."""
    builder = TopologyBuilder(name)
    builder.set_spout(component, spout, tasks, tasks=tasks)
    plan = Plan(builder.build())
    task_id = plan.component_tasks[component][index]
    return TaskContext(plan=plan, task_id=task_id, worker_tasks=frozenset(plan.component_tasks[component]))
