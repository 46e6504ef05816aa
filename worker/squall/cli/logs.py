"""``squall logs NAME``: the logs of a Topology's worker and acker pods, merged, each line prefixed with its
pod and, where the line names one (``split task 3: ...``), its task; through the API server's ``pods/log``.

Without ``--follow``, the lines of every pod are merged in time order (a line without a time, a traceback's,
stays after the line it continues); with it, they are printed as they come.
"""

from __future__ import annotations

import argparse
import queue
import re
import sys
import threading
from typing import Any

from squall.cli import cluster
from squall.cli.cluster import EXIT_CODES, Cluster, ClusterError
from squall.errors import TopologyError

STAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+")  # the processes' log format's time
TASK = re.compile(r"\b([A-Za-z_][\w.-]*) task (\d+)\b")  # "count task 4: ..." names a component's task


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "logs", help="the logs of a Topology's pods, merged, each line prefixed with its pod and task",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The logs of a Topology's worker and acker pods (kubectl logs of each), merged.",
        epilog="examples:\n  squall logs wordcount\n  squall logs wordcount --component count --follow\n\n"
               + EXIT_CODES)
    p.add_argument("name", help="the Topology")
    p.add_argument("--component", help="only the pods that run this spout or bolt")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    p.add_argument("--tail", type=int, default=None, help="the last N lines of each pod (default: all)")
    cluster.options(p)
    p.set_defaults(func=run)


def prefix(pod: str, line: str) -> str:
    task = TASK.search(line)
    return f"[{pod}{f' {task.group(1)}:{task.group(2)}' if task else ''}] {line}"


def pods_of(topology: dict[str, Any], component: str | None, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods to read: all, or the worker pods whose process runs ``component``'s tasks (by the assignment
    every process computes from the spec)."""
    if component is None:
        return pods
    from squall.topology.assignment import assign, layout
    from squall_operator.resource import parse_spec

    name = topology["metadata"]["name"]
    try:
        lay = layout(parse_spec(name, topology.get("spec")))
    except TopologyError as exc:
        raise ClusterError(f"topology {name!r}: its spec does not parse, so its components are not known: {exc}",
                           exit_code=2) from None
    if component not in lay.component_tasks:
        raise ClusterError(f"topology {name!r} has no component {component!r} (components: "
                           f"{', '.join(sorted(c for c in lay.component_tasks if not c.startswith('__')))})",
                           exit_code=2)
    owner = assign(lay).task_owner()
    wanted = {f"{name}-{owner[t]}" for t in lay.component_tasks[component]}
    return [p for p in pods if p["metadata"]["name"] in wanted]


def _entries(pod: str, text: str) -> list[tuple[str, int, str]]:
    """(time, order, line) of each line of a pod's log: a line without a time takes the one before's."""
    out, stamp = [], ""
    for i, line in enumerate(text.splitlines()):
        if (m := STAMP.match(line)) is not None:
            stamp = m.group(0).replace("T", " ").replace(".", ",")
        out.append((stamp, i, prefix(pod, line)))
    return out


def run(args: argparse.Namespace) -> int:
    kube = Cluster.connect(args)
    topology = kube.topology(args.name)
    pods = pods_of(topology, args.component, kube.pods(args.name))
    if not pods:
        raise ClusterError(f"topology {args.name!r} in namespace {kube.namespace} has no pod"
                           f"{f' running {args.component}' if args.component else ''} yet", exit_code=cluster.NOT_DONE)
    if not args.follow:
        merged: list[tuple[str, int, str]] = []
        for pod in pods:
            name = pod["metadata"]["name"]
            try:
                response = kube.log(name, cluster.role(pod), follow=False, tail=args.tail)
            except ClusterError as exc:
                if exc.exit_code == cluster.FORBIDDEN:
                    raise
                print(f"squall logs: no log of {name} (starting, or gone): {exc}", file=sys.stderr)
                continue
            merged += _entries(name, response.data.decode(errors="replace"))
        for _, _, line in sorted(merged, key=lambda e: e[0]):  # stable: a pod's own order within a time
            print(line)
        return 0
    lines: queue.Queue[str | None] = queue.Queue()
    failures: list[ClusterError] = []

    def follow(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        try:
            response = kube.log(name, cluster.role(pod), follow=True, tail=args.tail)
            rest = b""
            for chunk in response.stream(4096, decode_content=True):  # chunks, not lines: split them here
                *whole, rest = (rest + chunk).split(b"\n")
                for line in whole:
                    lines.put(prefix(name, line.decode(errors="replace")))
            if rest:
                lines.put(prefix(name, rest.decode(errors="replace")))
        except ClusterError as exc:
            if exc.exit_code == cluster.FORBIDDEN:
                failures.append(exc)
            else:
                lines.put(f"[{name}] (no log: {exc})")
        except Exception as exc:  # the stream broke (the pod went): said, and the others go on
            lines.put(f"[{name}] (log stream ended: {exc})")
        finally:
            lines.put(None)

    for pod in pods:
        threading.Thread(target=follow, args=(pod,), daemon=True, name=f"logs {pod['metadata']['name']}").start()
    left = len(pods)
    while left:
        line = lines.get()
        if line is None:
            left -= 1
        else:
            print(line, flush=True)
    if failures:
        raise failures[0]
    print(f"squall logs: every pod's log stream ended (pods deleted or restarted): squall logs {args.name} -f again "
          "follows the new ones", file=sys.stderr)
    return 0
