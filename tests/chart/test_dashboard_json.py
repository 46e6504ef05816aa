"""The Grafana dashboard loads, is laid out, filters by its variables, and shows what the issue asks for.

That every metric it queries is really exported is checked against a running topology in
tests/procs/test_dashboard_prometheus.py.
"""

from __future__ import annotations

import re

import pytest
from dashboard_queries import REPO, family, load, parse, queries

DASHBOARD = load()
QUERIES = queries(DASHBOARD)
PANELS = [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def test_the_parser_finds_metrics_and_labels():
    q = parse('sum by (component, reason) (rate(squall_failed_total{namespace="$namespace", component=~"a|b"}'
              '[$__rate_interval]) and on (pod, task) squall_max_spout_pending{topology="x-{1}"})')
    assert q.metrics == {"squall_failed_total", "squall_max_spout_pending"}
    assert q.grouping == {"component", "reason", "pod", "task"}
    assert {s.metric: s.labels for s in q.selectors}["squall_failed_total"] == {"namespace", "component"}
    q = parse("histogram_quantile(0.99, sum by (le) (rate(squall_complete_latency_seconds_bucket[5m]))) > bool 1")
    assert q.metrics == {"squall_complete_latency_seconds_bucket"} and q.grouping == {"le"}
    q = parse('label_values(squall_process_info{namespace="$namespace"}, topology)')
    assert q.metrics == {"squall_process_info"} and q.grouping == {"topology"}
    assert family("squall_execute_latency_seconds_count") == "squall_execute_latency_seconds"
    assert family("squall_acked_total") == "squall_acked_total"


def test_it_has_the_variables_namespace_topology_and_component():
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "topology", "component"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    assert variables["component"]["multi"] and variables["component"]["includeAll"]
    # each variable narrows the next
    assert "$namespace" in variables["topology"]["query"]["query"]
    assert {"$namespace", "$topology"} <= set(re.findall(r"\$\w+", variables["component"]["query"]["query"]))


def test_every_panel_queries_the_selected_topology_through_the_datasource_variable():
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in PANELS:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert '"$namespace"' in target["expr"] and "$topology" in target["expr"], (
                f"{panel['title']}: {target['expr']} does not filter by namespace and topology")


def test_panels_fit_the_grid_without_overlapping():
    boxes = []
    for panel in DASHBOARD["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, panel["title"]
        for other, (x, y, w, h) in boxes:
            overlap = g["x"] < x + w and x < g["x"] + g["w"] and g["y"] < y + h and y < g["y"] + g["h"]
            assert not overlap, f"{panel['title']!r} overlaps {other!r}"
        boxes.append((panel["title"], (g["x"], g["y"], g["w"], g["h"])))


def _panel(title: str, kind: str = "timeseries") -> dict:
    found = [p for p in PANELS if p["title"] == title and p["type"] == kind]
    assert len(found) == 1, f"one {kind} panel titled {title!r}: {[p['title'] for p in PANELS]}"
    return found[0]


def _queries(panel: dict):
    return [parse(t["expr"]) for t in panel["targets"]]


@pytest.mark.parametrize(("title", "metric", "grouped_by"), [
    ("Trees acked / s", "squall_acked_total", {"component"}),
    ("Trees failed / s: explicit and timeout", "squall_failed_total", {"reason"}),  # explicit and timeout apart
    ("Complete latency p50 / p99", "squall_complete_latency_seconds_bucket", {"le", "component"}),
    ("Execute latency p50 / p99", "squall_execute_latency_seconds_bucket", {"le", "component"}),
    ("Process latency p50 / p99", "squall_process_latency_seconds_bucket", {"le", "component"}),
    ("Capacity", "squall_busy_seconds_total", {"component"}),
    ("Queue depth", "squall_queue_depth", {"component"}),
    ("Backpressure", "squall_overflow_depth", {"component"}),
    ("Lost in transit", "squall_transport_dropped_frames_total", set()),
    ("Reported errors", "squall_errors_total", {"component"}),
    ("Pod restarts", "process_start_time_seconds", {"pod"}),
    ("Input vs processed", "squall_spout_latest_offset", set()),
    ("Input vs processed", "squall_acked_total", set()),
    ("Source lag per partition", "squall_spout_lag_records", {"topic", "partition"}),
    ("CPU per pod", "process_cpu_seconds_total", {"pod"}),
    ("Memory per pod", "process_resident_memory_bytes", {"pod"}),
    ("Processes up / expected", "squall_expected_processes", {"role"}),
    ("Process states", "squall_process_state", {"state"}),
    ("Links to peers down", "squall_transport_connected", {"pod"}),
])
def test_the_issue_s_panels_are_there(title, metric, grouped_by):
    queries_ = _queries(_panel(title))
    assert any(metric in q.metrics and grouped_by <= q.grouping for q in queries_), (
        f"panel {title!r} should query {metric} by {grouped_by}")


def test_the_top_row_answers_at_a_glance():
    top = [p for p in DASHBOARD["panels"] if p["gridPos"]["y"] == 1]
    assert [p["type"] for p in top] == ["stat"] * 7
    assert [p["title"] for p in top] == ["Trees acked / s", "Failure ratio", "Complete latency p99", "Source lag",
                                         "Pending / max", "Processes up / expected", "Restarts"]
    ratio = _panel("Failure ratio", "stat")["targets"][0]["expr"]
    failed, _, total = ratio.partition(" / clamp_min(")
    assert "squall_failed_total" in failed and "reason" not in failed, "explicit and timeout fails together"
    assert {"squall_failed_total", "squall_acked_total"} <= parse(total).metrics


def test_the_component_table_has_storm_ui_s_columns():
    table = _panel("Components", "table")
    assert [t["legendFormat"] for t in table["targets"]] == [
        "emitted", "transferred", "executed", "acked", "failed", "execute latency", "process latency", "capacity",
        "errors", "last error"]
    for target in table["targets"]:
        assert target["instant"] and target["format"] == "table"
        assert {"component"} <= parse(target["expr"]).grouping, target["legendFormat"]


def test_trees_count_spouts_only_and_latencies_show_p50_and_p99():
    for title in ("Trees acked / s", "Trees failed / s: explicit and timeout"):
        (first, *_) = _queries(_panel(title))
        # squall_acked_total/failed_total count input tuples for bolts: keep the spout tasks only
        assert "squall_max_spout_pending" in first.metrics, f"{title}: not restricted to spouts"
    for title in ("Complete latency p50 / p99", "Execute latency p50 / p99", "Process latency p50 / p99"):
        exprs = [t["expr"] for t in _panel(title)["targets"]]
        assert [e.split(",")[0] for e in exprs] == ["histogram_quantile(0.5", "histogram_quantile(0.99"], title
    pending = _queries(_panel("Pending trees / max spout pending"))
    assert {"squall_pending_trees", "squall_max_spout_pending"} <= set().union(*(q.metrics for q in pending))


def test_every_metric_is_documented():
    documented = set(re.findall(r"^\| `(\w+)`", (REPO / "docs" / "metrics.md").read_text(), re.M))
    for metric in set().union(*(q.metrics for q in QUERIES)):
        assert family(metric) in documented, f"{metric} is not in docs/metrics.md"


def test_the_operator_dashboard_is_laid_out_uses_the_datasource_and_documented_metrics():
    board = load(REPO / "charts" / "squall" / "dashboards" / "squall-operator.json")
    assert board["uid"] == "squall-operator" and board["uid"] != DASHBOARD["uid"]
    documented = set(re.findall(r"^\| `(\w+)`", (REPO / "docs" / "metrics.md").read_text(), re.M))
    boxes = []
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24 and not any(
            g["x"] < x + w and x < g["x"] + g["w"] and g["y"] < y + h and y < g["y"] + g["h"]
            for x, y, w, h in boxes), panel["title"]
        boxes.append((g["x"], g["y"], g["w"], g["h"]))
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}" and '"$namespace"' in target["expr"], panel["title"]
    for query in queries(board):
        for metric in query.metrics:
            assert family(metric) in documented, f"{metric} is not in docs/metrics.md"
    titles = {p["title"] for p in board["panels"]}
    assert {"Reconciles / s", "Reconcile duration p50 / p99", "Topologies by phase", "Children applied / s",
            "Webhook admissions / s", "Operator ready", "Handler failures / s", "Handler retries / s",
            "Since the last resync"} <= titles
