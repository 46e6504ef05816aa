"""Commands for the end-to-end suite: kind, docker and kubectl run as processes, metrics read from
pods through the API server's pod proxy (no port-forwarding), and acking rates measured from them."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")


def run(*cmd: str, timeout: float = 300, stdin: str | None = None) -> str:
    """Run a command; its standard output, or an AssertionError with everything it printed."""
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {done.returncode}\n{done.stdout[-4000:]}"
                             f"\n{done.stderr[-4000:]}")
    return done.stdout


def eventually(probe: Callable[[], T | None], *, timeout: float, what: str, every: float = 2.0) -> T:
    """Poll ``probe`` until it returns something other than None or False. A probe that fails (a pod
    restarting, the API server busy) counts as "not yet"; the last failure is reported on timeout."""
    deadline, error = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            result = probe()
        except (AssertionError, subprocess.TimeoutExpired, ValueError) as exc:
            error = exc
        else:
            if result is not None and result is not False:
                return result
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                         + (f"; last error: {error}" if error else ""))


@dataclass(frozen=True)
class Kubectl:
    """kubectl against one cluster (its kubeconfig) and namespace."""

    kubeconfig: Path
    namespace: str

    def __call__(self, *args: str, timeout: float = 300, stdin: str | None = None) -> str:
        return run("kubectl", "--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace, *args,
                   timeout=timeout, stdin=stdin)

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self("get", *args, "--output", "json"))

    def pods(self, topology: str, role: str) -> list[dict[str, Any]]:
        """The topology's worker or acker pods (labels of squall_operator.render.selector)."""
        selector = f"app.kubernetes.io/instance={topology},app.kubernetes.io/component={role}"
        return self.get("pods", "--selector", selector)["items"]

    def field(self, obj: str, *path: str) -> Any:
        """One field of an object, e.g. ``field("topology/wordcount", "status", "readyWorkers")`` (None
        while missing): what ``kubectl wait --for=jsonpath`` (kubectl 1.23+) would wait on."""
        value: Any = self.get(obj)
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def wait_field(self, obj: str, *path: str, equals: Any, timeout: float) -> None:
        eventually(lambda: self.field(obj, *path) == equals, timeout=timeout,
                   what=f"{obj} {'.'.join(path)} = {equals}")

    def metrics(self, pod: str, port: int = 9090, timeout: float = 30) -> Metrics:
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy/metrics"
        return Metrics.parse(self("get", "--raw", path, timeout=timeout))


@dataclass(frozen=True)
class Metrics:
    """One scrape: (sample name, labels) → value."""

    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, text: str) -> Metrics:
        return cls([(s.name, s.labels, s.value) for family in text_string_to_metric_families(text)
                    for s in family.samples])

    def total(self, name: str, **labels: str) -> float:
        return sum(value for sample, sample_labels, value in self.samples
                   if sample == name and all(sample_labels.get(k) == v for k, v in labels.items()))

    def has(self, name: str, **labels: str) -> bool:
        return any(sample == name and all(sample_labels.get(k) == v for k, v in labels.items())
                   for sample, sample_labels, _ in self.samples)


# How long one sample waits for a pod's scrape. A pod being deleted is not scraped at all, but one that
# vanished before the API server said so can still be listed: the API server's proxy then waits on an
# address nobody answers, and a 30 s scrape froze the sampling for as long (no sample between 1.3 and
# 33.1 s after a worker pod's delete, while the spout went on acking).
SCRAPE_TIMEOUT = 5.0


class Acked:
    """A spout's acked trees summed over its topology's worker pods, sampled over time. A pod is known
    by its uid, so a replaced pod's counter starting over from 0 counts from 0, not backwards; a pod
    that does not answer a scrape, or is being deleted, keeps its last value."""

    def __init__(self, kubectl: Kubectl, topology: str, spout: str) -> None:
        self.kubectl, self.topology, self.spout = kubectl, topology, spout
        self.last: dict[str, float] = {}
        self.total = 0.0
        self.samples: list[tuple[float, float]] = []  # (monotonic time, acked since the first sample)
        self.unanswered: dict[str, str] = {}  # pod → why its last scrape failed (while it fails)

    def sample(self) -> tuple[float, float]:
        first = not self.samples
        for pod in self.kubectl.pods(self.topology, "worker"):
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            if pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                value = self.kubectl.metrics(name, timeout=SCRAPE_TIMEOUT).total("squall_acked_total",
                                                                               component=self.spout)
            except (AssertionError, subprocess.TimeoutExpired, ValueError) as exc:
                self.unanswered[name] = " ".join(str(exc).split())[:300]
                continue  # not serving yet, or gone
            self.unanswered.pop(name, None)
            before = value if first else self.last.get(uid, 0.0)
            self.total += value - before if value >= before else value
            self.last[uid] = value
        self.samples.append((time.monotonic(), self.total))
        return self.samples[-1]

    def rate(self, seconds: float) -> float:
        """Trees acked per second over the next ``seconds``."""
        t0, n0 = self.sample()
        self.follow(lambda: time.monotonic() - t0 >= seconds, timeout=seconds + 60, what=f"{seconds} s")
        t, n = self.samples[-1]
        return (n - n0) / (t - t0)

    def follow(self, done: Callable[[], bool], *, timeout: float, what: str) -> float:
        """Keep sampling, about once a second, until ``done()``; the time it took (AssertionError after
        ``timeout`` seconds). A ``done`` that raises (the API server busy) counts as not done."""
        start = time.monotonic()
        self.sample()
        eventually(lambda: self.sample() and done(), timeout=timeout, what=what, every=1)
        return time.monotonic() - start

    def recovery(self, *, rate: float, window: float, timeout: float) -> float:
        """Seconds from now until the first ``window`` seconds in which at least ``rate`` trees per
        second were acked (measured at the window's end); AssertionError after ``timeout`` seconds."""
        since = time.monotonic()

        def back() -> bool:
            t, n = self.samples[-1]
            earlier = [(ts, ns) for ts, ns in self.samples if since <= ts <= t - window]
            return bool(earlier) and (n - earlier[-1][1]) / (t - earlier[-1][0]) >= rate

        try:
            return self.follow(back, timeout=timeout, what=f"{self.topology} acking {self.spout} at {rate:.1f}/s")
        except AssertionError as exc:
            failing = "".join(f"; {pod}'s scrapes fail: {why}" for pod, why in self.unanswered.items())
            raise AssertionError(f"{exc}; acked (count@time): {self.history(since)}{failing}") from None

    def stall(self, *, since: float, rate: float) -> float:
        """The longest time after ``since`` during which fewer than ``rate`` trees a second were acked
        (between consecutive samples, about a second apart)."""
        longest = current = 0.0
        after = [(t, n) for t, n in self.samples if t >= since]
        for (t0, n0), (t1, n1) in zip(after, after[1:], strict=False):
            current = current + (t1 - t0) if (n1 - n0) / (t1 - t0) < rate else 0.0
            longest = max(longest, current)
        return longest

    def history(self, since: float) -> str:
        return ", ".join(f"{n:.0f}@{t - since:.0f}s" for t, n in self.samples if t >= since)


class Figures:
    """Figures the suite measured, printed at the end of the run (conftest's terminal summary)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        print(line)
        self.lines.append(line)
