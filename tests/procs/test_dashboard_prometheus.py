"""Every query of every dashboard returns series from a real Prometheus scraping a real multi-process run.

Prometheus is Debian's ``prometheus`` package (``make install`` installs it where apt-get and root
are available). Without it this test fails rather than skips: CI must run it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.observed import expand, observed_run, prometheus_binary
from tests.chart.dashboard_queries import DASHBOARDS, load, panel_targets, variable_queries


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    prometheus_binary()  # a clear failure, not a skip, when Prometheus is not installed
    with observed_run(tmp_path_factory.mktemp("observed")) as run:
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
    assert {s["metric"]["component"] for s in capacity} == {"flaky", "dropping"}
    assert all(0 <= float(s["value"][1]) <= 1 for s in capacity)
    assert any(float(s["value"][1]) > 0 for s in capacity)
