"""Helpers of the transport tests: the components of the wire's small topology, a transfer that hands
what a process receives to the test, and that topology's decoder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall import BasicBolt, Spout
from squall.executor.base import Transfer
from squall.topology import Plan
from squall.transport.codec import Decoder


class Words(Spout):
    outputs = {"default": ["word", "meta"], "counts": ["n"]}  # no bolt consumes "counts"


class Upper(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        collector.emit([tup["word"].upper()])


class Last(BasicBolt):
    def execute(self, tup, collector):
        pass


class Taking(Transfer):
    """The inbound side of a runtime's transfer, as a test receives: ``take(task, item)`` delivers an item
    (False: its inbox is full)."""

    def __init__(self, take: Callable[[int, Any], bool] = lambda task, item: True) -> None:
        super().__init__(capacity=1)
        self.take = take

    def try_send(self, task: int, item: Any) -> bool:
        return self.take(task, item)


def decoder(plan: Plan) -> Decoder:
    bolts = frozenset(plan.component_tasks["upper"] + plan.component_tasks["last"])
    return Decoder(plan, bolt_tasks=bolts, spout_tasks=frozenset(plan.component_tasks["words"]),
                   acker_tasks=frozenset(plan.acker_tasks))
