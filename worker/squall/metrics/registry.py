"""The registry every Squall process serves: its own metrics plus the process collectors."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector


def process_registry() -> CollectorRegistry:
    """A registry holding prometheus-client's process collectors: ``process_cpu_seconds_total``,
    ``process_resident_memory_bytes``, ``process_open_fds``, ``process_start_time_seconds`` (a change
    is a restart), ``python_gc_*`` and ``python_info``. Add the process's own collectors to it."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
