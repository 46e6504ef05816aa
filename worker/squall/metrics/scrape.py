"""Reading a process's ``/metrics`` and ``/latency`` back into totals: for ``squall run``'s
progress, benchmarks, and tests."""

from __future__ import annotations

import json
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from squall.executor.hdr import HdrHistogram
from squall.executor.stats import LATENCY_BUCKETS, Histogram


@dataclass
class Totals:
    """Counters summed over tasks, per component, plus the spouts' complete latency: ``latency`` in
    Prometheus's fixed buckets, ``recorded`` every sample (HDR, percentiles within 0.8 %)."""

    acked: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    failed: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    timed_out: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    emitted: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    executed: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    errors: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    pending: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    latency: Histogram = field(default_factory=Histogram)
    recorded: HdrHistogram = field(default_factory=HdrHistogram)
    fingerprint: str | None = None  # of the spec the process scraped runs (not summed)

    def add(self, other: Totals) -> None:
        for name in ("acked", "failed", "timed_out", "emitted", "executed", "errors", "pending"):
            mine = getattr(self, name)
            for comp, v in getattr(other, name).items():
                mine[comp] += v
        self.latency.merge(other.latency)
        self.recorded.merge(other.recorded)


def fetch(url: str, timeout: float = 2.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback URLs we built
        return resp.read().decode()


def latency_path(final_metrics: Path) -> Path:
    """Where a process writes its recorded latencies as it exits, beside its final metrics."""
    return final_metrics.with_name(final_metrics.name + ".latency.json")


def parse_latency(text: str) -> HdrHistogram:
    """A process's ``/latency`` JSON: the complete latencies its spouts recorded."""
    return HdrHistogram.from_json(json.loads(text)["complete"])


def parse(text: str) -> Totals:
    totals = Totals()
    buckets: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            comp = s.labels.get("component", "")
            if s.name == "squall_acked_total":
                totals.acked[comp] += s.value
            elif s.name == "squall_failed_total":
                (totals.timed_out if s.labels.get("reason") == "timeout" else totals.failed)[comp] += s.value
            elif s.name == "squall_emitted_total":
                totals.emitted[comp] += s.value
            elif s.name == "squall_executed_total":
                totals.executed[comp] += s.value
            elif s.name == "squall_errors_total":
                totals.errors[comp] += s.value
            elif s.name == "squall_pending_trees":
                totals.pending[comp] += s.value
            elif s.name == "squall_complete_latency_seconds_bucket":
                buckets[s.labels["le"]] += s.value
            elif s.name == "squall_complete_latency_seconds_sum":
                totals.latency.sum += s.value
            elif s.name == "squall_process_info":
                totals.fingerprint = s.labels.get("plan")
    if buckets:
        cumulative = [buckets.get(repr(b), 0.0) for b in LATENCY_BUCKETS] + [buckets.get("+Inf", 0.0)]
        totals.latency.counts = [int(c - p) for c, p in zip(cumulative, [0.0, *cumulative[:-1]], strict=True)]
        totals.latency.count = int(cumulative[-1])
    return totals
