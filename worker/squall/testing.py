"""``LocalCluster``: run a topology inside this process, for your tests and ours.

    with LocalCluster(spec) as cluster:
        cluster.run(trees=1000, seconds=30)
        assert cluster.counts("sentences").acked >= 1000
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from squall.executor.errors import ReportedError
from squall.executor.hdr import HdrHistogram
from squall.executor.stats import Histogram
from squall.metrics.collector import recorded_latency
from squall.runtime import Runtime
from squall.topology.plan import Plan
from squall.topology.spec import TopologySpec


@dataclass(frozen=True)
class Counts:
    """Totals over a component's tasks. Spouts: trees ``acked``/``failed``/``timed_out``;
    bolts: input tuples ``executed``/``acked``/``failed``. ``emitted`` counts emit calls."""

    emitted: int
    transferred: int
    acked: int
    failed: int
    timed_out: int
    executed: int
    errors: int


@dataclass(frozen=True)
class RunResult:
    reason: str  # "trees", "until" or "seconds"
    seconds: float


class LocalCluster:
    """A topology running on this thread, in this process (Storm's ``LocalCluster``)."""

    def __init__(self, spec: TopologySpec, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.plan = Plan(spec)
        self.runtime = Runtime(self.plan, executors=self.plan.executors, acker_tasks=self.plan.acker_tasks,
                               clock=clock)
        self.runtime.start()
        self._closed = False

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def run(self, *, trees: int | None = None, until: Callable[[LocalCluster], bool] | None = None,
            seconds: float | None = None) -> RunResult:
        """Run until ``trees`` more spout trees were acked, ``until(cluster)`` holds, or ``seconds`` pass.

        At least one stop condition is required.
        """
        if trees is None and until is None and seconds is None:
            raise ValueError("give run() a stop condition: trees=, until= or seconds=")
        start = time.monotonic()
        target = None if trees is None else self.trees_acked() + trees
        reason = ""

        def stop() -> bool:
            nonlocal reason
            if target is not None and self.trees_acked() >= target:
                reason = "trees"
            elif until is not None and until(self):
                reason = "until"
            elif seconds is not None and time.monotonic() - start >= seconds:
                reason = "seconds"
            return bool(reason)

        self.runtime.run(stop)
        return RunResult(reason, time.monotonic() - start)

    def trees_acked(self) -> int:
        return sum(self.counts(s.name).acked for s in self.spec.spouts)

    def counts(self, component: str) -> Counts:
        stats = self.runtime.component_stats(component)
        if not stats and component not in self.plan.component_tasks:
            raise KeyError(f"no component {component!r}")
        return Counts(
            emitted=sum(sum(s.emitted.values()) for s in stats),
            transferred=sum(sum(s.transferred.values()) for s in stats),
            acked=sum(sum(s.acked.values()) for s in stats),
            failed=sum(sum(s.failed.values()) for s in stats),
            timed_out=sum(sum(s.timed_out.values()) for s in stats),
            executed=sum(sum(s.executed.values()) for s in stats),
            errors=sum(s.errors for s in stats),
        )

    def complete_latency(self, component: str) -> Histogram:
        total = Histogram()
        for s in self.runtime.component_stats(component):
            for h in s.complete_latency.values():
                total.merge(h)
        return total

    def recorded_latency(self, component: str) -> HdrHistogram:
        """Every complete latency ``component``'s tasks recorded (percentiles within 0.8 %)."""
        return recorded_latency(self.runtime, [component])

    def errors(self, component: str | None = None) -> list[ReportedError]:
        """The most recent recorded errors (all components, or one)."""
        return self.runtime.errors.recent(component)

    def pending(self) -> int:
        """Spout trees emitted and not yet acked, failed or timed out."""
        return self.runtime.pending_trees()

    def instances(self, component: str) -> list:
        """The spout or bolt objects of a component, one per task (for assertions in tests)."""
        out = []
        for ex in self.runtime.executors:
            if ex.component == component:
                out += [getattr(t, "spout", None) or t.bolt for t in ex.tasks.values()]
        return out

    def deactivate(self) -> None:
        self.runtime.set_active(False)

    def activate(self) -> None:
        self.runtime.set_active(True)

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self.runtime.set_active(False)
            self.runtime.close()
