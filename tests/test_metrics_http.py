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
