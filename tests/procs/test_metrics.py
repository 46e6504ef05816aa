"""Every metric the docs list appears in a real scrape of running processes, labelled, and moves."""

from __future__ import annotations

import time

from procs_support import wait_for
from prometheus_client.parser import text_string_to_metric_families

from squall.metrics.scrape import fetch

TASK_LABELS = {"topology", "component", "task", "stream"}
WORKER_METRICS = {
    # name: labels every sample must have
    "squall_emitted_total": TASK_LABELS,
    "squall_transferred_total": TASK_LABELS,
    "squall_acked_total": TASK_LABELS,
    "squall_failed_total": TASK_LABELS | {"reason"},
    "squall_executed_total": TASK_LABELS | {"source_component"},
    "squall_errors_total": {"topology", "component", "task"},
    "squall_complete_latency_seconds_bucket": TASK_LABELS | {"le"},
    "squall_execute_latency_seconds_bucket": TASK_LABELS | {"source_component", "le"},
    "squall_process_latency_seconds_bucket": TASK_LABELS | {"source_component", "le"},
    "squall_busy_seconds_total": {"topology", "component", "executor"},
    "squall_pending_trees": {"topology", "component", "task"},
    "squall_max_spout_pending": {"topology", "component", "task"},
    "squall_queue_depth": {"topology", "component", "executor"},
    "squall_overflow_depth": {"topology", "component", "executor"},
    "squall_queue_capacity": {"topology"},
    "squall_transport_batches_sent_total": {"topology", "peer", "lane"},
    "squall_transport_bytes_sent_total": {"topology", "peer", "lane"},
    "squall_transport_batches_received_total": {"topology", "peer", "lane"},
    "squall_transport_bytes_received_total": {"topology", "peer", "lane"},
    "squall_transport_reconnects_total": {"topology", "peer", "lane"},
    "squall_transport_dropped_frames_total": {"topology", "peer", "lane"},
    "squall_transport_malformed_frames_total": {"topology"},
    "squall_process_info": {"topology", "role", "index"},
    "squall_expected_processes": {"topology", "role"},
    # prometheus-client's process collectors
    "process_cpu_seconds_total": set(),
    "process_resident_memory_bytes": set(),
    "process_open_fds": set(),
    "process_start_time_seconds": set(),
    "python_gc_collections_total": {"generation"},
}
MOVING = ["squall_busy_seconds_total", "process_cpu_seconds_total",
          "squall_emitted_total", "squall_transferred_total", "squall_acked_total", "squall_executed_total",
          "squall_complete_latency_seconds_count", "squall_execute_latency_seconds_count",
          "squall_transport_batches_sent_total", "squall_transport_bytes_sent_total",
          "squall_transport_batches_received_total", "squall_transport_bytes_received_total"]


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def total(text: str, name: str) -> float:
    return sum(s.value for s in samples(text).get(name, []))


def test_every_metric_is_exported_labelled_and_moving(cluster):
    sup = cluster(count=-1, workers=2, ackers=1, config={"test.rate": 2000})
    wait_for(lambda t: t.acked["a-numbers"] >= 200, timeout=60, sup=sup, what="the topology to run")
    worker = sup.child("worker-0")
    url = f"http://127.0.0.1:{worker.metrics_port}/metrics"
    first = fetch(url)
    got = samples(first)
    for name, labels in WORKER_METRICS.items():
        assert name in got, f"{name} missing from a worker's scrape"
        for s in got[name]:
            assert labels <= set(s.labels), f"{name} sample {s.labels} lacks {labels - set(s.labels)}"
            assert s.labels.get("topology", "proc-test") == "proc-test"
    assert {s.labels["role"]: s.value for s in got["squall_expected_processes"]} == {"worker": 2, "acker": 1}
    reasons = {s.labels["reason"] for s in got["squall_failed_total"]}
    assert reasons == {"explicit", "timeout"}
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
