"""A running task's :class:`squall.api.TopologyContext` (the protocol carries the user documentation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from squall.system import DEFAULT_STREAM

if TYPE_CHECKING:
    from squall.topology.plan import Plan


class TaskContext:
    """This task's identity and the task ids and declared fields of every component."""

    def __init__(self, *, plan: Plan, task_id: int, worker_tasks: frozenset[int]) -> None:
        self._plan = plan
        self.task_id = task_id
        self.component_id = plan.task_component[task_id]
        self.topology_name = plan.spec.name
        self._worker_tasks = worker_tasks

    @property
    def message_timeout_seconds(self) -> int:
        return self._plan.spec.message_timeout_seconds

    @property
    def max_value_bytes(self) -> int:
        return self._plan.spec.transfer.max_value_bytes

    @property
    def max_frame_bytes(self) -> int:
        return self._plan.spec.transfer.max_frame_bytes

    @property
    def this_component_tasks(self) -> list[int]:
        return self.get_component_tasks(self.component_id)

    @property
    def this_task_index(self) -> int:
        return self.this_component_tasks.index(self.task_id)

    @property
    def worker_tasks(self) -> frozenset[int]:
        return self._worker_tasks

    def get_component_tasks(self, component: str) -> list[int]:
        try:
            return list(self._plan.component_tasks[component])
        except KeyError:
            raise KeyError(f"no component {component!r} in topology {self.topology_name!r}") from None

    def get_component_output_fields(self, component: str, stream: str = DEFAULT_STREAM) -> list[str]:
        return list(self._plan.stream_fields(component, stream).names)

    def get_this_output_fields(self, stream: str = DEFAULT_STREAM) -> list[str]:
        return self.get_component_output_fields(self.component_id, stream)

    def get_this_streams(self) -> list[str]:
        return list(self._plan.outputs[self.component_id])
