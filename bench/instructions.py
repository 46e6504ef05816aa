"""Instructions per tree of the in-process word count, counted by callgrind: the same figure for the
same code whatever else the machine does, so a change to the engine's hot path can be measured before
against after without the noise of a shared machine's CPU time.

The word count of ``bench/wordcount.py`` runs in ``LocalCluster`` under ``valgrind --tool=callgrind``
twice, for a short and a long window; the difference of the instructions counted over the difference
of the trees acked is what a tree costs, with the start (imports, building the topology) taken out.
Instructions are not time: a cache miss counts as one. Use it beside the CPU figures of ``make
bench``, not instead of them. Needs valgrind (Debian's ``valgrind`` package).

    python bench/instructions.py [--seconds 8 32] [--source DIR] [--worker]

``--source DIR``: measure the squall package in DIR (a checkout's ``worker``, built with ``python
setup.py build_ext --inplace`` there) instead of the installed one: two checkouts, one run each.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def child(seconds: float, worker: bool) -> None:
    """Run the word count for ``seconds`` (of valgrind's slow clock) and print the trees acked."""
    sys.path.insert(0, str(REPO))
    if worker:
        print(f"trees {worker_alone(seconds)}")
        return
    from bench.wordcount import spec
    from squall.testing import LocalCluster
    from squall.topology import TopologySpec

    with LocalCluster(TopologySpec.from_dict(spec(workers=1, ackers=1))) as cluster:
        cluster.run(seconds=seconds)
        print(f"trees {cluster.trees_acked()}")


def lone_worker(clock: Callable[[], float] = time.monotonic, flush_interval: float = 0.001) -> tuple[Any, Any, Any]:
    """The word count's worker of 1 worker + 1 acker, the home of its acker, with its real transport
    (``clock`` its clock) and an acker that never starts: (plan, the worker's wiring, transport)."""
    from bench.wordcount import spec
    from squall.process.supervisor import free_ports
    from squall.topology import TopologySpec
    from squall.topology.assignment import assign
    from squall.topology.plan import Plan
    from squall.transport.codec import Decoder
    from squall.transport.transport import Transport

    topology = TopologySpec.from_dict(spec(workers=1, ackers=1))
    plan = Plan(topology)
    wiring = assign(plan.layout).wiring("worker", 0)
    [port] = free_ports(1)  # nobody listens there: the acker never runs
    transport = Transport(name="worker-0", fingerprint=topology.fingerprint(), owner=wiring.owner, ackers=wiring.ackers,
                          senders=wiring.senders, addresses={"acker-0": f"127.0.0.1:{port}"}, bind="127.0.0.1:0",
                          decoder=Decoder(plan, bolt_tasks=wiring.bolt_tasks, spout_tasks=wiring.spout_tasks,
                                          acker_tasks=frozenset()),
                          batch_size=topology.transfer.batch_size, flush_interval=flush_interval, max_frame=1 << 20,
                          forwards=wiring.forwards, clock=clock)
    return plan, wiring, transport


def worker_alone(seconds: float) -> int:
    """:func:`lone_worker` running with its runtime for ``seconds``: every tree completes young in the
    worker (the word count's do), so this is the worker's whole hot path without the gRPC threads'
    share. Returns the trees acked."""
    from squall.executor.runtime import Runtime

    # The transport's clock runs 100 times slow: under callgrind everything does, and a tree kept longer
    # than YOUNG_SECONDS by that clock would go to the acker, which never answers.
    plan, wiring, transport = lone_worker(clock=lambda: time.monotonic() / 100)
    runtime = Runtime(plan, executors=wiring.executors, acker_tasks=(), remote=transport)
    try:
        runtime.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not runtime.step():
                runtime.idle_wait()
        return sum(sum(s.acked.values()) for s in runtime.component_stats("sentences"))
    finally:
        runtime.close()
        transport.close()


def counted(seconds: float, source: Path | None, worker: bool) -> tuple[int, int]:
    """(instructions, trees) of one run under callgrind."""
    env = {**os.environ, **({"PYTHONPATH": str(source)} if source else {})}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                               __file__, "--child", str(seconds), *(["--worker"] if worker else [])],
                              env=env, capture_output=True, text=True,
                              check=True)
        trees = int(re.search(r"^trees (\d+)$", done.stdout, re.MULTILINE).group(1))
        instructions = int(re.search(r"^summary: (\d+)$", out.read_text(), re.MULTILINE).group(1))
    return instructions, trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, nargs=2, default=(8.0, 32.0), metavar=("SHORT", "LONG"),
                        help="the two windows (under callgrind a second holds about 600 trees)")
    parser.add_argument("--source", type=Path, help="a checkout's worker/ to measure instead of the installed squall")
    parser.add_argument("--worker", action="store_true",
                        help="a worker process's runtime and transport (trees complete young in it) instead of "
                             "LocalCluster: what 1 worker + 1 acker costs its worker")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.worker)
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    short, long = (counted(seconds, args.source, args.worker) for seconds in args.seconds)
    trees = long[1] - short[1]
    if trees <= 0:
        sys.exit(f"the long window acked no more trees than the short one ({long[1]} against {short[1]})")
    print(f"{(long[0] - short[0]) / trees:,.0f} instructions per tree "
          f"({long[0] - short[0]:,} over {trees:,} trees; {'a worker' if args.worker else 'in-process'}; "
          f"squall from {args.source or 'the installed package'})")


if __name__ == "__main__":
    main()
