"""SparkBolt benchmark: prints figures, never passes or fails.

The click-stream work of ``examples/clickstream.py`` (per user and micro-batch: clicks, sessions,
top pages; each result row anchored to every click of its batch), at several batch sizes, done
(a) by ``SessionStats``, a SparkBolt on the process's local Spark, and (b) by a plain bolt that
gathers the same micro-batches and computes the same rows in Python on the executor thread.
In process (LocalCluster); a spout with message ids and ``maxSpoutPending`` = 2 batches; the
latency is each click's complete latency (emit to tree acked), measured exactly at the spout.

    python bench/spark.py [--seconds 15] [--batches 100,1000,10000] [--users 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.clickstream import SESSION_GAP, TOP_PAGES, ClickSpout, SessionStats  # noqa: E402

from squall import Bolt, TopologyBuilder  # noqa: E402
from squall.spark.session import get_session  # noqa: E402
from squall.testing import LocalCluster  # noqa: E402


class TimedClickSpout(ClickSpout):
    """The example's spout, keeping each click's emit time to measure its complete latency."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.sent: dict[int, float] = {}
        self.latencies: list[float] = []

    def next_tuple(self):
        before = self.emitted
        super().next_tuple()
        if self.emitted > before:
            self.sent[self.emitted - 1] = time.monotonic()

    def ack(self, msg_id):
        super().ack(msg_id)
        self.latencies.append(time.monotonic() - self.sent.pop(msg_id))


class PlainSessionStats(Bolt):
    """The same micro-batches and rows as ``SessionStats``, computed in Python on the executor thread."""

    outputs = SessionStats.outputs

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.size = conf["spark.batch.size"]
        self.buffer: list = []

    def execute(self, tup):
        self.buffer.append(tup)
        if len(self.buffer) < self.size:
            return
        batch, self.buffer = self.buffer, []
        by_user: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for t in batch:
            user, page, ts = t.values
            by_user[user].append((ts, page))
        for user, seen in by_user.items():
            seen.sort()
            sessions = 1 + sum(1 for (a, _), (b, _) in zip(seen, seen[1:], strict=False) if b - a > SESSION_GAP)
            views = Counter(page for _, page in seen)
            top = [page for page, _ in sorted(views.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PAGES]]
            self.collector.emit([user, len(seen), sessions, top], anchors=batch)
        for t in batch:
            self.collector.ack(t)


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def measure(bolt: type, *, batch: int, users: int, seconds: float) -> tuple[float, float, float]:
    """(clicks/s, p50 and p99 complete latency in s) over ``seconds``, after 3 batches of warm-up."""
    builder = TopologyBuilder("bench-spark")
    builder.set_spout("clicks", TimedClickSpout, config={"clickstream.users": users})
    builder.set_bolt("stats", bolt, config={"spark.batch.size": batch, "spark.batch.max.wait.ms": 1000}
                     ).fields_grouping("clicks", ["user"])
    builder.set_bolt("sink", Sink).global_grouping("stats")
    with LocalCluster(builder.build(message_timeout_seconds=60, max_spout_pending=2 * batch)) as cluster:
        (spout,) = cluster.instances("clicks")
        cluster.run(until=lambda c: c.trees_acked() >= 3 * batch, seconds=120)  # JIT, code generation
        spout.latencies.clear()
        acked, start = cluster.trees_acked(), time.monotonic()
        cluster.run(seconds=seconds)
        rate = (cluster.trees_acked() - acked) / (time.monotonic() - start)
        p50, p99 = np.quantile(spout.latencies, [0.5, 0.99]) if spout.latencies else (float("nan"),) * 2
        return rate, float(p50), float(p99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="measurement window per case")
    parser.add_argument("--batches", default="100,1000,10000", help="comma-separated spark.batch.size values")
    parser.add_argument("--users", type=int, default=20, help="distinct users: result rows per batch at most")
    args = parser.parse_args()
    sizes = [int(s) for s in args.batches.split(",")]

    started = time.monotonic()
    session = get_session()
    print(f"SparkBolt vs plain bolt, click-stream sessions, {args.users} users; {os.cpu_count()} cores; "
          f"Spark {session.version} {session.sparkContext.master} (started in {time.monotonic() - started:.1f} s); "
          f"{args.seconds:.0f} s per case\n")
    print(f"{'batch':>6}  {'SparkBolt clicks/s':>18} {'p50 ms':>8} {'p99 ms':>8}   "
          f"{'plain bolt clicks/s':>19} {'p50 ms':>8} {'p99 ms':>8}   {'added p50 ms':>12}")
    for size in sizes:
        spark = measure(SessionStats, batch=size, users=args.users, seconds=args.seconds)
        plain = measure(PlainSessionStats, batch=size, users=args.users, seconds=args.seconds)
        print(f"{size:>6,}  {spark[0]:>18,.0f} {spark[1] * 1e3:>8.0f} {spark[2] * 1e3:>8.0f}   "
              f"{plain[0]:>19,.0f} {plain[1] * 1e3:>8.1f} {plain[2] * 1e3:>8.1f}   "
              f"{(spark[1] - plain[1]) * 1e3:>12.0f}", flush=True)


if __name__ == "__main__":
    main()
