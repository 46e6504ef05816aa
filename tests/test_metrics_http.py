"""The HTTP server every process serves its metrics and probes on: real sockets."""

from __future__ import annotations

import socket

from prometheus_client import CollectorRegistry

from squall.metrics import http
from squall.metrics.http import MetricsServer
from squall.metrics.scrape import fetch


def test_a_connection_that_sends_no_whole_request_is_closed_and_the_server_serves_on(monkeypatch):
    """Each connection holds a thread: 100 idle ones held 100 threads for as long as their clients
    liked, and a request without its end of line was never answered."""
    monkeypatch.setattr(http, "IDLE_SECONDS", 0.2)
    server = MetricsServer(registry=CollectorRegistry(), host="127.0.0.1", port=0, healthy=lambda: True)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as idle, \
                socket.create_connection(("127.0.0.1", server.port), timeout=30) as partial:
            partial.sendall(b"GET /healthz")  # no end of line: a request that never ends
            assert idle.recv(100) == b""  # closed by the server, long before the client's own 30 s
            assert partial.recv(100) == b""
        assert fetch(f"http://127.0.0.1:{server.port}/healthz") == "ok\n"
    finally:
        server.stop()


def test_connections_beyond_the_cap_are_closed_at_once_and_the_probes_answer_once_they_go(monkeypatch):
    """One thread per connection, with no bound: 1,000 connections that send nothing (or a byte now and
    then) held 1,000 threads (found by the security audit)."""
    import threading

    monkeypatch.setattr(http, "MAX_CONNECTIONS", 4)
    server = MetricsServer(registry=CollectorRegistry(), host="127.0.0.1", port=0, healthy=lambda: True)
    server.start()
    before = threading.active_count()
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(4)]
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as extra:
            assert extra.recv(100) == b""  # closed at once, not a thread of its own
        assert threading.active_count() <= before + 4
    finally:
        for sock in held:
            sock.close()
    try:
        import time

        deadline = time.monotonic() + 30
        while True:  # the held ones' threads end once they read their clients' end: nothing to wait on here
            try:
                assert fetch(f"http://127.0.0.1:{server.port}/healthz") == "ok\n"
                break
            except OSError:
                assert time.monotonic() < deadline, "the slots of closed connections were never given back"
                time.sleep(0.01)
    finally:
        server.stop()


def test_errors_last_n_answers_the_newest_n():
    """The operator reads ``/errors?last=5``: a pod's whole error log need not cross for five rows."""
    import json

    rows = [{"component": "c", "task": 1, "time": float(i), "error": f"E: {i}"} for i in range(8)]
    server = MetricsServer(registry=CollectorRegistry(), host="127.0.0.1", port=0, healthy=lambda: True,
                           errors=lambda: rows)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/errors"
        assert [r["error"] for r in json.loads(fetch(url + "?last=3"))] == ["E: 5", "E: 6", "E: 7"]
        assert json.loads(fetch(url)) == rows and json.loads(fetch(url + "?last=0")) == []
    finally:
        server.stop()


def test_a_request_that_comes_a_byte_at_a_time_is_cut_off_after_the_idle_time(monkeypatch):
    """The timeout bounded each read, not the request: a byte every few seconds held a connection, and
    with 32 such ones every slot, so /healthz went unanswered and the liveness probe would restart the
    pod (found by the review)."""
    import time

    monkeypatch.setattr(http, "IDLE_SECONDS", 0.4)
    server = MetricsServer(registry=CollectorRegistry(), host="127.0.0.1", port=0, healthy=lambda: True)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as slow:
            deadline = time.monotonic() + 30
            closed = False
            while not closed and time.monotonic() < deadline:
                try:
                    slow.sendall(b"G")  # never a whole request line, never idle for a whole timeout
                    slow.settimeout(0.1)
                    closed = slow.recv(100) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
            assert closed, "a request trickling in was served for good"
    finally:
        server.stop()
