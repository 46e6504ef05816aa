"""What exactly-once state costs beside at least once: the same stateful count of the same log, in this
process, alternated in rounds.

Usage: python bench/exactly_once.py [--records 200000] [--rounds 3] [--interval-ms 1000]

Each case reads ``--records`` records of a 4-partition embedded log with ``LogSpout`` (2 tasks) and counts
them by key in ``examples.logcount:StatefulCount`` (2 tasks, its state in SQLite files), one worker, one
acker, ``maxSpoutPending`` 5,000, until the spouts have committed the log's end. Printed per case (medians
over the rounds): records/s, CPU µs per record (the whole run: this process), the spout trees' complete
latency p50/p99, the checkpoint trees' p50/p99 (a PREPARE's or a COMMIT's), and the committed counts
against the truth. At least once holds each input until the commit after it; exactly once acks it at once,
and pays instead with aligned barriers and a durable write at each PREPARE.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.logcount import TOPIC, _produce, _spec_file, true_counts  # noqa: E402

from bench.chaos import _stateful, committed_counts  # noqa: E402
from bench.wordcount import cpu_seconds  # noqa: E402
from squall.spouts.log import DurableLog  # noqa: E402
from squall.system import CHECKPOINT_COMPONENT  # noqa: E402
from squall.testing import LocalCluster  # noqa: E402
from squall.topology import TopologySpec  # noqa: E402

GUARANTEES = ("at_least_once", "exactly_once")


@dataclass
class Case:
    guarantee: str
    rate: float
    cpu_us: float
    p50_ms: float
    p99_ms: float
    checkpoint_p50_ms: float
    checkpoint_p99_ms: float
    off_by: int  # records counted under or over the truth, summed over the keys


def run(guarantee: str, *, records: int, interval_ms: int) -> Case:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        log_path = directory / "log.db"
        ends = _produce(log_path, records)
        doc = yaml.safe_load(_spec_file(directory, log_path).read_text())
        _stateful(doc, "embedded", None, guarantee)
        doc.update(workers=1, ackers=1, maxSpoutPending=5000)
        doc["config"].update({"topology.state.dir": str(directory / "run" / "state"),
                              "topology.state.checkpoint.interval.ms": interval_ms})
        spec = TopologySpec.from_dict(doc)
        group = spec.spouts[0].config["log.group"]
        log = DurableLog(log_path)
        looked = 0.0

        def done(_: LocalCluster) -> bool:
            nonlocal looked
            if time.monotonic() - looked < 0.2:
                return False
            looked = time.monotonic()
            committed = {p: c.offset for p, c in log.committed(group, TOPIC).items()}
            return all(committed.get(p) == end for p, end in ends.items())

        cpu0, t0 = cpu_seconds([os.getpid()]), time.monotonic()
        with LocalCluster(spec) as cluster:
            cluster.run(until=done, seconds=600)
            seconds, cpu = time.monotonic() - t0, cpu_seconds([os.getpid()]) - cpu0
            trees = cluster.recorded_latency(spec.spouts[0].name)
            checkpoints = cluster.recorded_latency(CHECKPOINT_COMPONENT)
        log.close()
        counts, truth = committed_counts(spec, directory), true_counts(records)
        off_by = sum(abs(counts.get(k, 0) - n) for k, n in truth.items())
        return Case(guarantee, records / seconds, cpu / records * 1e6, trees.quantile(0.5) * 1000,
                    trees.quantile(0.99) * 1000, checkpoints.quantile(0.5) * 1000, checkpoints.quantile(0.99) * 1000,
                    off_by)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both cases, the order reversed every other")
    parser.add_argument("--interval-ms", type=int, default=1000, help="topology.state.checkpoint.interval.ms")
    args = parser.parse_args(argv)
    by: dict[str, list[Case]] = {g: [] for g in GUARANTEES}
    for index in range(args.rounds):
        for guarantee in GUARANTEES if index % 2 == 0 else reversed(GUARANTEES):
            case = run(guarantee, records=args.records, interval_ms=args.interval_ms)
            by[guarantee].append(case)
            print(f"round {index + 1}: {guarantee}: {case.rate:,.0f} records/s, {case.cpu_us:.1f} CPU µs/record",
                  file=sys.stderr, flush=True)
    print(f"{args.records:,} records of a 4-partition log counted by key, 1 worker + 1 acker in-process, checkpoint "
          f"every {args.interval_ms} ms; medians of {args.rounds} rounds")
    print("| state guarantee | records/s | CPU µs/record | tree p50 / p99 ms | checkpoint p50 / p99 ms | "
          "off the true counts |")
    print("|---|--:|--:|--:|--:|--:|")
    for guarantee, cases in by.items():
        def med(attr: str, cases: list[Case] = cases) -> float:
            return statistics.median(getattr(c, attr) for c in cases)
        print(f"| {guarantee} | {med('rate'):,.0f} | {med('cpu_us'):.1f} | {med('p50_ms'):,.0f} / "
              f"{med('p99_ms'):,.0f} | {med('checkpoint_p50_ms'):,.0f} / {med('checkpoint_p99_ms'):,.0f} | "
              f"{max(c.off_by for c in cases):,} |")
    alo, eo = by["at_least_once"], by["exactly_once"]
    print(f"exactly once ÷ at least once, CPU µs/record: "
          f"{statistics.median(e.cpu_us / a.cpu_us for a, e in zip(alo, eo, strict=True)):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
