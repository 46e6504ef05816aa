"""Windowed bolts: what anchoring to a whole window costs, and CPU per tuple of a windowed count against a plain one.

1. **Anchoring** (``--anchors``): a spout of N tracked tuples, a tumbling count window of N, one tuple emitted per
   window anchored to every tuple of it (``maxAnchors`` N, as Storm anchors), a sink that acks it. Printed per N:
   the emit's time, the sink's ack (one acker message per tree), the tuple's bytes on the wire (the transport's
   codec), and how long from the window's execute until the N trees were complete at their spout.
2. **Cost per tuple** (``--cases``): in-process (``LocalCluster``), words from a 1,000-word vocabulary with
   message ids; ``plain``: a bolt counting each word and acking it; ``windowed``: a ``WindowedBolt`` over a window
   of 10,000 words sliding every 1,000 counting the window's words and emitting its top word; ``bare``: the same
   window emitting only its size (the windowing alone). CPU µs (this process's utime + stime) per acked tuple,
   best of ``--rounds``.

    python bench/windows.py [--anchors 1000,10000,100000] [--seconds 8] [--rounds 3] [--cases plain,windowed,bare]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from squall import Bolt, Count, Spout, TopologyBuilder, WindowedBolt  # noqa: E402
from squall.testing import LocalCluster  # noqa: E402
from squall.transport.codec import encode_tuples  # noqa: E402

VOCABULARY = [f"w{i}" for i in range(1000)]


class Numbers(Spout):
    """Emits ``bench.n`` tracked tuples, once each; remembers when the last was acked."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.limit, self.n, self.acked, self.last_ack = conf["bench.n"], 0, 0, 0.0

    def next_tuple(self):
        if self.n < self.limit:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.acked += 1
        self.last_ack = time.perf_counter()


class Anchored(WindowedBolt):
    outputs = ["size"]

    def execute(self, window):
        self.executed_at = time.perf_counter()
        t0 = time.perf_counter()
        self.collector.emit([len(window)])
        self.emit_seconds = time.perf_counter() - t0


class Sink(Bolt):
    outputs = []

    def execute(self, tup):
        self.tup = tup
        t0 = time.perf_counter()
        self.collector.ack(tup)
        self.ack_seconds = time.perf_counter() - t0


def anchoring(n: int) -> str:
    builder = TopologyBuilder("anchors")
    builder.set_spout("numbers", Numbers, config={"bench.n": n})
    builder.set_bolt("window", Anchored).with_tumbling_window(Count(n)).with_max_anchors(n).shuffle_grouping("numbers")
    builder.set_bolt("sink", Sink).shuffle_grouping("window")
    with LocalCluster(builder.build(max_spout_pending=None, message_timeout_seconds=300)) as cluster:
        spout = cluster.instance("numbers")
        cluster.run_until(lambda: spout.acked == n, seconds=600)
        window, sink = cluster.instance("window"), cluster.instance("sink")
        wire = len(encode_tuples([sink.tup]))
        complete = spout.last_ack - window.executed_at
    return (f"{n:>9,} | {window.emit_seconds * 1e3:>9.1f} | {sink.ack_seconds * 1e3:>8.1f} | {wire / 1e6:>8.2f} | "
            f"{complete * 1e3:>12.0f} | {(window.emit_seconds + sink.ack_seconds) / n * 1e6:>6.2f}")


class Words(Spout):
    outputs = ["word"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng, self.n = random.Random(1), 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.rng.choice(VOCABULARY)], msg_id=self.n)

    def fail(self, msg_id):
        self.collector.emit([self.rng.choice(VOCABULARY)], msg_id=msg_id)


class PlainCount(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = Counter()

    def execute(self, tup):
        self.counts[tup["word"]] += 1
        self.collector.ack(tup)


class WindowCount(WindowedBolt):
    outputs = ["word", "count"]

    def execute(self, window):
        word, count = Counter(t["word"] for t in window).most_common(1)[0]
        self.collector.emit([word, count])


class WindowSize(WindowedBolt):
    """The windowing alone: emits each window's size, computing nothing over it."""

    outputs = ["word", "count"]

    def execute(self, window):
        self.collector.emit(["", len(window)])


class Drain(Bolt):
    outputs = []

    def execute(self, tup):
        self.collector.ack(tup)


def per_tuple(case: str, seconds: float) -> tuple[float, int]:
    builder = TopologyBuilder(case)
    builder.set_spout("words", Words)
    if case == "plain":
        builder.set_bolt("count", PlainCount).shuffle_grouping("words")
    else:
        bolt = WindowCount if case == "windowed" else WindowSize
        builder.set_bolt("count", bolt).with_window(Count(10_000), Count(1_000)).shuffle_grouping("words")
        builder.set_bolt("drain", Drain).shuffle_grouping("count")
    with LocalCluster(builder.build(max_spout_pending=12_000, message_timeout_seconds=60)) as cluster:
        cluster.run(seconds=1.0)  # warm up: a windowed count's first windows are partial
        acked0 = cluster.counts("words").acked
        cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        cluster.run(seconds=seconds)
        cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
        acked = cluster.counts("words").acked - acked0
    return cpu / max(acked, 1) * 1e6, acked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--anchors", default="1000,10000,100000", help="window sizes to anchor to; '' skips")
    parser.add_argument("--cases", default="plain,windowed,bare", help="'' skips")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.anchors:
        print("anchoring one emit to every tuple of a window (in-process, compiled engine)")
        print(f"{'window':>9} | {'emit ms':>9} | {'ack ms':>8} | {'wire MB':>8} | {'trees done ms':>12} | µs/anchor")
        for n in (int(x) for x in args.anchors.split(",")):
            print(anchoring(n), flush=True)
    cases = [c for c in args.cases.split(",") if c]
    if cases:
        print(f"\nCPU µs per acked tuple, in-process, best of {args.rounds} rounds of {args.seconds:g} s "
              "(windowed: 10,000 words sliding every 1,000, one emit per window)")
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for case in cases:
                us, acked = per_tuple(case, args.seconds)
                print(f"  {case:<9} {us:7.2f} µs/tuple ({acked / args.seconds:,.0f} tuples/s)", flush=True)
                best[case] = min(best.get(case, float("inf")), us)
        if {"plain", "windowed"} <= best.keys():
            print(f"windowed ÷ plain: {best['windowed'] / best['plain']:.2f} ({best['windowed']:.2f} against "
                  f"{best['plain']:.2f} µs per tuple)")
        if {"plain", "bare"} <= best.keys():
            print(f"the windowing alone (bare) ÷ plain: {best['bare'] / best['plain']:.2f}")


if __name__ == "__main__":
    main()
