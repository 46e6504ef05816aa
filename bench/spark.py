"""SparkBolt beside Spark Structured Streaming: prints figures, never passes or fails.

The click-stream work of ``examples/clickstream.py`` (per user and micro-batch: clicks, sessions,
top pages), at each batch size, done two ways on the process's one local Spark:

- **SparkBolt**: ``SessionStats`` in a topology (LocalCluster, in process): a spout with message ids and
  ``maxSpoutPending`` = 2 batches, each result row anchored to its user's clicks of its batch. Latency: each
  click's complete latency (emit to tree acked), measured at the spout.
- **Structured Streaming**: the same ``SessionStats.process`` called by ``foreachBatch`` on each
  micro-batch (its rows collected, as the bolt collects them), fed by a Python streaming data source
  that reads the same click generator, ``batch`` clicks per trigger, as a Spark user would write it.
  Latency: each micro-batch's trigger execution (offsets, read, ``process``, commit).

The JVM is warmed first until a job's time is steady; then the cases alternate in rounds, the order
reversed every other round, each measured for ``--seconds`` after a few batches of warm-up. The table
has each case's median over the rounds, and the ratio Structured Streaming ÷ SparkBolt (median and range
over the rounds). Every round prints the load average, since the machine is shared.

    python bench/spark.py [--seconds 15] [--batches 1000,10000] [--rounds 4] [--users 20] [--jobs N] [--target-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# Spark's Python workers (the streaming source's reader) import the example's click generator too.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)

from examples.clickstream import ClickSpout, SessionStats, clicks  # noqa: E402

from squall import Bolt, TopologyBuilder  # noqa: E402
from squall.process.pod import tune_interpreter  # noqa: E402
from squall.spark.session import get_session  # noqa: E402
from squall.testing import LocalCluster  # noqa: E402
from squall.topology.spec import Transfer  # noqa: E402

WARM_BATCHES = 3  # per case and round, before its window: each query or topology compiles its plans anew


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


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def spark_bolt(*, batch: int, users: int, seconds: float, bolt_config: dict) -> tuple[float, float, float, float]:
    """(clicks/s, p50 and p99 complete latency in s, the executor thread's CPU µs per click) of the SparkBolt
    over ``seconds``. LocalCluster runs the executor thread on this one, so its thread time is that thread's."""
    builder = TopologyBuilder("bench-spark")
    builder.set_spout("clicks", TimedClickSpout, config={"clickstream.users": users})
    config = {"spark.batch.size": batch, "spark.batch.max.wait.ms": 1000, **bolt_config}
    builder.set_bolt("stats", SessionStats, config=config).fields_grouping("clicks", ["user"])
    builder.set_bolt("sink", Sink).global_grouping("stats")
    # Two batches in flight: more only adds to the latency (emit to ack is max spout pending ÷ clicks/s).
    with LocalCluster(builder.build(message_timeout_seconds=60, max_spout_pending=2 * batch)) as cluster:
        (spout,) = cluster.instances("clicks")
        cluster.run(until=lambda c: c.trees_acked() >= WARM_BATCHES * batch, seconds=120)
        spout.latencies.clear()
        acked, start, cpu = cluster.trees_acked(), time.monotonic(), time.thread_time()
        cluster.run(seconds=seconds)
        cpu, clicks_acked = time.thread_time() - cpu, cluster.trees_acked() - acked
        rate = clicks_acked / (time.monotonic() - start)
        p50, p99 = np.quantile(spout.latencies, [0.5, 0.99]) if spout.latencies else (float("nan"),) * 2
        return rate, float(p50), float(p99), cpu * 1e6 / max(clicks_acked, 1)


def click_source():
    """The Python streaming data source ``clicks``: the example's generator, ``batch`` clicks per trigger.

    Defined here (not at import) because ``pyspark.sql.datasource`` needs pyarrow; the classes are
    pickled by value into Spark's Python worker, which keeps the reader (and its generator) for the query.
    """
    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

    class ClickReader(SimpleDataSourceStreamReader):
        def __init__(self, *, batch: int, users: int) -> None:
            self.batch, self.users = batch, users
            self.source = None  # a generator cannot be pickled: made in the worker, on the first read

        def initialOffset(self) -> dict:
            return {"n": 0}

        def read(self, start: dict):
            if self.source is None:
                self.source = clicks(seed=1, users=self.users)
            source = self.source
            return [next(source) for _ in range(self.batch)], {"n": start["n"] + self.batch}

        def readBetweenOffsets(self, start: dict, end: dict):
            raise RuntimeError("the bench's click source does not replay (a query restarted from a checkpoint)")

    class ClickSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "clicks"

        def schema(self) -> str:
            return SessionStats.schema

        def simpleStreamReader(self, schema):
            return ClickReader(batch=int(self.options["batch"]), users=int(self.options["users"]))

    return ClickSource


def _offset(value) -> int:
    return (json.loads(value) if isinstance(value, str) else value)["n"]


def structured_streaming(*, batch: int, users: int, seconds: float,
                         bolt_config: dict) -> tuple[float, float, float, float]:
    """(clicks/s, p50 and p99 micro-batch duration in s, NaN: no executor thread) of Structured Streaming over
    ``seconds``."""
    spark = get_session()
    stats = SessionStats.__new__(SessionStats)  # only its process(): no topology, no prepare

    def each_batch(df, batch_id):
        stats.process(df).collect()

    with tempfile.TemporaryDirectory(prefix="bench-spark-ss-") as checkpoint:
        query = (spark.readStream.format("clicks").option("batch", batch).option("users", users).load()
                 .writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint).start())
        try:
            deadline = time.monotonic() + 120
            while (query.lastProgress or {}).get("batchId", -1) < WARM_BATCHES and time.monotonic() < deadline:
                time.sleep(0.05)
            first = query.lastProgress["batchId"]
            start = time.monotonic()
            time.sleep(seconds)
            last = query.lastProgress["batchId"]
            elapsed = time.monotonic() - start
        finally:
            query.stop()
    progress = [p for p in query.recentProgress if first < p["batchId"] <= last and p["sources"]]
    moved = sum(_offset(p["sources"][0]["endOffset"]) - _offset(p["sources"][0]["startOffset"]) for p in progress)
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    p50, p99 = np.quantile(durations, [0.5, 0.99]) if durations else (float("nan"),) * 2
    return moved / elapsed, float(p50), float(p99), float("nan")


def warm_up(*, users: int, rows: int = 10_000, steady: float = 0.15, tries: int = 40) -> list[float]:
    """Run ``process`` on one batch until the last three job times are within ``steady`` of their median."""
    spark = get_session()
    source = clicks(seed=1, users=users)
    df = spark.createDataFrame([next(source) for _ in range(rows)], schema=SessionStats.schema).cache()
    df.count()
    stats = SessionStats.__new__(SessionStats)
    times: list[float] = []
    for _ in range(tries):
        began = time.perf_counter()
        stats.process(df).collect()
        times.append(time.perf_counter() - began)
        last = times[-3:]
        if len(last) == 3 and max(abs(t - statistics.median(last)) for t in last) <= steady * statistics.median(last):
            break
    df.unpersist()
    return times


CASES = {"SparkBolt": spark_bolt, "Structured Streaming": structured_streaming}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="measurement window per case and round")
    parser.add_argument("--batches", default="1000,10000", help="comma-separated batch sizes")
    parser.add_argument("--rounds", type=int, default=4, help="alternated rounds (order reversed every other)")
    parser.add_argument("--users", type=int, default=20, help="distinct users: result rows per batch at most")
    parser.add_argument("--jobs", type=int, help="the SparkBolt's spark.jobs.in.flight (default: the bolt's)")
    parser.add_argument("--target-ms", type=float, help="the SparkBolt's spark.batch.target.ms (default: none; "
                        "the batch size is then its most)")
    parser.add_argument("--untuned", action="store_true", help="keep CPython's collector thresholds and switch "
                        "interval; by default the process is tuned as every worker process is")
    args = parser.parse_args()
    if not args.untuned:
        # LocalCluster leaves its host process alone; a deployed SparkBolt runs in a worker process, tuned so.
        # Structured Streaming's driver, this same process, gets the same settings.
        tune_interpreter(Transfer().gil_switch_interval_ms)
    sizes = [int(s) for s in args.batches.split(",")]
    bolt_config = {key: value for key, value in (("spark.jobs.in.flight", args.jobs),
                                                 ("spark.batch.target.ms", args.target_ms)) if value is not None}

    started = time.monotonic()
    session = get_session()
    print(f"SparkBolt vs Structured Streaming, click-stream sessions, {args.users} users; {os.cpu_count()} cores; "
          f"Spark {session.version} {session.sparkContext.master} (started in {time.monotonic() - started:.1f} s); "
          f"{args.rounds} rounds of {args.seconds:g} s per case; SparkBolt config {bolt_config or 'default'}; "
          f"interpreter {'untuned' if args.untuned else 'tuned as a worker process'}")
    session.dataSource.register(click_source())
    times = warm_up(users=args.users)
    print(f"JVM warm-up: {len(times)} jobs of 10,000 clicks until steady, "
          f"ms: {', '.join(f'{t * 1e3:.0f}' for t in times)}", flush=True)

    results: dict[tuple[int, str], list[tuple[float, float, float, float]]] = {}
    for r in range(args.rounds):
        order = list(CASES) if r % 2 == 0 else list(CASES)[::-1]
        for size in sizes:
            for name in order:
                figures = CASES[name](batch=size, users=args.users, seconds=args.seconds, bolt_config=bolt_config)
                results.setdefault((size, name), []).append(figures)
                cpu = "" if figures[3] != figures[3] else f"  executor thread {figures[3]:.1f} CPU µs/click"
                print(f"round {r + 1} batch {size:>6,} {name:<21} {figures[0]:>8,.0f} clicks/s  "
                      f"p50 {figures[1] * 1e3:>5.0f} ms  p99 {figures[2] * 1e3:>5.0f} ms{cpu}", flush=True)
        print(f"round {r + 1}: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    print("\n| batch | SparkBolt clicks/s, p50 / p99 | Structured Streaming clicks/s, batch p50 / p99 "
          "| Structured Streaming ÷ SparkBolt, clicks/s (range) | SparkBolt p50 ÷ Structured Streaming p50 (range) |")
    print("|---|---|---|---|---|")
    for size in sizes:
        bolt, ss = results[(size, "SparkBolt")], results[(size, "Structured Streaming")]
        speed = [s[0] / b[0] for b, s in zip(bolt, ss, strict=True)]
        latency = [b[1] / s[1] for b, s in zip(bolt, ss, strict=True)]

        def cell(runs):
            return (f"{statistics.median(x[0] for x in runs):,.0f}, {statistics.median(x[1] for x in runs) * 1e3:,.0f}"
                    f" / {statistics.median(x[2] for x in runs) * 1e3:,.0f} ms")

        print(f"| {size:,} | {cell(bolt)} | {cell(ss)} | {statistics.median(speed):.2f} "
              f"({min(speed):.2f}–{max(speed):.2f}) | {statistics.median(latency):.2f} "
              f"({min(latency):.2f}–{max(latency):.2f}) |")
    print("\nSparkBolt's executor thread, CPU µs per click (median): " + ", ".join(
        f"batch {size:,} {statistics.median(x[3] for x in results[(size, 'SparkBolt')]):.1f}" for size in sizes))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
