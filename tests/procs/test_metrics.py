"""Every metric family docs/metrics.md lists for worker and acker processes appears in a real scrape of
running processes, labelled as the docs say, and moves; and the scrape has no family the docs lack."""

from __future__ import annotations

import time

from procs_support import samples, wait_for
from prometheus_client.parser import text_string_to_metric_families
from tests.metric_docs import ENGINE, PROCESS, documented, documented_labels, exported_name

from squall.metrics.scrape import fetch

# Documented families without samples in this topology (their family is still in the scrape).
NOT_HERE = {
    "squall_spout_committed_offset": "no offset spout: tests/procs/test_dashboard_prometheus.py has one",
    "squall_spout_latest_offset": "no offset spout",
    "squall_spout_lag_records": "no offset spout",
    "squall_last_error_timestamp_seconds": "absent until a component reports an error",
    "squall_acker_expired_trees_total": "an acker's: checked on the acker's scrape below",
}
MOVING = ["squall_busy_seconds_total", "process_cpu_seconds_total",
          "squall_emitted_total", "squall_transferred_total", "squall_acked_total", "squall_executed_total",
          "squall_complete_latency_seconds_count", "squall_execute_latency_seconds_count",
          "squall_transport_batches_sent_total", "squall_transport_bytes_sent_total",
          "squall_transport_batches_received_total", "squall_transport_bytes_received_total",
          "squall_transport_completed_trees_total"]


def total(text: str, name: str) -> float:
    return sum(s.value for s in samples(text).get(name, []))


def test_every_metric_is_exported_labelled_and_moving(cluster):
    # the sink acks half its input at once: those trees complete in their worker (squall_transport_completed_
    # trees_total; with every ack on a tick, only a tick within YOUNG_SECONDS of a tree's emit did that, and
    # under load none might); the other half on ticks: held past YOUNG_SECONDS, those trees go to the acker
    sup = cluster(count=-1, workers=2, ackers=1, config={"test.rate": 2000}, sink="HalfBatchingSink", ticks=0.5)
    wait_for(lambda t: t.acked["a-numbers"] >= 200, timeout=60, sup=sup, what="the topology to run")
    worker = sup.child("worker-0")
    url = f"http://127.0.0.1:{worker.metrics_port}/metrics"
    first = fetch(url)
    docs = documented()
    families = {exported_name(f.name, f.type) for f in text_string_to_metric_families(first)}
    assert families == set(docs[ENGINE]) | set(docs[PROCESS]), (
        f"not in the scrape: {sorted(set(docs[ENGINE]) | set(docs[PROCESS]) - families)}; "
        f"not in docs/metrics.md: {sorted(families - set(docs[ENGINE]) - set(docs[PROCESS]))}")
    got = samples(first)
    for name in docs[PROCESS]:
        assert name in got, f"{name} missing from a worker's scrape"
    for name, cells in docs[ENGINE].items():
        histogram = cells[0] == "histogram"
        sample_name, labels = f"{name}_bucket" if histogram else name, documented_labels(cells) | {"topology"}
        if name in NOT_HERE:
            continue
        assert sample_name in got, f"{sample_name} missing from a worker's scrape"
        for s in got[sample_name]:
            assert labels | ({"le"} if histogram else set()) == set(s.labels), (
                f"{sample_name} sample {s.labels}: docs/metrics.md gives the labels {sorted(labels)}")
            assert s.labels["topology"] == "proc-test"
    assert {s.labels["role"]: s.value for s in got["squall_expected_processes"]} == {"worker": 2, "acker": 1}
    reasons = {(s.labels["component"], s.labels["reason"]) for s in got["squall_failed_total"]}
    assert {reason for component, reason in reasons if component == "a-numbers"} == {"explicit", "timeout"}
    assert {reason for component, reason in reasons if component != "a-numbers"} == {"explicit"}  # never times out
    spout_pending = [s for s in got["squall_pending_trees"] if s.labels["component"] == "a-numbers"]
    assert spout_pending and all(0 <= s.value <= 1000 for s in spout_pending)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        second = fetch(url)
        if all(total(second, n) > total(first, n) for n in MOVING):
            break
        time.sleep(0.2)
    for name in MOVING:
        assert total(second, name) > total(first, name), f"{name} did not move"
    acker = fetch(f"http://127.0.0.1:{sup.child('acker-0').metrics_port}/metrics")
    acker_pending = [s for s in samples(acker)["squall_pending_trees"] if s.labels["component"] == "__acker"]
    assert len(acker_pending) == 1
    expired = samples(acker)["squall_acker_expired_trees_total"]
    assert [(s.labels["component"], s.labels["task"]) for s in expired] == \
        [("__acker", acker_pending[0].labels["task"])]
    assert total(acker, "squall_transport_batches_received_total") > 0
    assert fetch(f"http://127.0.0.1:{worker.metrics_port}/healthz") == "ok\n"
