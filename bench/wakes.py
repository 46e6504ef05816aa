"""What a thread's wake costs on this machine, and how much of 2 + 2's CPU per tree is the kernel's.

Two processes hand one byte back and forth over two pipes, each sleeping in ``read`` until the other
writes: first both on one core, then one on each. The CPU of both (µs per round trip: two sleeps and
two wakes) is what a wake costs here; across cores it includes the other core's wake-up (an
inter-processor interrupt, which in a virtual machine the hypervisor delivers). Then the word count's
2 workers + 2 ackers, with and without words crossing workers, split into user and system CPU per
tree, with the threads' switches per tree (``/proc/<pid>/task/<tid>/schedstat``, as
``bench/threads.py``): the system part of the crossing is the kernel's (wakes, sockets), the user part
is the processes' own code (Python, gRPC's library).

    python bench/wakes.py [--seconds 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.threads import measure  # noqa: E402


def round_trip(*, seconds: float, cores: tuple[int, int]) -> tuple[float, float]:
    """(CPU µs, of it system µs) per round trip of one byte between two processes pinned to ``cores``."""
    ping_r, ping_w = os.pipe()
    pong_r, pong_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(ping_w)
            os.close(pong_r)
            os.sched_setaffinity(0, {cores[1]})
            while os.read(ping_r, 1):
                os.write(pong_w, b"x")
        finally:
            os._exit(0)
    os.close(ping_r)
    os.close(pong_w)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cores[0]})
    before = resource.getrusage(resource.RUSAGE_SELF)
    trips, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(100):
            os.write(ping_w, b"x")
            os.read(pong_r, 1)
        trips += 100
    mine = resource.getrusage(resource.RUSAGE_SELF)
    os.close(ping_w)
    _, _, theirs = os.wait4(child, 0)  # the child's whole life: it did nothing but the round trips
    os.close(pong_r)
    os.sched_setaffinity(0, allowed)
    system = mine.ru_stime - before.ru_stime + theirs.ru_stime
    total = system + mine.ru_utime - before.ru_utime + theirs.ru_utime
    return 1e6 * total / trips, 1e6 * system / trips


def split(*, cross: bool, seconds: float) -> str:
    window = measure(workers=2, seconds=seconds, cross=cross)
    trees = window.trees
    return (f"2w + 2a{'' if cross else ', no word crossing'}: {trees / window.seconds:,.0f} trees/s, "
            f"{1e6 * window.user / trees:.1f} user + {1e6 * window.system / trees:.1f} system CPU µs/tree, "
            f"{1000 * window.total(3) / trees:.0f} switches/1,000 trees")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="measurement window of each figure")
    parser.add_argument("--rounds", type=int, default=2, help="how many times to measure each figure")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        parser.error("needs two cores: the round trip across cores is the point")
    for i in range(args.rounds):
        for cores, where in (((cpus[0], cpus[0]), "on one core"), ((cpus[0], cpus[1]), "across cores")):
            cpu, system = round_trip(seconds=args.seconds / 3, cores=cores)
            print(f"round {i + 1}: a round trip {where}: {cpu:.1f} CPU µs ({system:.1f} of it system)", flush=True)
        for cross in (True, False):
            print(f"round {i + 1}: {split(cross=cross, seconds=args.seconds)}", flush=True)


if __name__ == "__main__":
    main()
