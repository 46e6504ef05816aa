"""Which process runs what: executors onto workers, acker tasks onto acker processes.

A pure function of (spec, workers, ackers): every worker, every acker, ``squall run`` and the
operator compute the same answer without talking to each other.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from squall.topology.plan import ExecutorPlan, Plan
from squall.topology.spec import TopologySpec


@dataclass(frozen=True)
class Assignment:
    """``executors[i]``: what worker i runs; ``acker_tasks[j]``: what acker process j runs."""

    executors: tuple[tuple[ExecutorPlan, ...], ...]
    acker_tasks: tuple[tuple[int, ...], ...]

    @property
    def workers(self) -> int:
        return len(self.executors)

    @property
    def ackers(self) -> int:
        return len(self.acker_tasks)

    def task_owner(self) -> dict[int, tuple[str, int]]:
        """task id → ("worker", i) or ("acker", j)."""
        owner: dict[int, tuple[str, int]] = {}
        for i, execs in enumerate(self.executors):
            for ex in execs:
                owner.update(dict.fromkeys(ex.tasks, ("worker", i)))
        for j, tasks in enumerate(self.acker_tasks):
            owner.update(dict.fromkeys(tasks, ("acker", j)))
        return owner


def plan_id(spec: TopologySpec) -> str:
    """A short hash of everything the processes of a topology must agree on: the spec with its
    worker and acker counts (``suspended`` aside, as it changes without restarts).

    Processes refuse streams from peers with another plan id, so during a rolling update the old
    and the new pods never exchange tuples routed by different assignments.
    """
    doc = spec.to_dict()
    doc.pop("suspended", None)
    doc["ackers"] = spec.num_ackers
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def assign(plan: Plan) -> Assignment:
    """Deal executors round-robin over the workers in plan order (Storm's even scheduler), so each
    worker gets a mix of components; acker task j goes to acker process j."""
    workers = plan.spec.workers
    per_worker: list[list[ExecutorPlan]] = [[] for _ in range(workers)]
    for i, ex in enumerate(plan.executors):
        per_worker[i % workers].append(ex)
    return Assignment(tuple(tuple(w) for w in per_worker), tuple((t,) for t in plan.acker_tasks))
