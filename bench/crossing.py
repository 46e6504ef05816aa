"""Crossing backpressure: two workers whose bolts send to each other with every queue small.

A spout's tuple fans out into 300 (``FanOut``), then goes through two relays and a sink, every
stream shuffled, so that half of each hop crosses workers both ways; 2 workers and 1 acker,
``executorQueueSize`` 2 and ``transfer.batchSize`` 4 (``--queue``, ``--batch``), so that inboxes are
always full. Before per-task congestion (docs/architecture.md, "Across processes: congestion per
task"), a worker stopped reading a stream at the first item for a full inbox; each worker's frames
then waited behind an inbox whose bolt waited to send to the other, and both stalled until a gRPC
keepalive ping (10 s) let a little through. It prints the run's summary and the longest time no
tree was acked after the first, from ``squall run``'s progress lines (one a second).

    python bench/crossing.py [--seconds 60] [--queue 2] [--batch 4]

A benchmark prints figures and never fails.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from squall import BasicBolt  # noqa: E402
from squall.testing import TestingSpout  # noqa: E402

FAN_OUT = 300


class Seeds(TestingSpout):
    outputs = ["n"]

    def items(self):
        return ([n] for n in range(1, 1 << 62))


class FanOut(BasicBolt):
    outputs = ["n", "k"]

    def execute(self, tup, collector):
        for k in range(FAN_OUT):
            collector.emit([tup["n"], k])


class Relay(BasicBolt):
    outputs = ["n", "k"]

    def execute(self, tup, collector):
        collector.emit([tup["n"], tup["k"]])


class Sink(BasicBolt):
    outputs = []

    def execute(self, tup, collector):
        pass


def spec(queue: int, batch: int) -> dict:
    def bolt(name: str, cls: str, source: str) -> dict:
        return {"name": name, "className": f"bench.crossing:{cls}", "parallelism": 2,
                "inputs": [{"component": source, "grouping": {"type": "shuffle"}}]}

    return {"name": "crossing", "workers": 2, "ackers": 1, "messageTimeoutSeconds": 60, "maxSpoutPending": 1000,
            "executorQueueSize": queue, "transfer": {"batchSize": batch},
            "spouts": [{"name": "seeds", "className": "bench.crossing:Seeds"}],
            "bolts": [bolt("fan", "FanOut", "seeds"), bolt("relay1", "Relay", "fan"),
                      bolt("relay2", "Relay", "relay1"), bolt("sink", "Sink", "relay2")]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--queue", type=int, default=2, help="executorQueueSize")
    parser.add_argument("--batch", type=int, default=4, help="transfer.batchSize")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crossing.yaml"
        path.write_text(yaml.safe_dump(spec(args.queue, args.batch)))
        run = subprocess.Popen([sys.executable, "-m", "squall", "run", str(path), "--duration", str(args.seconds),
                                "--insecure", "--run-dir", str(Path(tmp) / "run")], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        last_count, last_change, longest, summary = 0, None, 0.0, ""
        for line in run.stdout:
            if m := re.match(r"acked\s+([\d,]+)", line):
                now, count = time.monotonic(), int(m.group(1).replace(",", ""))
                if last_change is not None:  # from the first acked tree: the processes' start is no stall
                    longest = max(longest, now - last_change)
                if count > last_count:
                    last_count, last_change = count, now
            elif "trees acked in" in line:
                summary = line.strip()
        run.wait()
    print(summary or "the run printed no summary")
    print(f"longest time without an acked tree: {longest:.1f} s (progress lines come once a second)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
