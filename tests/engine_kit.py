"""Building blocks of the engine tests that squall.testing does not have: its TestingSpout as most tests use
it (``Numbers``), a probe of the spout's contract, bolts that pass, hold or fail chosen tuples, and a run until
nothing is left in flight."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from squall import Bolt, Spout
from squall.testing import LocalCluster, TestingSink, TestingSpout


class Numbers(TestingSpout):
    """squall.testing's spout as most engine tests use it: ``[0]``, ``[1]``, ... on the field ``id``, up to
    ``conf["count"]`` (default 10), each its own message id, and each emitted once whatever its verdict."""

    outputs = ["id"]
    replay = False

    def items(self):
        return ([n] for n in range(self.conf.get("count", 10)))


class RecordingSpout(Spout):
    """A probe of the spout's contract, for the tests of what the engine asks of a spout: emits ``[msg_id]``
    once for each of ``conf["msg_ids"]`` (default ``range(conf["count"])``; more may be added to
    ``to_emit``), with the msg id unless ``conf["tracked"]`` is False, and records every call in order, the
    trees it has in flight, and its activations.
    """

    outputs = ["id"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.to_emit = list(conf.get("msg_ids", range(conf.get("count", 10))))
        self.tracked = conf.get("tracked", True)
        self.emitted: list[Any] = []
        self.acked: list[Any] = []
        self.failed: list[Any] = []
        self.events: list[tuple[str, Any]] = []  # ("next", n) / ("ack", id) / ("fail", id) in call order
        self.outstanding = 0
        self.max_outstanding = 0
        self.next_calls = 0
        self.activations = 0
        self.deactivations = 0

    def next_tuple(self):
        self.next_calls += 1
        if not self.to_emit:
            return
        msg_id = self.to_emit.pop(0)
        self.events.append(("next", msg_id))
        self.emitted.append(msg_id)
        if self.tracked:
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
            self.collector.emit([msg_id], msg_id=msg_id)
        else:
            self.collector.emit([msg_id])

    def ack(self, msg_id):
        self.events.append(("ack", msg_id))
        self.acked.append(msg_id)
        self.outstanding -= 1

    def fail(self, msg_id):
        self.events.append(("fail", msg_id))
        self.failed.append(msg_id)
        self.outstanding -= 1

    def activate(self):
        self.activations += 1

    def deactivate(self):
        self.deactivations += 1

    def settled(self) -> bool:
        return not self.to_emit and len(self.acked) + len(self.failed) == len(self.emitted)


class PassBolt(Bolt):
    """Re-emits each input anchored to it, then acks it; fails inputs whose values are in ``conf["fail"]``."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.fail_values = conf.get("fail", [])

    def execute(self, tup):
        if tup.values in self.fail_values:
            self.collector.fail(tup)
            return
        self.collector.emit(tup.values, anchors=tup)
        self.collector.ack(tup)


class HoldBolt(TestingSink):
    """A :class:`~squall.testing.TestingSink` that holds the inputs whose values are in ``conf["hold"]``
    (until :meth:`release`) and fails those in ``conf["fail"]``."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.hold_values = conf.get("hold", [])
        self.fail_values = conf.get("fail", [])
        self.held: list = []

    def execute(self, tup):
        if tup.values in self.hold_values:
            self.received.append(list(tup.values))
            self.held.append(tup)
        elif tup.values in self.fail_values:
            self.received.append(list(tup.values))
            self.collector.fail(tup)
        else:
            super().execute(tup)  # received and acked

    def release(self) -> int:
        """Ack the held tuples (called by the test, between runs, on the cluster's thread)."""
        held, self.held = self.held, []
        for tup in held:
            self.collector.ack(tup)
        return len(held)


class SlowBolt(Bolt):
    """A sink whose every input takes ``conf["seconds"]`` of work (a sleep stands for it) before its ack."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seconds = conf["seconds"]

    def execute(self, tup):
        time.sleep(self.seconds)
        self.collector.ack(tup)


def quiet(cluster: LocalCluster) -> bool:
    """Nothing in flight: every executor's inbox and overflow is empty."""
    return all(not ex.inbox and not ex.overflow for ex in cluster.runtime.executors)


def run_until_quiet(cluster: LocalCluster, condition: Callable[[], bool] = lambda: True, *,
                    seconds: float = 20.0) -> None:
    """Run until ``condition()`` holds and nothing is left in flight anywhere (:meth:`LocalCluster.run_until`)."""
    cluster.run_until(lambda: condition() and quiet(cluster), seconds=seconds)
