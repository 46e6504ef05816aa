"""``squall run TOPOLOGY.yaml``: run a topology on this machine, with live progress and a summary."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass

from squall.executor.stats import Histogram
from squall.testing import LocalCluster
from squall.topology import load_spec, validate


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a topology locally until --duration, --trees or Ctrl-C")
    p.add_argument("topology", help="path to the topology YAML")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this many seconds")
    p.add_argument("--trees", type=int, metavar="N", help="stop after N spout tuple trees were acked")
    p.add_argument("--in-process", action="store_true", help="run every executor in this process (LocalCluster)")
    p.set_defaults(func=run)


@dataclass
class Snapshot:
    """What the progress line and the summary show."""

    acked: int
    failed: int
    timed_out: int
    pending: int
    latency: Histogram


def progress_line(prev: Snapshot, cur: Snapshot, dt: float) -> str:
    rate = (cur.acked - prev.acked) / dt if dt > 0 else 0.0
    return (f"acked {cur.acked:>10,}  {rate:>9,.0f}/s  failed {cur.failed:>7,}  timed out {cur.timed_out:>7,}  "
            f"pending {cur.pending:>6,}  p99 {cur.latency.quantile(0.99) * 1000:>6.1f} ms")


def summary_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.topology)
    validate(spec)
    return run_in_process(spec, args)


def run_in_process(spec, args: argparse.Namespace) -> int:
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    tty = sys.stderr.isatty()
    with LocalCluster(spec) as cluster:
        def snapshot() -> Snapshot:
            spouts = [cluster.counts(s.name) for s in spec.spouts]
            latency = Histogram()
            for s in spec.spouts:
                latency.merge(cluster.complete_latency(s.name))
            return Snapshot(sum(c.acked for c in spouts), sum(c.failed for c in spouts),
                            sum(c.timed_out for c in spouts), cluster.pending(), latency)

        start = last_t = time.monotonic()
        last = snapshot()
        print(f"running {spec.name!r} in process; Ctrl-C to stop", file=sys.stderr)

        def until(_: LocalCluster) -> bool:
            nonlocal last, last_t
            now = time.monotonic()
            if now - last_t >= 1.0:
                cur = snapshot()
                line = progress_line(last, cur, now - last_t)
                print(f"\r{line}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
                last, last_t = cur, now
            if args.trees is not None and cluster.trees_acked() >= args.trees:
                return True
            return stopping or (args.duration is not None and now - start >= args.duration)

        cluster.run(until=until)
        elapsed = time.monotonic() - start
        if tty:
            print(file=sys.stderr)
        final = snapshot()
        rows = [("component", "emitted", "executed", "acked", "failed", "timed out", "errors")]
        for comp in spec.components():
            c = cluster.counts(comp.name)
            rows.append((comp.name, f"{c.emitted:,}", f"{c.executed:,}", f"{c.acked:,}", f"{c.failed:,}",
                         f"{c.timed_out:,}", f"{c.errors:,}"))
        print(summary_table(rows))
        print(f"\n{final.acked:,} trees acked in {elapsed:.1f} s ({final.acked / elapsed:,.0f}/s), "
              f"p50 {final.latency.quantile(0.5) * 1000:.1f} ms, p99 {final.latency.quantile(0.99) * 1000:.1f} ms")
    return 0
