"""``squall top``: Storm UI's component table in the terminal, from the processes' ``/metrics``,
refreshed every second.

The URLs are ``/metrics`` of a topology's processes: a local ``squall run``'s (read from its run
directory, where it lists them) or a pod's through ``kubectl port-forward``. Rates are the difference
of two scrapes ``--interval`` apart; latencies are the means over that interval.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from squall.cli import cluster
from squall.cli.cluster import EXIT_CODES
from squall.cli.options import positive
from squall.contract import ERRORS_PATH
from squall.errors import SquallError
from squall.metrics.scrape import fetch
from squall.process.supervisor import PROCESSES_FILE
from squall.system import ACKER_COMPONENT
from squall.topology.spec import NAME_PATTERN

NAME = re.compile(NAME_PATTERN)  # a Topology's name, where a URL is not
COUNTERS = {"squall_emitted_total": "emitted", "squall_transferred_total": "transferred",
            "squall_executed_total": "executed", "squall_acked_total": "acked", "squall_failed_total": "failed",
            "squall_busy_seconds_total": "busy", "squall_errors_total": "errors",
            "squall_execute_latency_seconds_sum": "execute_sum", "squall_execute_latency_seconds_count": "execute_n",
            "squall_process_latency_seconds_sum": "process_sum", "squall_process_latency_seconds_count": "process_n"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "top", help="a live component table of a running topology, from its /metrics",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Storm UI's component table, refreshed every interval: a Topology of the cluster by its NAME "
                    "(its pods' /metrics through the API server's pod proxy: no port-forward), a local squall run, "
                    "or /metrics URLs.",
        epilog="examples:\n  squall top wordcount -n streams      # a Topology in a cluster, every 2 s\n"
               "  squall top                           # the local squall run\n"
               "  squall top http://localhost:9090/metrics\n\n" + EXIT_CODES)
    p.add_argument("urls", nargs="*", metavar="NAME|URL",
                   help="a Topology's name, or /metrics URLs of the topology's processes (default: those of the local "
                        "`squall run` in --run-dir)")
    p.add_argument("--run-dir", default=".squall/run",
                   help="the run directory of a local `squall run` (default .squall/run)")
    p.add_argument("--interval", type=positive(float), default=None,
                   help="seconds between two frames (default 2 for a Topology, 1 otherwise)")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    cluster.options(p)
    p.set_defaults(func=top)


def _counts() -> defaultdict[str, defaultdict[str, float]]:
    return defaultdict(lambda: defaultdict(float))


@dataclass
class Snapshot:
    """One scrape of every URL: per URL that answered, its counters per component and what process it is."""

    at: float
    up: int = 0
    topology: str = ""
    counters: dict[str, defaultdict[str, defaultdict[str, float]]] = field(default_factory=dict)
    #: per URL, its process's start time and spec's fingerprint: counters start from 0 when either changes
    identity: dict[str, tuple[float, str]] = field(default_factory=dict)
    spouts: set[str] = field(default_factory=set)
    busy: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (url, component, executor) → s
    pending: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    lag: float | None = None
    lags: dict[str, float] = field(default_factory=dict)  # per URL, what its spouts' sources hold unread
    last_error: dict[str, tuple[float, str]] = field(default_factory=dict)
    states: Counter[str] = field(default_factory=Counter)  # squall_process_state: processes in each
    #: per URL, the spouts' complete latency histogram: its cumulative bucket counts by upper bound (s)
    complete: dict[str, defaultdict[float, float]] = field(default_factory=dict)

    def add_errors(self, errors: list[dict]) -> None:
        """A process's ``GET /errors``: the newest error of each component, with its message."""
        for e in errors:
            if e["time"] > self.last_error.get(e["component"], (0.0, ""))[0]:
                self.last_error[e["component"]] = (e["time"], e["error"])

    def add(self, url: str, text: str) -> None:
        counters, started, fingerprint, complete = _counts(), 0.0, "", defaultdict(float)
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                comp = s.labels.get("component", "")
                self.topology = s.labels.get("topology", self.topology)
                if s.name in COUNTERS:
                    counters[comp][COUNTERS[s.name]] += s.value
                    if s.name == "squall_busy_seconds_total":
                        self.busy[(url, comp, s.labels["executor"])] = s.value
                elif s.name == "squall_pending_trees" and comp != ACKER_COMPONENT:
                    self.pending[comp] += s.value
                elif s.name == "squall_max_spout_pending":
                    self.spouts.add(comp)
                elif s.name == "squall_spout_lag_records":
                    self.lag = (self.lag or 0.0) + s.value
                    self.lags[url] = self.lags.get(url, 0.0) + s.value
                elif s.name == "process_start_time_seconds":
                    started = s.value
                elif s.name == "squall_process_info":
                    fingerprint = s.labels.get("plan", "")
                elif s.name == "squall_process_state" and s.value == 1:
                    self.states[s.labels["state"]] += 1
                elif s.name == "squall_complete_latency_seconds_bucket":
                    complete[float(s.labels["le"])] += s.value
        self.up += 1
        self.counters[url], self.identity[url], self.complete[url] = counters, (started, fingerprint), complete

    def only(self, urls: list[str]) -> Snapshot:
        """The part of this snapshot that is ``urls``' (one Topology's pods, of a scrape of several)."""
        part = Snapshot(at=self.at, topology=self.topology, spouts=self.spouts)
        for url in urls:
            if url in self.counters:
                part.up += 1
                part.counters[url], part.identity[url], part.complete[url] = (
                    self.counters[url], self.identity[url], self.complete[url])
            if url in self.lags:
                part.lags[url] = self.lags[url]
                part.lag = (part.lag or 0.0) + self.lags[url]
        part.busy = {key: busy for key, busy in self.busy.items() if key[0] in urls}
        return part

    def components(self) -> list[str]:
        return sorted({comp for counters in self.counters.values() for comp in counters})

    def total(self, comp: str, name: str) -> float:
        return sum(counters[comp][name] for counters in self.counters.values() if comp in counters)


def scrape(urls: list[str], get: Callable[[str], str] | None = None) -> Snapshot:
    """Every URL's ``/metrics`` and ``/errors`` beside it, read by ``get`` (HTTP by default; the cluster
    verbs read pods through the API server's pod proxy), 8 at a time."""
    read = get or fetch

    def one(url: str) -> tuple[str, list[dict]] | None:
        try:
            return read(url), json.loads(read(url.rsplit("/", 1)[0] + ERRORS_PATH))
        except (OSError, ValueError):
            return None  # a process restarting: the header counts it as down

    snap = Snapshot(at=time.monotonic())
    with ThreadPoolExecutor(max_workers=8) as pool:
        for url, answer in zip(urls, pool.map(one, urls), strict=True):
            if answer is None:
                continue
            try:
                snap.add(url, answer[0])
                snap.add_errors(answer[1])
            except (ValueError, KeyError, TypeError):
                continue  # not a process's /metrics (another server on that port): counted as down
    return snap


def _delta(cur: Snapshot, prev: Snapshot, comp: str, name: str) -> float:
    """What ``name`` of ``comp`` counted between the two scrapes, over the processes that answered both: all
    of it where the process restarted or switched plans meanwhile (its counters began at 0), and nothing of
    a process that one scrape missed (its whole count is no rate; summed, it made one of millions a second)."""
    total = 0.0
    for url, counters in cur.counters.items():
        before = prev.counters.get(url)
        if before is None or comp not in counters:
            continue
        now = counters[comp][name]
        total += now if cur.identity[url] != prev.identity[url] else max(0.0, now - before[comp][name])
    return total


def p99_ms(cur: Snapshot, prev: Snapshot) -> float | None:
    """The spouts' 99th percentile complete latency over the interval between two snapshots, in ms,
    interpolated in its bucket as Prometheus' ``histogram_quantile`` does (None: no tree completed)."""
    buckets: defaultdict[float, float] = defaultdict(float)
    for url, now in cur.complete.items():
        before = prev.complete.get(url)
        if before is None:
            continue
        same = cur.identity[url] == prev.identity[url]
        for le, n in now.items():
            buckets[le] += max(0.0, n - before.get(le, 0.0)) if same else n
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, lower, below = 0.99 * buckets[bounds[-1]], 0.0, 0.0
    for le in bounds:
        if buckets[le] >= rank:
            if le == math.inf:
                return lower * 1000  # beyond the last finite bound: that bound, as Prometheus says
            return (lower + (le - lower) * (rank - below) / max(buckets[le] - below, 1e-12)) * 1000
        lower, below = le, buckets[le]
    return None


def rate(cur: Snapshot, prev: Snapshot, comp: str, name: str) -> float:
    return _delta(cur, prev, comp, name) / max(cur.at - prev.at, 1e-9)


def _mean_ms(cur: Snapshot, prev: Snapshot, comp: str, kind: str) -> str:
    n = _delta(cur, prev, comp, f"{kind}_n")
    if n <= 0:
        return "-"
    return f"{_delta(cur, prev, comp, f'{kind}_sum') / n * 1000:.3f}"


def _capacity(cur: Snapshot, prev: Snapshot, comp: str) -> str:
    shares = [(v - prev.busy[key]) / max(cur.at - prev.at, 1e-9) for key, v in cur.busy.items()
              if key[1] == comp and key in prev.busy and cur.identity[key[0]] == prev.identity[key[0]]]
    return f"{min(1.0, max(shares)):.3f}" if shares else "-"


def frame(prev: Snapshot, cur: Snapshot, *, expected: int) -> str:
    """The header and the component table for the interval between two snapshots."""
    spouts = [c for c in cur.components() if c in cur.spouts]
    acked = sum(rate(cur, prev, c, "acked") for c in spouts)
    failed = sum(rate(cur, prev, c, "failed") for c in spouts)
    # a process not processing says what it does instead: waiting for peers, rebalancing, ...
    doing = ", ".join(f"{n} {state}" for state, n in sorted(cur.states.items()))
    states = "" if set(cur.states) <= {"active"} else f" ({doing})"
    header = (f"topology {cur.topology or '?'}   processes {cur.up}/{expected}{states}   trees acked {acked:,.1f}/s   "
              f"failed {failed:,.1f}/s   pending {sum(cur.pending[c] for c in spouts):,.0f}"
              + (f"   p99 {p99:,.1f} ms" if (p99 := p99_ms(cur, prev)) is not None else "")
              + (f"   lag {cur.lag:,.0f}" if cur.lag is not None else ""))
    rows = [("component", "emitted/s", "transferred/s", "executed/s", "acked/s", "failed/s", "execute ms",
             "process ms", "capacity", "errors", "last error")]
    for comp in (c for c in cur.components() if c and c != ACKER_COMPONENT):
        spout = comp in spouts
        error = cur.last_error.get(comp)
        rows.append((comp, *(f"{rate(cur, prev, comp, n):,.1f}" for n in ("emitted", "transferred")),
                     "-" if spout else f"{rate(cur, prev, comp, 'executed'):,.1f}",
                     *(f"{rate(cur, prev, comp, n):,.1f}" for n in ("acked", "failed")),
                     "-" if spout else _mean_ms(cur, prev, comp, "execute"),
                     "-" if spout else _mean_ms(cur, prev, comp, "process"),
                     "-" if spout else _capacity(cur, prev, comp),
                     f"{cur.total(comp, 'errors'):,.0f}",
                     f"{error[1][:60]} ({time.time() - error[0]:,.0f} s ago)" if error else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i in (0, len(widths) - 1) else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]
    return "\n".join([header, "", *lines])


def _urls(args: argparse.Namespace) -> list[str]:
    if args.urls:
        for url in args.urls:
            if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
                raise SquallError(f"{url!r} is neither a Topology's name nor a URL: give each process's /metrics "
                                  "as http://HOST:PORT/metrics (e.g. http://localhost:9090/metrics)")
        return list(args.urls)
    listed = Path(args.run_dir) / PROCESSES_FILE
    try:
        return list(json.loads(listed.read_text()).values())
    except FileNotFoundError:
        raise SquallError(f"no {listed}: start `squall run` first (with worker processes: an --in-process run "
                          "serves no /metrics), or give a Topology's name (squall top NAME -n NAMESPACE), or "
                          "/metrics URLs") from None


class PodSource:
    """A Topology's running pods as :func:`scrape`'s URLs (``POD/metrics``), read through the API server's pod
    proxy: a pod that does not answer counts as down; being forbidden to read them stops ``squall top``."""

    def __init__(self, kube: cluster.Cluster, name: str) -> None:
        self.kube, self.name = kube, name
        self.pods: dict[str, dict] = {}

    def urls(self) -> list[str]:
        """The running pods, listed again (a rebalance adds and removes some); why none is running if so."""
        topology = self.kube.topology(self.name)
        self.pods = {p["metadata"]["name"]: p for p in self.kube.pods(self.name) if cluster.running(p)}
        if not self.pods:
            st = topology.get("status") or {}
            ready = cluster.condition(topology, "Ready")
            why = f": {ready.get('reason')}: {ready.get('message')}" if ready.get("message") else ""
            raise cluster.ClusterError(f"topology {self.name!r} in namespace {self.kube.namespace} has no running pod "
                                       f"(phase {st.get('phase') or 'none yet'}{why}); kubectl describe topology "
                                       f"{self.name} -n {self.kube.namespace} says more", exit_code=cluster.NOT_DONE)
        return [f"{pod}/metrics" for pod in sorted(self.pods)]

    def get(self, url: str) -> str:
        pod, _, path = url.partition("/")
        try:
            return self.kube.proxy_get(self.pods[pod], path)
        except cluster.ClusterError as exc:
            if exc.exit_code == cluster.FORBIDDEN:
                raise
            raise OSError(str(exc)) from None


def top(args: argparse.Namespace) -> int:
    if len(args.urls) == 1 and NAME.match(args.urls[0]):
        source = PodSource(cluster.Cluster.connect(args), args.urls[0])
        urls, get, interval = source.urls, source.get, args.interval or 2.0
        where = f"topology {args.urls[0]!r} in namespace {source.kube.namespace}: none of its pods"
    else:
        listed = _urls(args)
        urls, get, interval = (lambda: listed), fetch, args.interval or 1.0
        where = f"none of {', '.join(listed)}"
    tty = sys.stdout.isatty() and not args.once
    prev = scrape(found := urls(), get)
    if not prev.up and get is fetch:
        raise SquallError(f"{where} answered: is the topology running (and port-forwarded)?")
    if not prev.up:
        raise cluster.ClusterError(f"{where} answered ({len(found)} running): are they starting?",
                                   exit_code=cluster.NOT_DONE)
    while True:
        time.sleep(interval)  # the refresh period
        cur = scrape(found := urls(), get)
        text = frame(prev, cur, expected=len(found))
        print(("\x1b[H\x1b[2J" if tty else "") + text, flush=True)  # clear the screen between frames
        if args.once:
            return 0
        if not tty:
            print()
        prev = cur
