"""Prometheus metrics: the registry every process starts from (:mod:`~squall.metrics.registry`), the
runtime's ``squall_*`` families read at scrape time (:mod:`~squall.metrics.collector`), the HTTP
endpoint (:mod:`~squall.metrics.http`), and reading a ``/metrics`` back into totals
(:mod:`~squall.metrics.scrape`). Modules are imported one by one: the operator uses the registry and
the endpoint without the engine."""
