"""docs/metrics.md lists every metric family the code can export, and none it cannot: the engine's
collector, the process collectors and the operator's metrics, each in its own table.

tests/procs/test_metrics.py checks the engine's table against a real scrape of running processes
(every family there, with the labels the table gives).
"""

from __future__ import annotations

import ast

import pytest

from metric_docs import (
    COLLECTOR,
    ENGINE,
    OPERATOR,
    PROCESS,
    documented,
    documented_labels,
    families_of,
    registry_families,
)
from squall.metrics.registry import process_registry
from squall_operator.metrics import OperatorMetrics

PROCESS_FAMILIES = registry_families(process_registry())


def _compare(table: str, exported: set[str]) -> None:
    listed = set(documented()[table])
    assert not exported - listed, f"docs/metrics.md ({table!r}) does not list {sorted(exported - listed)}"
    assert not listed - exported, f"docs/metrics.md ({table!r}) lists {sorted(listed - exported)}, exported by nothing"


def test_the_engine_table_is_what_the_collector_exports():
    _compare(ENGINE, families_of(COLLECTOR))


def test_the_process_table_is_what_the_process_collectors_export():
    _compare(PROCESS, PROCESS_FAMILIES)


def test_the_operator_table_is_what_the_operator_exports():
    _compare(OPERATOR, registry_families(OperatorMetrics().registry) - PROCESS_FAMILIES)


def test_the_tables_are_the_only_ones_and_name_each_metric_once():
    tables = documented()
    assert set(tables) == {ENGINE, PROCESS, OPERATOR}, "a table under another heading would not be checked"
    names = [name for rows in tables.values() for name in rows]
    assert len(names) == len(set(names))


def test_labels_are_read_from_the_engine_table():
    engine = documented()[ENGINE]
    assert documented_labels(engine["squall_failed_total"]) == {"component", "task", "stream", "reason"}
    assert documented_labels(engine["squall_queue_capacity"]) == set()


def test_collector_families_come_from_literal_names(tmp_path):
    assert {"squall_emitted_total", "squall_complete_latency_seconds", "squall_queue_depth"} <= families_of(COLLECTOR)
    source = tmp_path / "collector.py"
    source.write_text(COLLECTOR.read_text().replace('CounterMetricFamily("squall_emitted"',
                                               'CounterMetricFamily(PREFIX + "emitted"'))
    ast.parse(source.read_text())
    with pytest.raises(AssertionError, match="whose name is not a literal"):
        families_of(source)
