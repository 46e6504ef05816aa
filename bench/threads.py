"""Where the processes' CPU goes, thread by thread: the word count of ``bench/wordcount.py`` run by
``squall run``'s processes, with each thread's CPU, run-queue wait and context switches per tree, from
``/proc/<pid>/task/<tid>/schedstat``. Threads are grouped by their native names (see
``squall.process.thread_names``): the scheduler, the links (``tx-*``), the stream readers (``rx-*``),
gRPC's server handlers (``recv_*``), its client threads (``run``) and its I/O (``event_engine``). The
last line splits every process's CPU per tree into user and system time (``/proc/<pid>/stat``): the system
part is the kernel's (wakes, sockets), the user part the processes' own code; ``--no-crossing`` gives the
same without words crossing workers, so the two runs say how much of the crossing is the kernel's.

    python bench/threads.py [--workers 2] [--rate TREES_PER_S] [--flush-interval MS] [--max-pending N]
                            [--seconds 8] [--no-crossing] [--rounds N]

``--rounds N`` (N > 1) asks whether a slow round is the engine's or the machine's: it starts the
processes N times, each round between two 2-second runs of the bench's ceiling loop on every core at
once (a probe of how fast this machine runs Python just then), and prints a line per round instead
of the table. Where the work per tree stays (switches per tree) while every thread's CPU per tree
moves with the probe, the machine was slower, not the engine.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import correlation

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.wordcount import MAX_PENDING, every_core, ms, running, transport_counts, user_system  # noqa: E402
from squall.executor.hdr import HdrHistogram  # noqa: E402


def threads(pid: int) -> dict[int, tuple[str, int, int, int]]:
    """tid → (role, CPU ns, run-queue wait ns, switches) of every thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            cpu, wait, switches = map(int, Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
        role = "scheduler (main)" if int(tid) == pid else re.sub(r"(?<=^tx-|^rx-).*(?=-[dc]$)", "*", comm)
        out[int(tid)] = (re.sub(r"_\d+$", "_*", role), cpu, wait, switches)
    return out


@dataclass
class Window:
    """One measurement window: every thread of every process, before and after."""

    trees: int
    seconds: float
    latency: HdrHistogram
    frames: float  # sent between processes
    user: float  # CPU seconds in user mode, every process
    system: float  # and in the kernel
    before: dict[str, dict[int, tuple[str, int, int, int]]]
    after: dict[str, dict[int, tuple[str, int, int, int]]]

    def roles(self, proc: str) -> dict[str, list[float]]:
        """role → [threads, CPU ns, run-queue wait ns, switches] in the window, for one process."""
        roles: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        for tid, (role, cpu, wait, switches) in self.after[proc].items():
            _, cpu0, wait0, switches0 = self.before[proc].get(tid, (role, 0, 0, 0))
            row = roles[role]
            row[0] += 1
            row[1] += cpu - cpu0
            row[2] += wait - wait0
            row[3] += switches - switches0
        return roles

    def total(self, column: int, role: str | None = None) -> float:
        """A column (1 CPU ns, 3 switches) summed over every process's threads (of ``role`` only)."""
        return sum(row[column] for proc in self.after for name, row in self.roles(proc).items()
                   if role is None or name == role)


def measure(*, workers: int, seconds: float, rate: float | None = None, cross: bool = True,
            flush_ms: float | None = None, max_pending: int = MAX_PENDING) -> Window:
    with running(workers=workers, ackers=workers, rate=rate, cross=cross, flush_ms=flush_ms,
                 max_pending=max_pending) as sup:
        pids = [c.proc.pid for c in sup.children]
        before = {c.name: threads(c.proc.pid) for c in sup.children}
        first, frames0, cpu0, t0 = sup.scrape(), transport_counts(sup)[1], user_system(pids), time.monotonic()
        time.sleep(seconds)
        last, frames1, cpu1, t1 = sup.scrape(), transport_counts(sup)[1], user_system(pids), time.monotonic()
        after = {c.name: threads(c.proc.pid) for c in sup.children}
    trees = int(last.acked["sentences"] - first.acked["sentences"])
    if not trees:
        sys.exit(f"no tree was acked in {seconds:g} s: nothing to divide by (see the processes' log above)")
    return Window(trees, t1 - t0, last.recorded.minus(first.recorded), frames1 - frames0, cpu1[0] - cpu0[0],
                  cpu1[1] - cpu0[1], before, after)


def measured(args: argparse.Namespace) -> Window:
    """:func:`measure` as this script's options ask."""
    return measure(workers=args.workers, seconds=args.seconds, rate=args.rate, cross=not args.no_crossing,
                   flush_ms=args.flush_interval, max_pending=args.max_pending)


def table(window: Window, workers: int) -> None:
    trees, latency = window.trees, window.latency
    print(f"{workers} worker(s) + {workers} acker(s): {trees / window.seconds:,.0f} trees/s, "
          f"p50 {ms(latency, 0.5)} ms, p99 {ms(latency, 0.99)} ms, {window.frames / trees:.3f} frames/tree, "
          f"{window.total(1) / 1e9 / window.seconds:.2f} cores busy\n")
    print("| process | threads | n | CPU µs/tree | % of a core | run-queue wait µs/switch | switches/1,000 trees |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for proc in window.after:
        for role, (count, cpu, wait, switches) in sorted(window.roles(proc).items(), key=lambda kv: -kv[1][1]):
            if cpu:
                print(f"| {proc} | {role} | {count} | {cpu / 1e3 / trees:.2f} | {cpu / 1e7 / window.seconds:.1f} | "
                      f"{wait / 1e3 / max(switches, 1):.1f} | {switches * 1000 / trees:.1f} |")
    print(f"\nall threads: {window.total(1) / 1e3 / trees:.1f} CPU µs per tree; every process: "
          f"{1e6 * window.user / trees:.1f} user + {1e6 * window.system / trees:.1f} system CPU µs per tree")


def rounds(args: argparse.Namespace) -> None:
    print("| round | ceiling on every core, µs/tree before / after | trees/s | CPU µs/tree | of it schedulers "
          "| switches/1,000 trees |")
    print("|--:|--:|--:|--:|--:|--:|")
    probes, costs, switches = [], [], []
    for i in range(args.rounds):
        before = every_core()
        window = measured(args)
        after = every_core()
        probes.append((before + after) / 2)
        costs.append(window.total(1) / 1e3 / window.trees)
        switches.append(window.total(3) * 1000 / window.trees)
        print(f"| {i + 1} | {before:.1f} / {after:.1f} | {window.trees / window.seconds:,.0f} | {costs[-1]:.1f} | "
              f"{window.total(1, 'scheduler (main)') / 1e3 / window.trees:.1f} | {switches[-1]:.0f} |", flush=True)
    print(f"\nslowest ÷ fastest round: CPU µs/tree {max(costs) / min(costs):.2f}, switches per tree "
          f"{max(switches) / min(switches):.2f}, the ceiling probe {max(probes) / min(probes):.2f}; "
          f"correlation of CPU µs/tree with the probe {correlation(costs, probes):+.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="workers, and as many ackers")
    parser.add_argument("--rate", type=float, help="trees/s per spout task (default: as fast as it goes)")
    parser.add_argument("--flush-interval", type=float, metavar="MS",
                        help="transfer.flushIntervalMs (default: the spec's default)")
    parser.add_argument("--max-pending", type=int, default=MAX_PENDING, metavar="N",
                        help=f"maxSpoutPending, per spout task (default: the bench's {MAX_PENDING:,})")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window")
    parser.add_argument("--no-crossing", action="store_true",
                        help="every word to a count task of its own worker, as the bench's 2w2a-local case")
    parser.add_argument("--rounds", type=int, default=1,
                        help="more than 1: a line per round, each between two probes of the machine's speed")
    args = parser.parse_args()
    if sys.platform != "linux":
        parser.error("reads /proc/<pid>/task: Linux only")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.rounds > 1:
        rounds(args)
    else:
        table(measured(args), args.workers)


if __name__ == "__main__":
    main()
