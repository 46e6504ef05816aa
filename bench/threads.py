"""Where the processes' CPU goes, thread by thread: the word count of ``bench/wordcount.py`` run by
``squall run``'s processes, with each thread's CPU, run-queue wait and context switches per tree, from
``/proc/<pid>/task/<tid>/schedstat``. Threads are grouped by their native names (see
``squall.process.thread_names``): the scheduler, the links (``tx-*``), the stream readers (``rx-*``),
gRPC's server handlers (``recv_*``), its client threads (``run``) and its I/O (``event_engine``).

    python bench/threads.py [--workers 2] [--rate TREES_PER_S] [--seconds 8] [--no-crossing]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.wordcount import ms, running  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="workers, and as many ackers")
    parser.add_argument("--rate", type=float, help="trees/s per spout task (default: as fast as it goes)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window")
    parser.add_argument("--no-crossing", action="store_true",
                        help="every word to a count task of its own worker, as the bench's 2w2a-local case")
    args = parser.parse_args()
    if sys.platform != "linux":
        parser.error("reads /proc/<pid>/task: Linux only")
    with running(workers=args.workers, ackers=args.workers, rate=args.rate, cross=not args.no_crossing) as sup:
        before = {c.name: threads(c.proc.pid) for c in sup.children}
        first, t0 = sup.scrape(), time.monotonic()
        time.sleep(args.seconds)
        last, t1 = sup.scrape(), time.monotonic()
        after = {c.name: threads(c.proc.pid) for c in sup.children}
    trees = last.acked["sentences"] - first.acked["sentences"]
    if not trees:
        sys.exit(f"no tree was acked in {args.seconds:g} s: nothing to divide by (see the processes' log above)")
    latency = last.recorded.minus(first.recorded)
    n = args.workers
    print(f"{n} worker(s) + {n} acker(s): {trees / (t1 - t0):,.0f} trees/s, p50 {ms(latency, 0.5)} ms, "
          f"p99 {ms(latency, 0.99)} ms\n")
    print("| process | threads | n | CPU µs/tree | % of a core | run-queue wait µs/switch | switches/1,000 trees |")
    print("|---|---|--:|--:|--:|--:|--:|")
    total = 0.0
    for proc, now in after.items():
        roles: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        for tid, (role, cpu, wait, switches) in now.items():
            _, cpu0, wait0, switches0 = before[proc].get(tid, (role, 0, 0, 0))
            row = roles[role]
            row[0] += 1
            row[1] += cpu - cpu0
            row[2] += wait - wait0
            row[3] += switches - switches0
        for role, (count, cpu, wait, switches) in sorted(roles.items(), key=lambda kv: -kv[1][1]):
            if not cpu:
                continue
            total += cpu
            print(f"| {proc} | {role} | {count} | {cpu / 1e3 / trees:.2f} | {cpu / 1e7 / (t1 - t0):.1f} | "
                  f"{wait / 1e3 / max(switches, 1):.1f} | {switches * 1000 / trees:.1f} |")
    print(f"\nall threads: {total / 1e3 / trees:.1f} CPU µs per tree")


if __name__ == "__main__":
    main()
