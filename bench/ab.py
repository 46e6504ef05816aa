"""This checkout against an older commit, alternated in one run: is a change faster, or was the hour?

On a shared machine the same code's CPU per tree moves by half between hours (see
``docs/performance.md``), so a ``make bench`` of a change says little beside an old run's figures.
This script checks ``REV`` out into a temporary git worktree, builds its compiled modules with this
Python, and runs ``bench/wordcount.py`` of each tree (with that tree's own ``squall``) in pairs,
alternating which goes first (baseline, this; this, baseline; ...) so that a drift of the machine
falls on both alike. It prints each case's CPU µs per tree and trees/s in every pair, and the ratio
this ÷ baseline per pair with its median: a change is real where the ratios of every pair agree.

    python bench/ab.py REV [--pairs 3] [--seconds 8] [--cases ceiling,local,2w2a]

The worktree is removed at the end. Both trees are built in place first (``python setup.py
build_ext --inplace``, incremental), so an edited module of this checkout is measured as edited.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The rows whose ratio is one of issue 12's targets, by their label in wordcount.py's table
TARGETS = (("in-process trees/s ÷ ceiling trees/s", "in-process", "ceiling", "trees/s"),
           ("CPU µs/tree: 1 worker + 1 acker ÷ in-process", "1 worker + 1 acker", "in-process", "cpu"),
           ("CPU µs/tree: 2 workers + 2 ackers ÷ in-process", "2 workers + 2 ackers", "in-process", "cpu"))


@dataclass(frozen=True)
class Row:
    """One case of one run of ``bench/wordcount.py``: its trees/s and CPU µs per tree."""

    rate: float
    cpu: float

    def get(self, what: str) -> float:
        return self.rate if what == "trees/s" else self.cpu


def parse_table(output: str) -> dict[str, Row]:
    """The rows of wordcount.py's table, by case label (``| label | trees/s | CPU µs/tree | ...``)."""
    rows: dict[str, Row] = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("case", "") or set(cells[0]) <= {"-", ":"}:
            continue
        try:
            rows[cells[0]] = Row(float(cells[1].replace(",", "")), float(cells[2].replace(",", "")))
        except ValueError:
            continue  # not a table row
    return rows


def find(rows: dict[str, Row], prefix: str) -> Row | None:
    """The row whose label starts with ``prefix`` (labels carry explanations after the case's name)."""
    return next((row for label, row in rows.items() if label.startswith(prefix)), None)


def target_ratios(rows: dict[str, Row]) -> dict[str, float]:
    """Issue 12's ratios that this run's rows give."""
    out = {}
    for what, top, bottom, column in TARGETS:
        a, b = find(rows, top), find(rows, bottom)
        if a is not None and b is not None and b.get(column):
            out[what] = a.get(column) / b.get(column)
    return out


def summary(baseline: list[dict[str, Row]], this: list[dict[str, Row]]) -> list[str]:
    """Lines comparing the pairs: per case and column, each pair's figures and this ÷ baseline."""
    lines = []
    labels = [label for label in baseline[0] if all(label in run for run in baseline + this)]
    for column, unit in (("cpu", "CPU µs/tree"), ("trees/s", "trees/s")):
        lines.append(f"{unit}: baseline → this, per pair; this ÷ baseline, median (range)")
        for label in labels:
            pairs = [(old[label].get(column), new[label].get(column)) for old, new in zip(baseline, this, strict=True)]
            ratios = sorted(new / old for old, new in pairs if old)
            figures = ", ".join(f"{old:,.1f} → {new:,.1f}" if column == "cpu" else f"{old:,.0f} → {new:,.0f}"
                                for old, new in pairs)
            lines.append(f"  {label:<32} {figures}   {_median(ratios)}")
    lines.append("issue 12's ratios: baseline per pair | this per pair")
    for what, *_ in TARGETS:
        old = [r[what] for r in map(target_ratios, baseline) if what in r]
        new = [r[what] for r in map(target_ratios, this) if what in r]
        if old and new:
            lines.append(f"  {what:<48} {' '.join(f'{v:.2f}' for v in old)} | {' '.join(f'{v:.2f}' for v in new)}")
    return lines


def _median(values: list[float]) -> str:
    if not values:
        return "—"
    spread = f" ({values[0]:.2f}–{values[-1]:.2f})" if len(values) > 1 else ""
    return f"{statistics.median(values):.2f}{spread}"


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """``rev`` checked out into a temporary worktree of this repository, removed afterwards."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, capture_output=True,
                            text=True)
    if commit.returncode:
        sys.exit(f"ab.py: {rev!r} is no commit of {REPO}: {commit.stderr.strip()}")
    with tempfile.TemporaryDirectory(prefix="squall-ab-") as tmp:
        tree = Path(tmp) / commit.stdout.strip()[:12]
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), commit.stdout.strip()],
                       cwd=REPO, check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


def build(tree: Path) -> None:
    """The tree's compiled modules, built in place with this Python (incremental)."""
    print(f"building {tree} ...", flush=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL)


def environment(tree: Path) -> dict[str, str]:
    """This process's environment with ``tree``'s squall first on the path; checked, since an installed
    squall elsewhere would otherwise be measured twice."""
    env = {**os.environ, "PYTHONPATH": str(tree / "worker")}
    env.pop("SQUALL_PURE_PYTHON", None)
    found = subprocess.run([sys.executable, "-c", "import squall; print(squall.__file__)"], env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to((tree / "worker").resolve()):
        sys.exit(f"ab.py: with PYTHONPATH={tree / 'worker'} squall still comes from {found}")
    return env


def run(tree: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Row]:
    """One round of the tree's own ``bench/wordcount.py``, its table parsed."""
    out = subprocess.run([sys.executable, "bench/wordcount.py", "--cases", args.cases, "--rounds", "1",
                          "--seconds", str(args.seconds), "--no-memory"], cwd=tree, env=env, capture_output=True,
                         text=True)
    rows = parse_table(out.stdout)
    if out.returncode or not rows:
        sys.exit(f"ab.py: bench/wordcount.py of {tree} failed (exit {out.returncode}):\n{out.stdout}{out.stderr}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the baseline: a commit, branch or tag of this repository")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs, each pair one run of each tree")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per case")
    parser.add_argument("--cases", default="ceiling,local,2w2a", help="bench/wordcount.py's --cases")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs: at least 1")
    with worktree(args.rev) as old_tree:
        build(old_tree)
        build(REPO)
        trees = {"baseline": (old_tree, environment(old_tree)), "this": (REPO, environment(REPO))}
        results: dict[str, list[dict[str, Row]]] = {"baseline": [], "this": []}
        start = time.monotonic()
        for i in range(args.pairs):
            order = ("baseline", "this") if i % 2 == 0 else ("this", "baseline")
            for name in order:
                tree, env = trees[name]
                results[name].append(run(tree, env, args))
                ratios = target_ratios(results[name][-1])
                shown = ", ".join(f"{what.split(':')[-1].strip()} {v:.2f}" for what, v in ratios.items())
                print(f"pair {i + 1} of {args.pairs}, {name}: {shown}  ({time.monotonic() - start:.0f} s)", flush=True)
    print(f"\n{args.rev} (baseline) against this checkout, {args.pairs} alternated pairs of "
          f"{args.seconds:g} s per case; load average {os.getloadavg()[0]:.2f} at the end")
    print("\n".join(summary(results["baseline"], results["this"])))


if __name__ == "__main__":
    main()
