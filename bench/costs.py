"""Per-tuple cost breakdown from a py-spy profile: each sample goes to the category of the
innermost frame that has one (so CPython's own work under a Squall frame counts as that frame's).

Record with ``--gil``: only the thread holding the GIL is sampled, so samples are Python CPU time
(idle threads and threads waiting for the GIL are left out). CPU spent without the GIL (gRPC's C
core, system calls) is the process's CPU from /proc minus what the samples account for. Squall's
hot path is compiled (setup.py): record with ``--native`` to see its frames (Cython keeps their file
and line), or run with ``SQUALL_PURE_PYTHON=1`` to profile the interpreted path.

    py-spy record --gil --native --rate 400 --format raw --output PROFILE -- \
        python bench/wordcount.py --cases local --no-memory
    python bench/wordcount.py --cases 1w1a,2w2a --profile DIR     # py-spy --gil --native on every worker and acker
    python bench/costs.py PROFILE [--trees N] [--only LocalCluster.run]

``--trees``: the trees acked during the recording, to turn samples into µs per tree.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

# (category, file pattern, function pattern, line range or None); the first match wins per frame.
# Function patterns match both an interpreted frame (``BoltCollector._emit``) and a compiled one
# (``BoltCollector__emit``, as py-spy --native names Cython's C functions).
RULES: list[tuple[str, str, str]] = [
    ("acker (XOR table)", r"(^|/)acker\.py$|(^|/)table\.py$", r"."),
    ("garbage collector", r"libpython|gcmodule", r"^gc_|collect"),
    ("encoding", r"codec\.py$", r"encode_"),
    ("decoding", r"codec\.py$", r"."),
    ("gRPC and its threads", r"grpc/|links\.py$|server\.py$|threading\.py$|queue\.py$|futures/", r"."),
    ("queueing (inboxes, transport buffers, ingress)", r"transport/transport\.py$|ingress\.py$", r"."),
    ("queueing (inboxes, transport buffers, ingress)", r"(^|/)base\.py$", r"send|flush|deliver"),
    ("latency stats", r"stats\.py$|hdr\.py$", r"."),
    ("routing", r"routing\.py$|grouping\.py$", r"."),
    ("Tuple construction", r"tuples\.py$", r"."),
    ("id generation", r"collectors\.py$", r"new_root"),
    ("emit loop", r"collectors\.py$", r"_emit$"),  # split by line below: ids, Tuples, the rest
    ("ack messages (collector)", r"collectors\.py$", r"[._]ack$|[._]fail$"),
    ("user code (sentences, split, count)", r"bench/wordcount\.py$|random\.py$", r"."),
    ("collectors (other)", r"collectors\.py$", r"."),
    ("executor loops and scheduler", r"(^|/)(bolt|spout|base|runtime|testing|rotating|process|pod)\.py$", r"."),
]
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^:()]+):(?P<line>\d+)\)$")


def emit_lines() -> tuple[list[int], list[int]]:
    """Lines of collectors.py that draw edge ids, and those that build Tuples (read from its source:
    the module may be compiled)."""
    from pathlib import Path

    import squall.executor

    source = Path(squall.executor.__file__).with_name("collectors.py").read_text().splitlines()
    ids = [i for i, text in enumerate(source, 1) if "getrandbits(64)" in text or "ack_val ^=" in text
           or "new_root" in text]
    tuples = [i for i, text in enumerate(source, 1) if "Tuple(" in text]
    return ids, tuples


def categorize(frames: list[str], ids: list[int], tuples: list[int]) -> str:
    for frame in reversed(frames):
        m = FRAME.match(frame)
        if not m:
            continue
        func, file, line = m["func"], m["file"], int(m["line"])
        for category, fpat, funcpat in RULES:
            if not re.search(fpat, file) or not re.search(funcpat, func):
                continue
            if category == "emit loop":
                if line in ids:
                    return "id generation"
                if line in tuples:
                    return "Tuple construction"
                return "collectors (other)"
            return category
    return "other (interpreter, imports, GC)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", help="py-spy --format raw output")
    parser.add_argument("--trees", type=float, help="trees acked during the recording, for µs per tree")
    parser.add_argument("--rate", type=float, default=200, help="py-spy's sampling rate (default 200 Hz)")
    parser.add_argument("--only", help="count only samples whose stack contains this text (e.g. Runtime.run)")
    args = parser.parse_args()
    ids, tuples = emit_lines()
    counts: Counter[str] = Counter()
    for line in open(args.profile):
        stack, n = line.rstrip("\n").rsplit(" ", 1)
        if args.only and args.only not in stack:
            continue
        counts[categorize(stack.split(";"), ids, tuples)] += int(n)
    total = sum(counts.values())
    print(f"| category | share of samples |{' µs per tree |' if args.trees else ''}")
    print(f"|---|---:|{'---:|' if args.trees else ''}")
    for category, n in counts.most_common():
        us = f" {n / args.rate / args.trees * 1e6:.1f} |" if args.trees else ""
        print(f"| {category} | {100 * n / total:.1f} % |{us}")
    total_us = f", {total / args.rate / args.trees * 1e6:.1f} µs per tree with the GIL held" if args.trees else ""
    print(f"\n{total} samples{total_us}")


if __name__ == "__main__":
    main()
