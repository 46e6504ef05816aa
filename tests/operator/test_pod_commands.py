"""Reading the components' errors from pods (squall_operator.processes): test_drift.py covers pods that do
not answer, drip or answer too much, with the operator running; this, the address a pod has."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from squall_operator import processes


class _Errors(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        body = json.dumps([{"component": "split", "task": 2, "time": 1.0, "error": self.path}]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server6(HTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture(params=["127.0.0.1", "::1"])
def pod(request) -> Iterator[dict]:
    """A running pod at an IPv4 or IPv6 address, whose metrics port serves ``GET /errors``."""
    host = request.param
    try:
        server = (_Server6 if ":" in host else HTTPServer)((host, 0), _Errors)
    except OSError as exc:
        pytest.skip(f"no {host} here: {exc}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {"metadata": {"name": "wc-worker-0"}, "status": {"phase": "Running", "podIP": host},
               "spec": {"containers": [{"ports": [{"name": "metrics", "containerPort": server.server_address[1]}]}]}}
    finally:
        server.shutdown()
        server.server_close()


def test_the_newest_errors_are_read_from_a_pod_of_either_address_family(pod):
    rows = processes.reported_errors([pod])
    assert [(r["pod"], r["component"], r["error"]) for r in rows] == [("wc-worker-0", "split", "/errors?last=5")]
