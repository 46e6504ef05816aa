"""``/metrics`` (Prometheus text format), ``/healthz`` (liveness), ``/readyz`` (readiness), ``/errors``
(the recent reported errors, JSON) and ``/latency`` (every recorded complete latency, an HDR histogram
as JSON) on one small HTTP server thread."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from squall.contract import ERRORS_PATH, HEALTH_PATH, LATENCY_PATH, METRICS_PATH, READY_PATH

IDLE_SECONDS = 10.0  # a connection is served this long at most, however slowly its request comes
# Connections served at once: each holds a thread. A scrape, the probes and the operator need a few; one
# more is closed at once (the metrics port is the network's to reach, and a thread each had no bound).
MAX_CONNECTIONS = 32


class MetricsServer:
    """Serves ``registry`` on ``/metrics``, ``healthy()`` on ``/healthz`` and ``ready()`` on ``/readyz``
    (200 or 503), ``errors()`` on ``/errors`` and ``latency()`` on ``/latency``."""

    def __init__(self, *, registry: CollectorRegistry, host: str, port: int, healthy: Callable[[], bool],
                 ready: Callable[[], bool] | None = None, errors: Callable[[], list[dict]] = list,
                 latency: Callable[[], dict] = dict) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            # A connection that sends no request is let go: each holds a thread (and a scrape's connection
            # a request that never ends) until then.
            timeout = IDLE_SECONDS

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if self.path.split("?")[0] == METRICS_PATH:
                    self._reply(200, generate_latest(outer.registry), CONTENT_TYPE_LATEST)
                elif self.path == HEALTH_PATH:
                    ok = outer.healthy()
                    self._reply(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n", "text/plain")
                elif self.path == READY_PATH:
                    ok = outer.ready()
                    self._reply(200 if ok else 503, b"ready\n" if ok else b"not ready\n", "text/plain")
                elif self.path.split("?")[0] == ERRORS_PATH:
                    errors = outer.errors()
                    last = parse_qs(urlsplit(self.path).query).get("last", [""])[0]
                    if last.isdigit():  # ?last=N: the newest N (what the operator reads)
                        errors = errors[-int(last):] if int(last) else []
                    self._reply(200, json.dumps(errors, indent=1).encode() + b"\n", "application/json")
                elif self.path == LATENCY_PATH:
                    self._reply(200, json.dumps(outer.latency()).encode() + b"\n", "application/json")
                else:
                    self._reply(404, f"try {METRICS_PATH}, {HEALTH_PATH}, {READY_PATH}, {ERRORS_PATH} or "
                                     f"{LATENCY_PATH}\n".encode(), "text/plain")

            def _reply(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass  # scrapes every few seconds would drown the log

        self.registry = registry
        self.healthy = healthy
        self.ready = ready or healthy
        self.errors = errors
        self.latency = latency
        self._http = _Server((host, port), Handler)
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, name="metrics", daemon=True)
        self._stopped = threading.Event()
        self._watchdog = threading.Thread(target=self._cut_overdue, name="metrics-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._watchdog.start()

    def stop(self) -> None:
        self._stopped.set()
        self._http.shutdown()
        self._http.server_close()

    def _cut_overdue(self) -> None:
        # The handler's timeout bounds each read, not a request: one byte every few seconds kept a
        # connection, and its slot, for good.
        while not self._stopped.wait(min(1.0, IDLE_SECONDS / 4)):
            self._http.cut_overdue(IDLE_SECONDS)


class _Server(ThreadingHTTPServer):
    # A local run's supervisor holds this process's ports while it is away (restarts, room for a
    # rebalance): a socket may share a held port only if it sets SO_REUSEPORT too.
    allow_reuse_port = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._served: dict[socket.socket, float] = {}  # connection → when it was taken: at most MAX_CONNECTIONS
        self._served_lock = threading.Lock()

    def cut_overdue(self, seconds: float) -> None:
        """Shut the connections served longer than ``seconds`` down: their threads then end."""
        now = time.monotonic()
        with self._served_lock:
            overdue = [sock for sock, since in self._served.items() if now - since > seconds]
        for sock in overdue:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._served_lock:
            room = len(self._served) < MAX_CONNECTIONS
            if room:
                self._served[request] = time.monotonic()
        if not room:
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # its thread lets the connection go
        except BaseException:
            self._let_go(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._let_go(request)

    def _let_go(self, request: Any) -> None:
        with self._served_lock:
            self._served.pop(request, None)
