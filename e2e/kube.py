"""Commands for the end-to-end suite: kind, docker and kubectl run as processes, and metrics read from
pods through the API server's pod proxy (no port-forwarding)."""

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

    def metrics(self, pod: str, port: int = 9090) -> Metrics:
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy/metrics"
        return Metrics.parse(self("get", "--raw", path, timeout=30))


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
