"""Prometheus metrics (``squall_*``) read from the runtime at scrape time, the HTTP endpoint, and
reading a process's ``/metrics`` back into totals (:mod:`squall.metrics.scrape`)."""

from squall.metrics.collector import RuntimeCollector
from squall.metrics.http import MetricsServer

__all__ = ["MetricsServer", "RuntimeCollector"]
