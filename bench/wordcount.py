"""Word-count benchmark: prints figures, never passes or fails.

Sentences of 8 words from a fixed 1,000-word vocabulary; a spout with message ids (acking on);
shuffle → split → fields → count. Measures (a) in-process, (b) 1 worker + 1 acker, (c) 2 workers +
2 ackers; p99 complete latency at 80 % of (b)'s rate; the acker's bytes per pending tree with
1,000,000 trees pending; and the same work as a plain Python loop (the ceiling). Latency
percentiles are upper bounds: the bucket boundaries of the complete-latency histogram.

    python bench/wordcount.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from squall import BasicBolt, Bolt, Spout  # noqa: E402
from squall.acker import Acker  # noqa: E402
from squall.metrics.scrape import Totals  # noqa: E402
from squall.process.supervisor import Supervisor  # noqa: E402
from squall.testing import LocalCluster  # noqa: E402
from squall.topology import TopologySpec  # noqa: E402

VOCABULARY = [f"w{i:03d}" for i in range(1000)]
TARGET = 20_000  # acked trees/s with 1 worker + 1 acker; p99 is judged at 80 % of it


class SentenceSpout(Spout):
    """Random 8-word sentences with message ids; ``bench.rate`` (trees/s per task) throttles it."""

    outputs = ["sentence"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(context.task_id)
        self.n = 0
        self.rate = conf.get("bench.rate")
        self.start = time.monotonic()

    def next_tuple(self):
        if self.rate and self.n >= self.rate * (time.monotonic() - self.start):
            return
        self.n += 1
        self.collector.emit([" ".join(self.rng.choices(VOCABULARY, k=8))], msg_id=self.n)


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup.values[0].split():
            collector.emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = {}

    def execute(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.ack(tup)


def spec(*, workers: int, ackers: int, rate: float | None = None) -> dict:
    return {
        "name": "bench", "workers": workers, "ackers": ackers, "maxSpoutPending": 1000,
        "config": {"bench.rate": rate} if rate else {},
        "spouts": [{"name": "sentences", "className": "bench.wordcount:SentenceSpout", "parallelism": workers}],
        "bolts": [
            {"name": "split", "className": "bench.wordcount:Split", "parallelism": workers,
             "inputs": [{"component": "sentences", "grouping": {"type": "shuffle"}}]},
            {"name": "count", "className": "bench.wordcount:Count", "parallelism": workers,
             "inputs": [{"component": "split", "grouping": {"type": "fields", "fields": ["word"]}}]},
        ],
    }


def in_process(seconds: float) -> tuple[float, Totals]:
    with LocalCluster(TopologySpec.from_dict(spec(workers=1, ackers=1))) as cluster:
        cluster.run(seconds=1)  # warm up
        before, t0 = cluster.trees_acked(), time.monotonic()
        cluster.run(seconds=seconds)
        rate = (cluster.trees_acked() - before) / (time.monotonic() - t0)
        totals = Totals()
        totals.latency = cluster.complete_latency("sentences")
        return rate, totals


def processes(seconds: float, *, workers: int, ackers: int, rate: float | None = None) -> tuple[float, Totals]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(spec(workers=workers, ackers=ackers, rate=rate)))
        sup = Supervisor(spec_path=path, spec=TopologySpec.from_dict(spec(workers=workers, ackers=ackers)),
                         run_dir=Path(tmp) / "run")
        sup.start()
        try:
            deadline = time.monotonic() + 30
            while sup.scrape().acked["sentences"] == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2)  # warm up
            first, t0 = sup.scrape(), time.monotonic()
            time.sleep(seconds)
            last, t1 = sup.scrape(), time.monotonic()
        finally:
            sup.stop()
        window = Totals()
        window.latency.counts = [b - a for a, b in zip(first.latency.counts, last.latency.counts, strict=True)]
        window.latency.count = sum(window.latency.counts)
        return (last.acked["sentences"] - first.acked["sentences"]) / (t1 - t0), window


def acker_bytes_per_tree(trees: int = 1_000_000) -> tuple[float, float]:
    """(table bytes per tree, process RSS growth per tree) with ``trees`` pending in one acker."""
    gc.collect()
    rss0 = psutil.Process(os.getpid()).memory_info().rss
    acker = Acker()
    rng = np.random.default_rng(1)
    batch = 4096
    for start in range(0, trees, batch):
        n = min(batch, trees - start)
        acker.process(np.zeros(n, np.uint8), rng.integers(2, 2**64 - 1, n, dtype=np.uint64, endpoint=True),
                      rng.integers(1, 2**64 - 1, n, dtype=np.uint64, endpoint=True), np.full(n, 7, np.int32))
    rss1 = psutil.Process(os.getpid()).memory_info().rss
    return acker.trees.nbytes / acker.pending, (rss1 - rss0) / acker.pending


def plain_loop(seconds: float) -> float:
    """The same work without a framework: make sentences, split them, count the words."""
    rng, counts, n = random.Random(1), {}, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(1000):
            for word in " ".join(rng.choices(VOCABULARY, k=8)).split():
                counts[word] = counts.get(word, 0) + 1
        n += 1000
    return n / seconds


def show(label: str, rate: float, totals: Totals) -> None:
    h = totals.latency
    print(f"{label:<28} {rate:>10,.0f} trees/s {rate * 9:>11,.0f} tuples/s   "
          f"p50 ≤ {h.quantile(0.5) * 1000:6.1f} ms   p99 ≤ {h.quantile(0.99) * 1000:6.1f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement window per case")
    args = parser.parse_args()
    print(f"word count, 8-word sentences, 1,000-word vocabulary; {os.cpu_count()} cores; "
          f"{args.seconds:.0f} s per case (tuples/s counts 1 sentence + 8 words per tree)\n")
    show("(a) in-process", *in_process(args.seconds))
    rate_b, totals_b = processes(args.seconds, workers=1, ackers=1)
    show("(b) 1 worker + 1 acker", rate_b, totals_b)
    show("(c) 2 workers + 2 ackers", *processes(args.seconds, workers=2, ackers=2))
    show("(b) at 80 % of its rate", *processes(args.seconds, workers=1, ackers=1, rate=0.8 * rate_b))
    show("(b) at 16,000 trees/s", *processes(args.seconds, workers=1, ackers=1, rate=TARGET * 0.8))
    table, rss = acker_bytes_per_tree()
    print(f"acker memory, 1,000,000 trees pending: {table:.1f} bytes/tree in the table, "
          f"{rss:.1f} bytes/tree of process RSS growth")
    print(f"plain Python loop (ceiling): {plain_loop(args.seconds / 2):,.0f} sentences/s")


if __name__ == "__main__":
    main()
