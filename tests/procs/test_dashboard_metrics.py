"""Every metric the Grafana dashboard queries is one a running topology really exports, with the labels
the dashboard matches and groups on."""

from __future__ import annotations

from procs_support import wait_for
from prometheus_client.parser import text_string_to_metric_families
from tests.chart.dashboard_queries import TARGET_LABELS, load, queries

from squall.metrics.scrape import fetch


def scrape_labels(text: str) -> dict[str, set[str]]:
    """Sample name (``_bucket``, ``_total``... included) → every label its samples carry."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_every_dashboard_query_matches_a_real_scrape(cluster):
    sup = cluster(count=-1, workers=2, ackers=1, config={"test.rate": 2000})
    wait_for(lambda t: t.acked["a-numbers"] >= 200, timeout=60, sup=sup, what="the topology to run")
    exported: dict[str, set[str]] = {}
    for name in ("worker-0", "worker-1", "acker-0"):  # the acker process exports its own pending trees
        for metric, labels in scrape_labels(fetch(f"http://127.0.0.1:{sup.child(name).metrics_port}/metrics")).items():
            exported.setdefault(metric, set()).update(labels)

    checked = set()
    for query in queries(load()):
        known = set(TARGET_LABELS)
        for selector in query.selectors:
            assert selector.metric in exported, (
                f"{query.where} queries {selector.metric}, which no worker or acker exports: {query.expr}")
            missing = selector.labels - exported[selector.metric] - TARGET_LABELS
            assert not missing, f"{query.where}: {selector.metric} has no label {sorted(missing)}: {query.expr}"
            known |= exported[selector.metric]
            checked.add(selector.metric)
        unknown = query.grouping - known
        assert not unknown, f"{query.where} groups by {sorted(unknown)}, which none of its metrics has: {query.expr}"
    # the dashboard covers the runtime's main families (a guard against an empty or broken parse)
    assert {"squall_acked_total", "squall_failed_total", "squall_complete_latency_seconds_bucket",
            "squall_execute_latency_seconds_bucket", "squall_process_latency_seconds_bucket",
            "squall_busy_seconds_total", "squall_pending_trees", "squall_max_spout_pending", "squall_queue_depth",
            "squall_overflow_depth", "squall_errors_total"} <= checked
