"""``squall top``: Storm UI's component table in the terminal, from the processes' ``/metrics``,
refreshed every second.

The URLs are ``/metrics`` of a topology's processes: a local ``squall run``'s (read from its run
directory, where it lists them) or a pod's through ``kubectl port-forward``. Rates are the difference
of two scrapes ``--interval`` apart; latencies are the means over that interval.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from squall.cli.options import positive
from squall.contract import ERRORS_PATH
from squall.errors import SquallError
from squall.metrics.scrape import fetch
from squall.process.supervisor import PROCESSES_FILE
from squall.system import ACKER_COMPONENT

COUNTERS = {"squall_emitted_total": "emitted", "squall_transferred_total": "transferred",
            "squall_executed_total": "executed", "squall_acked_total": "acked", "squall_failed_total": "failed",
            "squall_busy_seconds_total": "busy", "squall_errors_total": "errors",
            "squall_execute_latency_seconds_sum": "execute_sum", "squall_execute_latency_seconds_count": "execute_n",
            "squall_process_latency_seconds_sum": "process_sum", "squall_process_latency_seconds_count": "process_n"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("top", help="a live component table of a running topology, from its /metrics")
    p.add_argument("urls", nargs="*", metavar="URL",
                   help="/metrics URLs of the topology's processes (default: those of the local `squall run` "
                        "in --run-dir), e.g. http://localhost:9090/metrics through kubectl port-forward")
    p.add_argument("--run-dir", default=".squall/run",
                   help="the run directory of a local `squall run` (default .squall/run)")
    p.add_argument("--interval", type=positive(float), default=1.0, help="seconds between two frames (default 1)")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
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
    last_error: dict[str, tuple[float, str]] = field(default_factory=dict)
    states: Counter[str] = field(default_factory=Counter)  # squall_process_state: processes in each

    def add_errors(self, errors: list[dict]) -> None:
        """A process's ``GET /errors``: the newest error of each component, with its message."""
        for e in errors:
            if e["time"] > self.last_error.get(e["component"], (0.0, ""))[0]:
                self.last_error[e["component"]] = (e["time"], e["error"])

    def add(self, url: str, text: str) -> None:
        counters, started, fingerprint = _counts(), 0.0, ""
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
                elif s.name == "process_start_time_seconds":
                    started = s.value
                elif s.name == "squall_process_info":
                    fingerprint = s.labels.get("plan", "")
                elif s.name == "squall_process_state" and s.value == 1:
                    self.states[s.labels["state"]] += 1
        self.up += 1
        self.counters[url], self.identity[url] = counters, (started, fingerprint)

    def components(self) -> list[str]:
        return sorted({comp for counters in self.counters.values() for comp in counters})

    def total(self, comp: str, name: str) -> float:
        return sum(counters[comp][name] for counters in self.counters.values() if comp in counters)


def scrape(urls: list[str]) -> Snapshot:
    snap = Snapshot(at=time.monotonic())
    for url in urls:
        try:
            text, errors = fetch(url), json.loads(fetch(url.rsplit("/", 1)[0] + ERRORS_PATH))
        except (OSError, ValueError):
            continue  # a process restarting: the header counts it as down
        snap.add(url, text)
        snap.add_errors(errors)
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


def _rate(cur: Snapshot, prev: Snapshot, comp: str, name: str) -> float:
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
    acked = sum(_rate(cur, prev, c, "acked") for c in spouts)
    failed = sum(_rate(cur, prev, c, "failed") for c in spouts)
    # a process not processing says what it does instead: waiting for peers, rebalancing, ...
    doing = ", ".join(f"{n} {state}" for state, n in sorted(cur.states.items()))
    states = "" if set(cur.states) <= {"active"} else f" ({doing})"
    header = (f"topology {cur.topology or '?'}   processes {cur.up}/{expected}{states}   trees acked {acked:,.1f}/s   "
              f"failed {failed:,.1f}/s   pending {sum(cur.pending[c] for c in spouts):,.0f}"
              + (f"   lag {cur.lag:,.0f}" if cur.lag is not None else ""))
    rows = [("component", "emitted/s", "transferred/s", "executed/s", "acked/s", "failed/s", "execute ms",
             "process ms", "capacity", "errors", "last error")]
    for comp in (c for c in cur.components() if c and c != ACKER_COMPONENT):
        spout = comp in spouts
        error = cur.last_error.get(comp)
        rows.append((comp, *(f"{_rate(cur, prev, comp, n):,.1f}" for n in ("emitted", "transferred")),
                     "-" if spout else f"{_rate(cur, prev, comp, 'executed'):,.1f}",
                     *(f"{_rate(cur, prev, comp, n):,.1f}" for n in ("acked", "failed")),
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
                raise SquallError(f"{url!r} is not a URL: give each process's /metrics as "
                                  "http://HOST:PORT/metrics (e.g. http://localhost:9090/metrics)")
        return list(args.urls)
    listed = Path(args.run_dir) / PROCESSES_FILE
    try:
        return list(json.loads(listed.read_text()).values())
    except FileNotFoundError:
        raise SquallError(f"no {listed}: start `squall run` first (with worker processes: an --in-process run "
                          "serves no /metrics), or give the /metrics URLs (e.g. "
                          "kubectl port-forward pod/NAME-worker-0 9090:9090, then http://localhost:9090/metrics)"
                          ) from None


def top(args: argparse.Namespace) -> int:
    urls = _urls(args)
    tty = sys.stdout.isatty() and not args.once
    prev = scrape(urls)
    if not prev.up:
        raise SquallError(f"none of {', '.join(urls)} answered: is the topology running (and port-forwarded)?")
    while True:
        time.sleep(args.interval)  # the refresh period
        cur = scrape(urls)
        text = frame(prev, cur, expected=len(urls))
        print(("\x1b[H\x1b[2J" if tty else "") + text, flush=True)  # clear the screen between frames
        if args.once:
            return 0
        if not tty:
            print()
        prev = cur
