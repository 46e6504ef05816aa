"""Failures and timeouts, and how replay gets every message through anyway.

``MessageSpout`` emits a fixed set of messages with message ids and replays any that fail or time
out. ``FlakyBolt`` fails a share of the tuples it sees; ``DroppingBolt`` silently drops a share, so
their trees time out. Run it and watch the failed and timed-out counts rise while, in the end,
every message is acked:

    squall run examples/flaky.yaml --trees 2000
"""

from __future__ import annotations

import random

from squall import BasicBolt, Bolt, FailedException
from squall.testing import TestingSpout


class MessageSpout(TestingSpout):
    """``flaky.messages`` messages, each replayed until it is acked."""

    outputs = ["id", "body"]

    def items(self):
        count = int(self.conf.get("flaky.messages", 2000))
        return ([n, f"message {n}"] for n in range(1, count + 1))


class FlakyBolt(BasicBolt):
    """Fails ``flaky.fail_share`` of its input (by raising FailedException: a quiet fail)."""

    outputs = ["id", "body"]

    def prepare(self, conf, context):
        super().prepare(conf, context)
        self.share = float(conf.get("flaky.fail_share", 0.1))
        self.rng = random.Random()

    def execute(self, tup, collector):
        if self.rng.random() < self.share:
            raise FailedException(f"message {tup['id']} failed on purpose")
        collector.emit([tup["id"], tup["body"].upper()])


class DroppingBolt(Bolt):
    """Acks its input, except ``flaky.drop_share`` of it, which it never acks: those trees time out."""

    outputs = []

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.share = float(conf.get("flaky.drop_share", 0.05))
        self.rng = random.Random()

    def execute(self, tup):
        if self.rng.random() >= self.share:
            self.collector.ack(tup)
