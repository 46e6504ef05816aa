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
