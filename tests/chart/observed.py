"""A real Prometheus server scraping a real multi-process run: what the dashboards are checked against
(tests/procs/test_dashboard_prometheus.py) and drawn from (bench/dashboard.py); its ``Prometheus`` also
evaluates alert rules (tests/chart/live_rules.py) and scrapes a real operator
(tests/operator/test_operator_metrics.py).

The topology reads the embedded log (a ``LogSpout``, so source lag exists) while a producer thread
appends records; a bolt reports some records as malformed, one fails some tuples and another drops
some (they time out), so the error and failure panels have something to show.

Prometheus (Debian's ``prometheus`` package; ``make install`` installs it) scrapes every worker and
acker with the target labels a prometheus-operator PodMonitor gives a pod (``namespace``, ``pod``,
``container``), so the dashboards' queries run unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from squall import BasicBolt
from squall.process.supervisor import Supervisor, free_ports
from squall.spouts.log import DurableLog, LogSpout
from squall.spouts.records import Record
from squall.topology import TopologySpec

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "squall-demo"
TOPOLOGY = "observed"
TOPIC = "events"


class PrometheusMissing(RuntimeError):
    """No ``prometheus`` binary on PATH."""


def prometheus_binary(name: str = "prometheus") -> str:
    """The path of ``prometheus`` (or ``promtool``); a clear error when it is not installed."""
    found = shutil.which(name)
    if not found:
        raise PrometheusMissing(f"{name} is not on PATH: `make install` installs Debian's prometheus package "
                                "(as root, where apt-get exists), or install Prometheus yourself")
    return found


@dataclass(frozen=True)
class Target:
    """A scrape target: ``host:port`` and the labels Prometheus attaches to its series."""

    address: str
    labels: dict[str, str]


class Prometheus:
    """A Prometheus server in a subprocess, scraping ``targets`` every ``interval`` seconds."""

    def __init__(self, *, workdir: Path, targets: list[Target], interval: float = 1.0,
                 rule_files: list[Path] | None = None) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": f"{round(interval * 1000)}ms",
                       "evaluation_interval": f"{round(interval * 1000)}ms"},
            "rule_files": [str(p) for p in rule_files or []],
            "scrape_configs": [{
                "job_name": "squall",
                "static_configs": [{"targets": [t.address], "labels": t.labels} for t in targets],
            }],
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        self._proc: subprocess.Popen | None = None

    def start(self, *, timeout: float = 60.0) -> None:
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(
                [prometheus_binary(), f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--log.level=warn"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:  # noqa: S310 - loopback
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)  # polling readiness: Prometheus tells nobody when it is up
        raise RuntimeError(f"prometheus was not ready within {timeout} s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _get(self, path: str, params: list[tuple[str, str]]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - loopback URL we built
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why in the body
            body = json.loads(exc.read() or b"{}")
            raise ValueError(f"{path} {dict(params)}: {body.get('error', exc)}") from None
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query now: ``[{"metric": labels, "value": [t, "v"]}, ...]``."""
        data = self._get("/api/v1/query", [("query", expr)])
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query: ``[{"metric": labels, "values": [[t, "v"], ...]}, ...]``."""
        return self._get("/api/v1/query_range", [("query", expr), ("start", f"{start:.3f}"), ("end", f"{end:.3f}"),
                                                  ("step", f"{step}")])["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(match, label)`` lists."""
        return self._get(f"/api/v1/label/{label}/values", [("match[]", match)])

    def series(self, match: str) -> list[dict[str, str]]:
        """The label sets of every series ``match`` selects, over all the time Prometheus holds."""
        return self._get("/api/v1/series", [("match[]", match)])

    def rules(self) -> list[dict[str, Any]]:
        """The rules of ``rule_files`` as Prometheus evaluates them: ``name``, ``query``, ``health``
        (``unknown`` until first evaluated, then ``ok`` or ``err``) and ``lastError``, with their group's name."""
        return [{**rule, "group": group["name"]} for group in self._get("/api/v1/rules", [])["groups"]
                for rule in group["rules"]]


_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def expand(expr: str, variables: dict[str, str]) -> str:
    """A dashboard expression with Grafana's ``$name`` / ``${name}`` variables replaced."""
    def value(match: re.Match) -> str:
        name = match[1] or match[2]
        if name not in variables:
            raise KeyError(f"no value for the dashboard variable ${name} in {expr!r}")
        return variables[name]
    return _VARIABLE.sub(value, expr)


class Events(LogSpout):
    """The log's records as ``[id, body]`` tuples (what ``examples.flaky``'s bolts take)."""

    outputs = ["id", "body"]

    def translate(self, record: Record) -> list[Any]:
        return [f"{record.partition}-{record.offset}", str(record.value)]


class Validate(BasicBolt):
    """Passes events on, and reports every ``observed.bad_every``-th one as malformed (acked, not passed)."""

    outputs = ["id", "body"]

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        super().prepare(conf, context)
        self.bad_every = int(conf.get("observed.bad_every", 500))
        self.seen = 0

    def execute(self, tup: Any, collector: Any) -> None:
        self.seen += 1
        if self.seen % self.bad_every == 0:
            collector.report_error(ValueError(f"event {tup['id']} is malformed"))
            return
        collector.emit([tup["id"], tup["body"]])


def topology_doc(log_path: Path) -> dict[str, Any]:
    return {
        "name": TOPOLOGY, "workers": 2, "ackers": 1, "messageTimeoutSeconds": 3, "maxSpoutPending": 200,
        "config": {"flaky.fail_share": 0.02, "flaky.drop_share": 0.01},
        "spouts": [{"name": "events", "className": "tests.chart.observed:Events", "parallelism": 2, "config": {
            "log.path": str(log_path), "log.topic": TOPIC, "processing.guarantee": "at_least_once",
            "offset.commit.period.ms": 500}}],
        "bolts": [
            {"name": "validate", "className": "tests.chart.observed:Validate", "parallelism": 2,
             "inputs": [{"component": "events", "grouping": {"type": "shuffle"}}]},
            {"name": "flaky", "className": "examples.flaky:FlakyBolt", "parallelism": 2,
             "inputs": [{"component": "validate", "grouping": {"type": "shuffle"}}]},
            {"name": "dropping", "className": "examples.flaky:DroppingBolt", "parallelism": 2,
             "inputs": [{"component": "flaky", "grouping": {"type": "shuffle"}}]},
        ],
    }


class Producer(threading.Thread):
    """Appends ``rate`` records a second to the log's topic until stopped."""

    def __init__(self, log_path: Path, *, rate: float) -> None:
        super().__init__(name="producer", daemon=True)
        self.log_path, self.rate = log_path, rate
        self.stopped = threading.Event()
        self.produced = 0

    def run(self) -> None:
        log = DurableLog(self.log_path)
        try:
            start = time.monotonic()
            while not self.stopped.wait(0.1):
                due = int(self.rate * (time.monotonic() - start)) - self.produced
                if due > 0:
                    log.append(TOPIC, [(None, f"event {self.produced + i}") for i in range(due)])
                    self.produced += due
        finally:
            log.close()


@dataclass
class Run:
    """A running topology, its producer and the Prometheus server scraping it."""

    supervisor: Supervisor
    producer: Producer
    prometheus: Prometheus
    started: float = field(default_factory=time.time)

    @property
    def variables(self) -> dict[str, str]:
        """The dashboard variables as Grafana would set them for this run (every component selected)."""
        elapsed = max(30, int(time.time() - self.started))
        return {"datasource": "prometheus", "namespace": NAMESPACE, "topology": TOPOLOGY, "component": ".+",
                "__rate_interval": "10s", "__interval": "1s", "__range": f"{elapsed}s"}

    def wait_scraped(self, *, scrapes: int, timeout: float = 120.0) -> None:
        """Until Prometheus holds ``scrapes`` samples of every process (enough for the rate windows)."""
        expected = len(self.supervisor.children)
        query = f'count_over_time(squall_process_info{{namespace="{NAMESPACE}"}}[5m]) >= {scrapes}'
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.supervisor.check()
            if len(self.prometheus.query(query)) == expected:
                return
            time.sleep(0.5)  # Prometheus has no event for "scraped n times"
        raise AssertionError(f"Prometheus did not scrape every process {scrapes} times within {timeout} s; "
                             f"targets: {self.prometheus.query('up')}")


@contextmanager
def observed_run(workdir: Path, *, rate: float = 200.0, interval: float = 1.0,
                 rule_files: list[Path] | None = None) -> Iterator[Run]:
    """Start the producer, the topology's processes and Prometheus (evaluating ``rule_files``); stop them
    all on exit."""
    log_path = workdir / "log.db"
    log = DurableLog(log_path, create=True)
    log.create_topic(TOPIC, partitions=4)
    log.close()
    doc = topology_doc(log_path)
    spec_path = workdir / "topology.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    # The processes import tests.chart.observed and examples.flaky from the repository root.
    sup = Supervisor(spec_path=spec_path, spec=TopologySpec.from_dict(doc), run_dir=workdir / "run",
                     env={"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    targets = [Target(f"127.0.0.1:{c.metrics_port}", {"namespace": NAMESPACE, "pod": f"{TOPOLOGY}-{c.name}",
                                                       "container": c.role}) for c in sup.children]
    prometheus = Prometheus(workdir=workdir / "prometheus", targets=targets, interval=interval,
                            rule_files=rule_files)
    producer = Producer(log_path, rate=rate)
    try:
        producer.start()
        sup.start()
        prometheus.start()
        yield Run(sup, producer, prometheus)
    finally:
        producer.stopped.set()
        prometheus.stop()
        sup.stop(timeout=15)
        producer.join()
