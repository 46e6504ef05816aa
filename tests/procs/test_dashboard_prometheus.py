"""Every query of every dashboard returns series from a real Prometheus scraping a real multi-process run,
and matches and groups only on labels the metrics have; the chart's topology alert rules evaluate there
on metrics and labels that exist.

Prometheus is Debian's ``prometheus`` package (``make install`` installs it where apt-get and root
are available). Without it this test fails rather than skips: CI must run it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.chart.dashboard_queries import DASHBOARDS, TARGET_LABELS, load, panel_targets, queries, variable_queries
from tests.chart.live_rules import problems, rule_file
from tests.chart.observed import expand, observed_run, prometheus_binary

from squall.metrics.scrape import fetch


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    prometheus_binary()  # a clear failure, not a skip, when Prometheus is not installed
    workdir = tmp_path_factory.mktemp("observed")
    rules = rule_file(workdir / "rules.yaml", "squall.topology")
    with observed_run(workdir, rule_files=[rules]) as run:
        run.wait_scraped(scrapes=12)
        yield run


@pytest.mark.timeout(240)
@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: Path(p).name)
def test_every_panel_query_returns_series(run, dashboard):
    empty, checked = [], 0
    board = load(dashboard)
    for where, expr in panel_targets(board):
        result = run.prometheus.query(expand(expr, run.variables))
        checked += 1
        if not result:
            empty.append(f"{where}: {expr}")
    for where, match, label in variable_queries(board):
        checked += 1
        if not run.prometheus.label_values(label, expand(match, run.variables)):
            empty.append(f"{where}: label_values({match}, {label})")
    assert checked > 10
    assert not empty, "queries without a series:\n" + "\n".join(empty)


def test_lag_offsets_and_capacity_reach_prometheus(run):
    sel = '{namespace="squall-demo", topology="observed"}'
    lag = run.prometheus.query(f"squall_spout_lag_records{sel}")
    assert sorted((s["metric"]["topic"], s["metric"]["partition"]) for s in lag) == [("events", str(p))
                                                                                       for p in range(4)]
    # lag = latest - committed, and nothing is committed past the end
    assert run.prometheus.query(f"squall_spout_latest_offset{sel} - squall_spout_committed_offset{sel} "
                                f"!= squall_spout_lag_records{sel}") == []
    assert run.prometheus.query(f"squall_spout_committed_offset{sel} > squall_spout_latest_offset{sel}") == []
    assert run.prometheus.query(f"sum(squall_spout_latest_offset{sel})")[0]["value"][1] != "0"
    capacity = run.prometheus.query(f"rate(squall_busy_seconds_total{sel}[10s])")
    assert {s["metric"]["component"] for s in capacity} == {"validate", "flaky", "dropping"}
    assert all(0 <= float(s["value"][1]) <= 1 for s in capacity)
    assert any(float(s["value"][1]) > 0 for s in capacity)


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: Path(p).name)
def test_queries_match_and_group_on_labels_the_metrics_have(run, dashboard):
    # A misspelt label still returns series (Prometheus drops what it does not know), so each label is
    # checked against what the processes export.
    exported: dict[str, set[str]] = {}
    for child in run.supervisor.children:
        for family in text_string_to_metric_families(fetch(f"http://127.0.0.1:{child.metrics_port}/metrics")):
            for sample in family.samples:
                exported.setdefault(sample.name, set()).update(sample.labels)
    for query in queries(load(dashboard)):
        known = set(TARGET_LABELS)
        for selector in query.selectors:
            assert selector.metric in exported, f"{query.where}: nothing exports {selector.metric}: {query.expr}"
            missing = selector.labels - exported[selector.metric] - TARGET_LABELS
            assert not missing, f"{query.where}: {selector.metric} has no label {sorted(missing)}: {query.expr}"
            known |= exported[selector.metric]
        unknown = query.grouping - known
        assert not unknown, f"{query.where} groups by {sorted(unknown)}, which none of its metrics has: {query.expr}"


def test_every_topology_alert_rule_evaluates_on_metrics_and_labels_that_exist(run):
    assert {r["name"] for r in run.prometheus.rules()} >= {"SquallSpoutLagGrowing", "SquallProcessesDown"}
    found = problems(run.prometheus)
    assert not found, "alert rules that cannot work:\n" + "\n".join(found)
