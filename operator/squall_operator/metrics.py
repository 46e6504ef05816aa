"""The operator's own Prometheus metrics, served on ``/metrics`` (``Settings.metrics_port``).

Reconciles (count, errors, duration), the Topologies it knows by phase and which are Degraded, the
children it wrote, the webhook's admissions and rejections, whether kopf runs, its handlers' failures
and retries, when the resync last reconciled every Topology, and the process collectors every Squall
process has. docs/metrics.md lists them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric

from squall.metrics.registry import process_registry
from squall_operator import status
from squall_operator.apply import Applied

PHASES = (status.PENDING, status.RUNNING, status.SUSPENDED, status.FAILED)
ACTIONS = ("created", "patched", "deleted")
# A reconcile reads, writes a few objects and the status: milliseconds to a few seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
Handler = TypeVar("Handler", bound=Callable[..., Any])


class OperatorMetrics:
    """The operator's metrics registry and the hooks the handlers call."""

    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series beside each counter, as the processes' metrics have none
        self.registry = process_registry()
        r = self.registry
        self.reconciles = Counter("squall_operator_reconciles", "Reconciles of a Topology (create, update, "
                                  "resume, resync, a child changed)", registry=r)
        self.reconcile_errors = Counter("squall_operator_reconcile_errors", "Reconciles that failed: the API "
                                        "server refused a write, or an unexpected error", registry=r)
        self.reconcile_duration = Histogram("squall_operator_reconcile_duration_seconds", "Time a reconcile took",
                                            buckets=DURATION_BUCKETS, registry=r)
        self.children = Counter("squall_operator_children_applied", "Children of Topologies the operator "
                                "wrote, by kind and action (created, patched, deleted)", ["kind", "action"],
                                registry=r)
        self.admissions = Counter("squall_operator_webhook_admissions", "Topology creates and updates the "
                                  "admission webhook reviewed, by result (allowed, rejected)", ["result"], registry=r)
        for result in ("allowed", "rejected"):
            self.admissions.labels(result)  # exported at 0 before the first review
        self.kopf_ready = Gauge("squall_operator_ready", "1 once kopf runs: logged in, watching, handlers "
                                "registered", registry=r)
        self.kopf_ready.set_function(lambda: 0.0)
        self.leader = Gauge("squall_operator_leader", "1 while this replica leads: it holds the Lease and "
                            "reconciles (always, without leader election); 0 while it serves the webhook and "
                            "waits", registry=r)
        self.handler_failures = Counter("squall_operator_handler_failures", "kopf handler calls that raised, by "
                                        "handler id (kopf retries the reconcile handler's; an event handler's "
                                        "failure is logged and waits for the next event)", ["handler"], registry=r)
        self.handler_retries = Counter("squall_operator_handler_retries", "kopf handler calls that retry a failed "
                                       "one, by handler id", ["handler"], registry=r)
        self.last_resync = Gauge("squall_operator_last_resync_timestamp_seconds", "When a resync pass last "
                                 "reconciled every Topology without an error (Unix time; the operator's start "
                                 "until the first pass)", registry=r)
        self.last_resync.set_to_current_time()
        self._topologies: dict[tuple[str, str], dict[str, Any]] = {}
        self._expiries: dict[tuple[str, str], float] = {}
        self._processes: dict[tuple[str, str], tuple[int, int]] = {}
        r.register(_TopologyCollector(self))

    def watch_ready(self, is_set: Callable[[], bool]) -> None:
        """Report kopf's readiness flag (``is_set``: the flag's ``is_set``) as ``squall_operator_ready``."""
        self.kopf_ready.set_function(lambda: float(is_set()))

    def leading(self, leading: bool) -> None:
        self.leader.set(1.0 if leading else 0.0)

    def counted(self, handler: str) -> Callable[[Handler], Handler]:
        """Decorate a kopf handler registered as ``handler`` (its kopf id): count the calls that raise, and
        those kopf makes to retry a failed one (its ``retry`` argument is above 0)."""
        failures, retries = self.handler_failures.labels(handler), self.handler_retries.labels(handler)

        def decorate(fn: Handler) -> Handler:
            @functools.wraps(fn)
            def call(*args: Any, retry: int = 0, **kwargs: Any) -> Any:
                if retry:
                    retries.inc()
                try:
                    return fn(*args, retry=retry, **kwargs)
                except Exception:
                    failures.inc()
                    raise
            return call  # type: ignore[return-value]  # same signature
        return decorate

    def resynced(self) -> None:
        """A resync pass reconciled every Topology without an error."""
        self.last_resync.set_to_current_time()

    @contextmanager
    def reconciling(self) -> Iterator[None]:
        """Count and time one reconcile; an exception out of it counts as an error."""
        self.reconciles.inc()
        start = time.perf_counter()
        try:
            yield
        except Exception:
            self.reconcile_errors.inc()
            raise
        finally:
            self.reconcile_duration.observe(time.perf_counter() - start)

    def applied(self, applied: Applied) -> None:
        """Count the children one apply created, patched and deleted."""
        for action, refs in zip(ACTIONS, (applied.created, applied.patched, applied.deleted), strict=True):
            for ref in refs:
                self.children.labels(ref.split(" ", 1)[0], action).inc()  # "StatefulSet wc-worker"

    def topology_status(self, namespace: str, name: str, current: dict[str, Any]) -> None:
        """The status the operator just computed for a Topology."""
        self._topologies[(namespace, name)] = current

    def certificate(self, namespace: str, name: str, until: datetime) -> None:
        """The certificate a Topology's pods hold is valid until ``until``."""
        self._expiries[(namespace, name)] = until.timestamp()

    def processes(self, namespace: str, name: str, *, workers: int, ackers: int) -> None:
        """The spec a Topology's pods run (the one last applied) asks for ``workers`` and ``ackers``."""
        self._processes[(namespace, name)] = (workers, ackers)

    def forget(self, namespace: str, name: str) -> None:
        """A Topology is gone."""
        self._topologies.pop((namespace, name), None)
        self._expiries.pop((namespace, name), None)
        self._processes.pop((namespace, name), None)

    def admitted(self, *, allowed: bool) -> None:
        """The webhook allowed or rejected a Topology."""
        self.admissions.labels("allowed" if allowed else "rejected").inc()


class _TopologyCollector:
    """Topologies by phase and which are Degraded, from the statuses the operator last computed, when
    their certificates expire, and how many processes each should run."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        statuses = list(self.metrics._topologies.items())  # one C call: safe while handlers write
        phases = GaugeMetricFamily("squall_operator_topologies", "Topologies the operator runs, by phase",
                                   labels=["phase"])
        counts = dict.fromkeys(PHASES, 0)
        degraded = GaugeMetricFamily("squall_operator_topology_degraded", "1 while a Topology's Degraded "
                                     "condition is True (reason: the condition's)",
                                     labels=["topology_namespace", "topology", "reason"])
        for (namespace, name), current in statuses:
            phase = current.get("phase")
            if phase in counts:
                counts[phase] += 1
            condition = next((c for c in current.get("conditions") or () if c.get("type") == "Degraded"), {})
            on = condition.get("status") == "True"
            degraded.add_metric([namespace, name, condition.get("reason", "") if on else ""], 1.0 if on else 0.0)
        for phase, n in counts.items():
            phases.add_metric([phase], n)
        expiries = GaugeMetricFamily("squall_operator_certificate_expiry_timestamp_seconds", "When the TLS "
                                     "certificate a Topology's pods hold expires (Unix time; the operator "
                                     "renews it when a third to a quarter of its validity is left)",
                                     labels=["topology_namespace", "topology"])
        for (namespace, name), until in list(self.metrics._expiries.items()):
            expiries.add_metric([namespace, name], until)
        # From the operator, not the processes: a Topology whose every process is gone still says how many
        # should run (SquallProcessesDown)
        processes = GaugeMetricFamily("squall_operator_topology_processes", "Worker and acker processes the "
                                      "spec a Topology's pods run asks for, by role",
                                      labels=["topology_namespace", "topology", "role"])
        for (namespace, name), counts in list(self.metrics._processes.items()):
            for role, n in zip(("worker", "acker"), counts, strict=True):
                processes.add_metric([namespace, name, role], n)
        yield from (phases, degraded, expiries, processes)
