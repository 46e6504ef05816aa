"""Prometheus metrics (``squall_*``) read from the runtime at scrape time, and the HTTP endpoint."""

from squall.metrics.collector import RuntimeCollector
from squall.metrics.http import MetricsServer

__all__ = ["MetricsServer", "RuntimeCollector"]
