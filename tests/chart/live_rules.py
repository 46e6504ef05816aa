"""The chart's alert rules in a real Prometheus, against real series.

A rule that names a metric or a label no series has evaluates without error to nothing, which an alert
reads as "all is well": so besides each rule's health, every metric its expression selects and every
label it matches or groups on must be in the series Prometheus scraped. Used by
tests/procs/test_dashboard_prometheus.py (the topology's rules, on a multi-process run) and
tests/operator/test_operator_metrics.py (the operator's, on a real operator).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from tests.chart.chart_support import render
from tests.chart.dashboard_queries import parse
from tests.chart.observed import Prometheus


def rule_file(path: Path, group: str) -> Path:
    """Write the rendered PrometheusRule's ``group`` (every alert enabled) as a Prometheus rule file."""
    groups = render({"monitoring": {"alerts": {"enabled": True}}}).one("PrometheusRule")["spec"]["groups"]
    (found,) = [g for g in groups if g["name"] == group]
    assert found["rules"], f"group {group} has no rules"
    path.write_text(yaml.safe_dump({"groups": [found]}))
    return path


def evaluated(prometheus: Prometheus, *, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The loaded rules once Prometheus has evaluated each at least once."""
    deadline = time.monotonic() + timeout
    while True:
        rules = prometheus.rules()
        if rules and all(r["health"] != "unknown" for r in rules):
            return rules
        assert time.monotonic() < deadline, f"Prometheus did not evaluate every rule within {timeout} s: {rules}"
        time.sleep(0.5)  # Prometheus has no event for "evaluated"


def problems(prometheus: Prometheus) -> list[str]:
    """What is wrong with the loaded rules on the series Prometheus holds: rules that failed to evaluate,
    metrics they select that no series is of, labels they match or group on that those series lack."""
    found = []
    series: dict[str, list[dict[str, str]]] = {}
    for rule in evaluated(prometheus):
        where = f"{rule['group']} {rule['name']}"
        if rule["health"] != "ok":
            found.append(f"{where}: {rule['health']}: {rule.get('lastError')}")
        query = parse(rule["query"], where=where)
        known: set[str] = set()
        for selector in query.selectors:
            if selector.metric not in series:
                series[selector.metric] = prometheus.series(selector.metric)
            if not series[selector.metric]:
                found.append(f"{where}: no series of {selector.metric}: {rule['query']}")
                continue
            labels = set().union(*series[selector.metric])
            missing = selector.labels - labels
            if missing:
                found.append(f"{where}: {selector.metric} has no label {sorted(missing)}: {rule['query']}")
            known |= labels
        unknown = query.grouping - known
        if unknown:
            found.append(f"{where}: groups by {sorted(unknown)}, which none of its metrics has: {rule['query']}")
    return found
