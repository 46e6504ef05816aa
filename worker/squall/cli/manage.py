"""Storm's command line for a cluster's Topologies: ``squall list``, ``rebalance``, ``kill``, ``activate``,
``deactivate`` and ``set-log-level``, each through the Kubernetes API (:mod:`squall.cli.cluster`).

Each writes the Topology and lets the operator carry it out, as ``kubectl`` would: a rebalance is a patch of
``spec.workers`` and the components' ``parallelism``; ``activate``/``deactivate`` set ``spec.suspended``;
``kill`` deactivates, waits, then deletes (Storm's ``kill -w``); ``set-log-level`` writes the annotation
the operator relays to the processes (:mod:`squall.process.log_levels`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from squall.cli import cluster
from squall.cli.cluster import EXIT_CODES, NOT_DONE, Cluster, ClusterError, age, condition
from squall.cli.options import positive
from squall.cli.top import p99_ms, rate, scrape
from squall.errors import TopologyError
from squall.process import log_levels

WAIT = 600.0  # seconds rebalance --wait waits by default
POLL = 1.0  # seconds between two looks at a Topology being waited for
DEFAULT_LOG_TIMEOUT = 300.0  # seconds a set-log-level lasts by default


def _parser(subparsers: argparse._SubParsersAction, name: str, *, help: str, examples: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=f"examples:\n{examples}\n\n{EXIT_CODES}")
    cluster.options(p)
    return p


def register(subparsers: argparse._SubParsersAction) -> None:
    p = _parser(subparsers, "list", help="list the Topologies of a namespace with their rates (Storm's list)",
                examples="  squall list                 # the current namespace\n"
                         "  squall list -n streams -o json")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table", help="(default: table)")
    p.add_argument("--interval", type=positive(float), default=1.0,
                   help="seconds between the two reads of the pods' /metrics the rates come from (default 1)")
    p.set_defaults(func=run_list)

    p = _parser(subparsers, "rebalance", help="change a Topology's workers or its components' parallelism; the "
                "operator drains and switches its pods (Storm's rebalance)",
                examples="  squall rebalance wordcount --workers 3 --wait\n"
                         "  squall rebalance wordcount --parallelism split=4 --parallelism count=2")
    p.add_argument("name", help="the Topology")
    p.add_argument("--workers", type=positive(int), help="worker pods")
    p.add_argument("--ackers", type=int, help="acker pods (0: none)")
    p.add_argument("-e", "--parallelism", action="append", default=[], metavar="COMPONENT=P",
                   help="a spout's or bolt's executors (repeatable); its tasks must allow it")
    p.add_argument("--wait", nargs="?", type=positive(float), const=WAIT, default=None, metavar="SECONDS",
                   help=f"wait until the operator has rebalanced it and it is Ready, printing its progress "
                        f"(at most SECONDS, default {WAIT:.0f})")
    p.set_defaults(func=run_rebalance)

    p = _parser(subparsers, "kill", help="deactivate a Topology, wait for its trees in flight, then delete it "
                "(Storm's kill)", examples="  squall kill wordcount            # waits its message timeout\n"
                                          "  squall kill wordcount --wait 0   # deletes at once")
    p.add_argument("name", help="the Topology")
    p.add_argument("-w", "--wait", type=float, default=None, metavar="SECONDS",
                   help="seconds between deactivating and deleting (default: its messageTimeoutSeconds)")
    p.set_defaults(func=run_kill)

    for verb, suspended in (("activate", False), ("deactivate", True)):
        p = _parser(subparsers, verb, help=f"{'start' if not suspended else 'stop'} a Topology's spouts "
                    f"(spec.suspended: {str(suspended).lower()}; pods kept)", examples=f"  squall {verb} wordcount")
        p.add_argument("name", help="the Topology")
        p.set_defaults(func=run_suspend, suspended=suspended)

    p = _parser(subparsers, "set-log-level", help="set a logger's level in every process of a running Topology "
                "for a while, without a restart (Storm's set_log_level)",
                examples="  squall set-log-level wordcount DEBUG                       # the root logger, 5 min\n"
                         "  squall set-log-level wordcount DEBUG --logger squall.transport --timeout 60")
    p.add_argument("name", help="the Topology")
    p.add_argument("level", type=str.upper, help="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    p.add_argument("--logger", default=log_levels.ROOT, help="the logger's name (default ROOT: every logger "
                   "without a level of its own)")
    p.add_argument("--timeout", type=positive(float), default=DEFAULT_LOG_TIMEOUT,
                   help=f"seconds until each process sets it back to its own level (default {DEFAULT_LOG_TIMEOUT:.0f})")
    p.set_defaults(func=run_set_log_level)


# -- list --------------------------------------------------------------------------------------------------

def rows(kube: Cluster, *, interval: float) -> list[dict[str, Any]]:
    """Each Topology with its status and its rates over ``interval`` seconds (None where not known: no
    running pod, or its /metrics could not be read)."""
    topologies = kube.topologies()
    pods: dict[str, list[dict[str, Any]]] = {}
    try:
        listed = kube.pods() if topologies else []
    except ClusterError as exc:  # may read Topologies, not pods: the table without rates
        if exc.exit_code != cluster.FORBIDDEN:
            raise
        print(f"squall list: warning: no rates: {exc}", file=sys.stderr)
        listed = []
    for pod in listed:
        if cluster.running(pod):
            pods.setdefault(pod["metadata"]["labels"][cluster.INSTANCE], []).append(pod)
    by_name = {p["metadata"]["name"]: p for ps in pods.values() for p in ps}
    unreadable: list[str] = []

    def get(url: str) -> str:
        pod, _, path = url.partition("/")
        try:
            return kube.proxy_get(by_name[pod], path)
        except ClusterError as exc:
            unreadable.append(str(exc))
            raise OSError(str(exc)) from None

    urls = {name: [f"{p['metadata']['name']}/metrics" for p in ps] for name, ps in pods.items()}
    every = [u for us in urls.values() for u in us]
    first = scrape(every, get) if every else None
    if every:
        time.sleep(interval)
    second = scrape(every, get) if every else None
    if unreadable and first is not None and not first.up:
        print(f"squall list: warning: no pod's /metrics could be read, so no rates: {unreadable[0]}", file=sys.stderr)
    out = []
    for t in topologies:
        meta, st, spec = t["metadata"], t.get("status") or {}, t.get("spec") or {}
        row: dict[str, Any] = {
            "name": meta["name"], "phase": st.get("phase") or "",
            "reason": next((c.get("reason") for c in st.get("conditions") or () if c.get("type") == "Degraded"
                            and c.get("status") == "True"), None),
            "workers": spec.get("workers", 1), "readyWorkers": st.get("readyWorkers", 0),
            "ackers": st.get("ackers", spec["ackers"] if spec.get("ackers") is not None else spec.get("workers", 1)),
            "readyAckers": st.get("readyAckers", 0), "suspended": bool(spec.get("suspended")),
            "ackedPerSecond": None, "failedPerSecond": None, "p99Ms": None, "lag": None,
            "created": meta.get("creationTimestamp"), "age": age(meta.get("creationTimestamp")),
        }
        mine = urls.get(meta["name"])
        if mine and first is not None and second is not None:
            a, b = first.only(mine), second.only(mine)
            if b.up:  # the rates squall top shows, over the spouts
                spouts = [c for c in b.components() if c in b.spouts]
                row["ackedPerSecond"] = round(sum(rate(b, a, c, "acked") for c in spouts), 1)
                row["failedPerSecond"] = round(sum(rate(b, a, c, "failed") for c in spouts), 1)
                p99 = p99_ms(b, a)
                row["p99Ms"] = None if p99 is None else round(p99, 2)
                row["lag"] = b.lag
        out.append(row)
    return out


def _cell(value: Any, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def run_list(args: argparse.Namespace) -> int:
    kube = Cluster.connect(args)
    found = rows(kube, interval=args.interval)
    if args.output == "json":
        print(json.dumps(found, indent=2))
        return 0
    if args.output == "yaml":
        print(yaml.safe_dump(found, sort_keys=False), end="")
        return 0
    if not found:
        print(f"no topologies in namespace {kube.namespace}", file=sys.stderr)
        return 0
    table = [("NAME", "PHASE", "WORKERS", "ACKERS", "ACKED/S", "FAILED/S", "P99 MS", "LAG", "AGE")]
    for r in found:
        phase = r["phase"] + (f" ({r['reason']})" if r["reason"] else "")
        table.append((r["name"], phase or "-", f"{r['readyWorkers']}/{r['workers']}",
                      f"{r['readyAckers']}/{r['ackers']}", _cell(r["ackedPerSecond"]), _cell(r["failedPerSecond"]),
                      _cell(r["p99Ms"]), _cell(r["lag"], "{:,.0f}"), r["age"]))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


# -- rebalance ---------------------------------------------------------------------------------------------

def rebalanced_spec(spec: dict[str, Any], *, workers: int | None, ackers: int | None,
                    parallelism: list[str]) -> dict[str, Any]:
    """The spec with the new counts; :class:`ClusterError` (exit 2) naming a component that is not there."""
    new = json.loads(json.dumps(spec))
    if workers is not None:
        new["workers"] = workers
    if ackers is not None:
        new["ackers"] = ackers
    components = {c["name"]: c for c in [*(new.get("spouts") or []), *(new.get("bolts") or [])]}
    for item in parallelism:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit() or int(value) < 1:
            raise ClusterError(f"--parallelism {item!r}: give COMPONENT=P, P a whole number above 0", exit_code=2)
        if name not in components:
            raise ClusterError(f"--parallelism {item!r}: no component {name!r} (components: "
                               f"{', '.join(sorted(components))})", exit_code=2)
        components[name]["parallelism"] = int(value)
    return new


def run_rebalance(args: argparse.Namespace) -> int:
    from squall_operator.resource import check_spec

    if args.workers is None and args.ackers is None and not args.parallelism:
        raise ClusterError("nothing to change: give --workers, --ackers or --parallelism COMPONENT=P", exit_code=2)
    kube = Cluster.connect(args)
    topology = kube.topology(args.name)
    spec = topology.get("spec") or {}
    new = rebalanced_spec(spec, workers=args.workers, ackers=args.ackers, parallelism=args.parallelism)
    try:
        check_spec(args.name, new, namespace=kube.namespace)  # the operator's and the webhook's checks, first
    except TopologyError as exc:
        raise ClusterError(f"the rebalanced spec would be refused: {exc}", exit_code=2) from None
    if new == spec:
        print(f"topology {args.name!r} already has those counts: nothing to change")
        return 0
    changed = {key: new[key] for key in ("workers", "ackers", "spouts", "bolts") if new.get(key) != spec.get(key)}
    patched = kube.patch(args.name, {"metadata": {"resourceVersion": topology["metadata"]["resourceVersion"]},
                                     "spec": changed})
    generation = patched["metadata"].get("generation")
    print(f"topology {args.name!r}: rebalance asked ({_counts(new)}; generation {generation}); the operator drains "
          "its spouts and switches its pods")
    if args.wait is None:
        return 0
    return wait_rebalanced(kube, args.name, generation=generation, timeout=args.wait)


def _counts(spec: dict[str, Any]) -> str:
    parts = [f"{spec.get('workers', 1)} worker(s)"]
    if spec.get("ackers") is not None:
        parts.append(f"{spec['ackers']} acker(s)")
    components = [*(spec.get("spouts") or []), *(spec.get("bolts") or [])]
    parts += [f"{c['name']}={c.get('parallelism', 1)}" for c in components]
    return ", ".join(parts)


def progress(topology: dict[str, Any], generation: int | None) -> tuple[str, bool | None]:
    """What a rebalance of ``generation`` is at (a line), and whether it is over: True rebalanced and Ready,
    False refused or invalid, None under way."""
    st = topology.get("status") or {}
    if generation is not None and (st.get("observedGeneration") or 0) < generation:
        return "waiting for the operator", None
    ready, degraded = condition(topology, "Ready"), condition(topology, "Degraded")
    if st.get("phase") == "Failed" or degraded.get("reason") == "SwitchRefused":
        return f"refused: {degraded.get('message') or ready.get('message')}", False
    rebalance = st.get("rebalance")
    pods = f"{st.get('ready', '?')} pods ready"
    if rebalance:
        return f"{rebalance.get('step')} to plan {rebalance.get('target')} ({pods})", None
    if ready.get("status") == "True":
        return f"Rebalanced: Ready, {pods}", True
    return f"{ready.get('reason') or 'not ready'} ({pods})", None


def wait_rebalanced(kube: Cluster, name: str, *, generation: int | None, timeout: float) -> int:
    deadline, said, began = time.monotonic() + timeout, None, time.monotonic()
    while True:
        line, over = progress(kube.topology(name), generation)
        if line != said:
            print(f"{time.monotonic() - began:6.1f} s  {line}", flush=True)
            said = line
        if over is not None:
            return 0 if over else NOT_DONE
        if time.monotonic() >= deadline:
            raise ClusterError(f"topology {name!r} not rebalanced after {timeout:.0f} s ({line}): kubectl describe "
                               f"topology {name} -n {kube.namespace} says why", exit_code=NOT_DONE)
        time.sleep(POLL)


# -- kill, activate, deactivate ----------------------------------------------------------------------------

def _suspend(kube: Cluster, name: str, suspended: bool) -> dict[str, Any]:
    topology = kube.topology(name)  # not there: says so (exit 5)
    if bool((topology.get("spec") or {}).get("suspended")) == suspended:
        return topology
    return kube.patch(name, {"spec": {"suspended": suspended}})


def run_suspend(args: argparse.Namespace) -> int:
    kube = Cluster.connect(args)
    _suspend(kube, args.name, args.suspended)
    print(f"topology {args.name!r} {'deactivated' if args.suspended else 'activated'}: its spouts "
          f"{'stop' if args.suspended else 'start'} within about a second (phase "
          f"{'Suspended' if args.suspended else 'Running'} once the operator has told its pods)")
    return 0


def run_kill(args: argparse.Namespace) -> int:
    kube = Cluster.connect(args)
    topology = _suspend(kube, args.name, True)
    wait = args.wait if args.wait is not None else float((topology.get("spec") or {}).get("messageTimeoutSeconds", 30))
    if wait > 0:
        print(f"topology {args.name!r} deactivated; deleting it in {wait:.0f} s, once its trees in flight are done",
              flush=True)
        time.sleep(wait)  # Storm's kill -w: the time the trees in flight are given
    kube.delete(args.name)
    print(f"topology {args.name!r} deleted: Kubernetes deletes its pods and objects with it")
    return 0


# -- set-log-level -----------------------------------------------------------------------------------------

def run_set_log_level(args: argparse.Namespace) -> int:
    try:
        level = log_levels.level_name(args.level)
    except ValueError as exc:
        raise ClusterError(str(exc), exit_code=2) from None
    kube = Cluster.connect(args)
    topology = kube.topology(args.name)
    now = datetime.now(UTC).replace(microsecond=0)
    until = now + timedelta(seconds=args.timeout)
    logger = log_levels.ROOT if not log_levels.logger_name(args.logger) else args.logger
    annotations = topology["metadata"].get("annotations") or {}
    kept = [o for o in log_levels.active(log_levels.parse(annotations.get(log_levels.ANNOTATION)), now)
            if o.logger != logger]
    value = log_levels.dump([*kept, log_levels.Override(logger=logger, level=level, until=until)])
    kube.patch(args.name, {"metadata": {"annotations": {log_levels.ANNOTATION: value}}})
    print(f"topology {args.name!r}: logger {logger} at {level} until {until.strftime('%H:%M:%S')} UTC "
          f"({args.timeout:.0f} s); the operator tells every process now, each sets it back by itself")
    return 0
