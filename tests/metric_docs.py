"""The metric families docs/metrics.md lists, by table, and those the code can export.

Families are named as scraped: a counter with its ``_total``, a histogram without its ``_bucket``,
``_sum`` and ``_count`` (as docs/metrics.md lists them). Used by tests/test_metric_docs.py (code and
docs, both ways) and tests/procs/test_metrics.py (a real scrape against the docs).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "metrics.md"
COLLECTOR = REPO / "worker" / "squall" / "metrics" / "collector.py"
# the tables of docs/metrics.md, by the heading above each
ENGINE, PROCESS, OPERATOR = "Metrics", "Process metrics", "The operator's metrics"
_ROW = re.compile(r"^\| `(\w+)` \|")
_FAMILIES = {"CounterMetricFamily": "counter", "GaugeMetricFamily": "gauge", "HistogramMetricFamily": "histogram",
             "SummaryMetricFamily": "summary", "InfoMetricFamily": "info"}


def documented() -> dict[str, dict[str, list[str]]]:
    """``{table: {metric: cells after its name}}`` of every table in docs/metrics.md."""
    tables: dict[str, dict[str, list[str]]] = {}
    heading = ""
    for line in DOCS.read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif row := _ROW.match(line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[2:-1]]
            tables.setdefault(heading, {})[row.group(1)] = cells
    return tables


def documented_labels(cells: list[str]) -> set[str]:
    """The labels in an engine table row's "labels" cell: ``component, task, `reason` = `a` \\| `b```."""
    if cells[1] == "—":
        return set()
    return {part.split("=")[0].strip().strip("`") for part in re.split(r",\s*", cells[1])}


def exported_name(name: str, kind: str) -> str:
    return f"{name}_total" if kind == "counter" else name


def registry_families(registry: CollectorRegistry) -> set[str]:
    """Every family a registry's collectors yield now."""
    return {exported_name(m.name, m.type) for m in registry.collect()}


def families_of(path: Path) -> set[str]:
    """Every family a collector's source can yield. The engine's collector builds them at scrape time
    (some only with a transport, an offset spout or a reported error), so they are read from its source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FAMILIES:
            name = node.args[0] if node.args else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                raise AssertionError(f"{path.name}:{node.lineno}: a {node.func.id} whose name is not a literal; "
                                     "name metric families literally, so the docs can be checked against them")
            found.add(exported_name(name.value, _FAMILIES[node.func.id]))
    return found
