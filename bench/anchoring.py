"""What anchoring a batch's result rows to every input costs, per input: prints figures, never passes or fails.

A bolt gathers ``--batch`` clicks, then emits ``--rows`` rows and acks the clicks, as a SparkBolt decides
a batch, without Spark: each row anchored to every click of the batch (``anchored``, Storm's
multi-anchoring, what a SparkBolt does), or unanchored (``unanchored``: the floor, what the rest of the
topology costs). A sink acks the rows. In process (LocalCluster), the interpreter tuned as a worker
process's is; the cases alternate in rounds. Per case: clicks/s, the process's CPU µs per click, and of
it the CPU of the bolt's emits and of the sink's acks (thread time around them).

    python bench/anchoring.py [--batch 10000] [--rows 20] [--seconds 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.clickstream import ClickSpout  # noqa: E402

from squall import Bolt, TopologyBuilder  # noqa: E402
from squall.process.pod import tune_interpreter  # noqa: E402
from squall.testing import LocalCluster  # noqa: E402
from squall.topology.spec import Transfer  # noqa: E402


class Batcher(Bolt):
    """Emits ``rows`` rows per ``batch`` inputs, anchored to all of them or to none, then acks them."""

    outputs = ["user", "n"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.batch, self.rows, self.anchored = conf["batch"], conf["rows"], conf["anchored"]
        self.held: list = []
        self.emit_seconds = 0.0

    def execute(self, tup):
        self.held.append(tup)
        if len(self.held) < self.batch:
            return
        held, self.held = self.held, []
        began = time.thread_time()
        anchors = held if self.anchored else None
        for row in range(self.rows):
            self.collector.emit([f"user{row}", len(held)], anchors=anchors)
        self.emit_seconds += time.thread_time() - began
        for tup in held:
            self.collector.ack(tup)


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.ack_seconds = 0.0

    def execute(self, tup):
        began = time.thread_time()
        self.collector.ack(tup)
        self.ack_seconds += time.thread_time() - began


def measure(*, anchored: bool, batch: int, rows: int, seconds: float) -> tuple[float, float, float, float]:
    """(clicks/s, CPU µs per click, the bolt's emits and the sink's acks in µs per click)."""
    builder = TopologyBuilder("bench-anchoring")
    builder.set_spout("clicks", ClickSpout, config={"clickstream.users": rows})
    builder.set_bolt("batch", Batcher, config={"batch": batch, "rows": rows, "anchored": anchored}) \
        .global_grouping("clicks")
    builder.set_bolt("sink", Sink).shuffle_grouping("batch")
    with LocalCluster(builder.build(message_timeout_seconds=60, max_spout_pending=2 * batch)) as cluster:
        cluster.run(until=lambda c: c.trees_acked() >= 3 * batch, seconds=120)
        bolt, sink = cluster.instance("batch"), cluster.instance("sink")
        acked, emits, acks = cluster.trees_acked(), bolt.emit_seconds, sink.ack_seconds
        start, cpu = time.monotonic(), time.process_time()
        cluster.run(seconds=seconds)
        clicks = max(cluster.trees_acked() - acked, 1)
        per_click = 1e6 / clicks
        return (clicks / (time.monotonic() - start), (time.process_time() - cpu) * per_click,
                (bolt.emit_seconds - emits) * per_click, (sink.ack_seconds - acks) * per_click)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=10_000, help="inputs per batch, each row anchored to them all")
    parser.add_argument("--rows", type=int, default=20, help="result rows per batch")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per case and round")
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds (order reversed every other)")
    args = parser.parse_args()
    tune_interpreter(Transfer().gil_switch_interval_ms)
    cases = {"anchored": True, "unanchored": False}
    results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in cases}
    for r in range(args.rounds):
        for name in list(cases) if r % 2 == 0 else list(cases)[::-1]:
            figures = measure(anchored=cases[name], batch=args.batch, rows=args.rows, seconds=args.seconds)
            results[name].append(figures)
            print(f"round {r + 1} {name:<10} {figures[0]:>9,.0f} clicks/s  {figures[1]:5.1f} CPU µs/click  "
                  f"emits {figures[2]:5.2f} µs  sink acks {figures[3]:5.2f} µs", flush=True)
    print(f"\nbatches of {args.batch:,} clicks, {args.rows} rows each (medians over {args.rounds} rounds)")
    print("| case | clicks/s | CPU µs/click | emits µs/click | sink acks µs/click |\n|---|---|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | " + " | ".join(f"{statistics.median(run[i] for run in runs):,.{0 if i == 0 else 2}f}"
                                         for i in range(4)) + " |")


if __name__ == "__main__":
    main()
