"""The scale-out model of ``docs/performance.md``, fitted anew on this machine and printed with its predictions.

Runs the word count of ``bench/wordcount.py`` in ``squall run``'s processes with 1, 2, 3 and 4 workers
(and as many ackers), ``--rounds`` times, and fits, over every process's CPU per tree:

    CPU per tree = w + 8 × (N−1)/N × c + frames per tree × p

``w`` a tree's work in one worker (the median of the 1-worker runs), ``c`` a word crossing to another
worker (the fields grouping sends (N−1)/N of the 8 words away), ``p`` a frame between processes, both
ends; ``c`` and ``p`` by least squares over the runs with 2 or more workers. It prints each run against
the model, the frames a link sent per second, and the trees/s the model predicts with a core per worker
for 1 to 16 workers, between two bounds: every link as busy as at 2 workers (frames grow with the
peers), and a worker sending no more frames than at 2 workers (they get fuller). More workers than
cores show CPU per tree, not throughput, and their rounds, paced by the CPU each process gets, bound
their frames: only the 2-worker runs give the frames per link of the bounds.

    python bench/scaleout.py [--workers 1,2,3,4] [--rounds 2] [--seconds 8] [--flush-interval MS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.threads import measure  # noqa: E402

WORDS = 8  # of a tree, each to a count task chosen by the fields grouping


@dataclass(frozen=True)
class Run:
    workers: int
    cpu_us: float  # every process's CPU per tree
    frames: float  # frames between processes per tree
    rate: float  # trees/s

    @property
    def per_link(self) -> float:
        """Frames a second on each of the N(N−1) links between workers."""
        return self.frames * self.rate / (self.workers * (self.workers - 1)) if self.workers > 1 else 0.0


def crossing(workers: int) -> float:
    """Words of a tree that cross to another worker."""
    return WORDS * (workers - 1) / workers


def fit(runs: list[Run]) -> tuple[float, float, float]:
    """(w, c, p): w the median CPU per tree of the 1-worker runs, c and p by least squares."""
    w = statistics.median(r.cpu_us for r in runs if r.workers == 1)
    many = [r for r in runs if r.workers > 1]
    if len({r.workers for r in many}) < 2:
        raise ValueError("fitting c and p needs runs of at least two worker counts above 1")
    a = np.array([[crossing(r.workers), r.frames] for r in many])
    b = np.array([r.cpu_us - w for r in many])
    (c, p), *_ = np.linalg.lstsq(a, b, rcond=None)
    return w, float(c), float(p)


def frame_cores(links: int, per_link: float, p: float) -> float:
    """The share of a core that ``links`` links of ``per_link`` frames a second each take, at ``p`` µs a frame."""
    return links * per_link * p / 1e6


def predict(workers: int, w: float, c: float, p: float, per_link: float, *, fuller: bool = False) -> float:
    """Trees/s of ``workers`` workers with a core each: each spends ``R × (w + crossing × c)`` on its trees
    and ``links × per_link × p`` on frames (``fuller``: as many frames as with one peer); 0 if frames alone
    would take the core."""
    links = min(workers - 1, 1) if fuller else workers - 1
    left = 1.0 - frame_cores(links, per_link, p)
    return max(left, 0.0) * 1e6 / (w + crossing(workers) * c) * workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2,3,4", help="worker counts, comma-separated (1 and 2 among them)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every worker count")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window of a run")
    parser.add_argument("--flush-interval", type=float, metavar="MS", help="transfer.flushIntervalMs")
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.workers.split(",")})
    if 1 not in counts or 2 not in counts or len(counts) < 3:
        parser.error("--workers: 1, 2 and at least one more (w comes from 1 worker, c and p from the rest, the "
                     "frames per link from 2)")
    runs = []
    for i in range(args.rounds):
        for n in counts:
            window = measure(workers=n, seconds=args.seconds, flush_ms=args.flush_interval)
            run = Run(n, window.total(1) / 1e3 / window.trees, window.frames / window.trees,
                      window.trees / window.seconds)
            runs.append(run)
            print(f"round {i + 1}, {n} worker(s): {run.rate:,.0f} trees/s, {run.cpu_us:.1f} CPU µs per tree, "
                  f"{run.frames:.3f} frames per tree, {run.per_link:,.0f} frames/s per link, "
                  f"{run.per_link * (n - 1):,.0f} per worker", flush=True)
    w, c, p = fit(runs)
    print(f"\nunits: w {w:.1f} µs a tree in one worker, c {c:.2f} µs a crossing word, p {p:.0f} µs a frame")
    print("| workers | CPU µs per tree, measured | model |")
    print("|--:|--:|--:|")
    for r in runs:
        print(f"| {r.workers} | {r.cpu_us:.1f} | {w + crossing(r.workers) * c + r.frames * p:.1f} |")
    per_link = statistics.median(r.per_link for r in runs if r.workers == 2)
    print(f"\nframes per link at 2 workers: {per_link:,.0f} a second; predicted trees/s with a core per worker:")
    print("| workers | tuple µs per tree | cores of frames per worker, every link as at 2 | trees/s | trees/s, "
          "a worker's frames as at 2 |")
    print("|--:|--:|--:|--:|--:|")
    for n in (1, 2, 4, 8, 16):
        print(f"| {n} | {w + crossing(n) * c:.1f} | {frame_cores(n - 1, per_link, p):.2f} | "
              f"{predict(n, w, c, p, per_link):,.0f} | {predict(n, w, c, p, per_link, fuller=True):,.0f} |")


if __name__ == "__main__":
    main()
