"""What the Grafana dashboard queries: the metric names and labels in its PromQL expressions.

Used by tests/chart/test_dashboard_json.py (static checks) and tests/procs/test_dashboard_prometheus.py
(every query against a real scrape of a running topology).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "grafana-dashboard.json"
# The dashboards of a topology's processes (the operator's own is checked against the operator).
DASHBOARDS = [REPO / "charts" / "squall" / "dashboards" / "squall.json"]

# Labels Prometheus puts on every series it scrapes (prometheus-operator's PodMonitor/ServiceMonitor targets).
TARGET_LABELS = frozenset({"namespace", "pod", "container", "endpoint", "job", "instance", "service"})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*([A-Za-z_]\w*)\s*\)\s*$")


@dataclass(frozen=True)
class Selector:
    """One vector selector: a metric and the labels it matches on."""

    metric: str
    labels: frozenset[str]


@dataclass(frozen=True)
class Query:
    """One PromQL expression of the dashboard: a panel's target, or a variable's query."""

    where: str
    expr: str
    selectors: tuple[Selector, ...]
    grouping: frozenset[str]  # labels in by/without/on/ignoring/group_* clauses, and label_values' label

    @property
    def metrics(self) -> set[str]:
        return {s.metric for s in self.selectors}


def parse(expr: str, *, where: str = "") -> Query:
    """The selectors and grouping labels of a PromQL expression (Grafana's variables allowed)."""
    grouping: set[str] = set()
    text = expr
    label_values = _LABEL_VALUES.match(text)
    if label_values:
        text, label = label_values.group(1), label_values.group(2)
        grouping.add(label)
    text = _STRING.sub('""', text)  # matcher values such as "$topology-(worker|acker)-[0-9]+"
    text = _RANGE.sub("", text)  # [$__rate_interval], [5m]
    for labels in _GROUPING.findall(text):
        grouping |= {label.strip() for label in labels.split(",") if label.strip()}
    text = _GROUPING.sub(" ", text)
    selectors = []
    for metric, matchers in _SELECTOR.findall(text):
        if not metric:
            raise ValueError(f"{where}: a selector without a metric name in {expr!r}")
        selectors.append(Selector(metric, frozenset(_MATCHER.findall(matchers))))
    text = _SELECTOR.sub(" ", text)
    for name, call in _IDENTIFIER.findall(text):
        if not call and name not in _KEYWORDS:
            selectors.append(Selector(name, frozenset()))
    return Query(where, expr, tuple(selectors), frozenset(grouping))


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row keeps its panels inside


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text())


def panel_targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(where, expr)`` of every panel target."""
    return [(f"panel {panel['title']!r} target {target['refId']}", target["expr"])
            for panel in _panels(dashboard["panels"]) for target in panel.get("targets", [])]


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(where, match, label)`` of every ``label_values(match, label)`` query variable."""
    out = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            found = _LABEL_VALUES.match(query)
            if not found:
                raise ValueError(f"variable {variable['name']!r}: not a label_values() query: {query!r}")
            out.append((f"variable {variable['name']!r}", found.group(1), found.group(2)))
    return out


def queries(dashboard: dict[str, Any]) -> list[Query]:
    """Every PromQL expression in the dashboard: panel targets and query variables."""
    out = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            out.append(parse(target["expr"], where=f"panel {panel['title']!r} target {target['refId']}"))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            out.append(parse(query, where=f"variable {variable['name']!r}"))
    return out


def family(metric: str) -> str:
    """The documented family of a sample name: histograms are queried through ``_bucket``, ``_sum`` and
    ``_count`` series; counters keep their ``_total`` (docs/metrics.md lists them with it)."""
    for suffix in ("_bucket", "_sum", "_count"):
        if metric.endswith(suffix) and not metric.endswith("_total"):
            return metric.removesuffix(suffix)
    return metric
