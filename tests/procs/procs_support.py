"""Helpers of the multi-process tests: a topology of test components, and waiting on metrics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from squall.process.supervisor import Supervisor
from squall.topology import TopologySpec

COMPONENTS = Path(__file__).parent


def topology(tmp_path: Path, *, count: int, workers: int, ackers: int | None = None, timeout: int = 30,
             max_pending: int | None = 1000, sink: str = "Sink",
             config: dict | None = None, spout: str = "NumberSpout", ticks: float | None = None,
             settings: dict | None = None) -> tuple[Path, TopologySpec]:
    """``settings``: more top-level keys of the spec."""
    doc = {
        "name": "proc-test", "workers": workers, "ackers": ackers, "messageTimeoutSeconds": timeout,
        "maxSpoutPending": max_pending,
        "config": {"test.count": count, "test.report": str(tmp_path / "spout.json"), **(config or {})},
        # Component names sort as a < b < c, so round-robin assignment puts the spout on worker-0.
        "spouts": [{"name": "a-numbers", "className": spout if ":" in spout else f"squall_test_components:{spout}"}],
        "bolts": [
            {"name": "b-double", "className": "squall_test_components:Double", "parallelism": workers,
             "inputs": [{"component": "a-numbers", "grouping": {"type": "shuffle"}}]},
            {"name": "c-sink", "className": f"squall_test_components:{sink}", "parallelism": workers,
             "tickFrequencySeconds": ticks,
             "inputs": [{"component": "b-double", "grouping": {"type": "fields", "fields": ["n"]}}]},
        ],
        **(settings or {}),
    }
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, TopologySpec.from_dict(doc)


def wait_for(condition, *, timeout: float, sup: Supervisor, what: str):
    """Poll the processes' metrics until ``condition(totals)`` holds (restarting dead processes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sup.check()
        totals = sup.scrape()
        if condition(totals):
            return totals
        time.sleep(0.2)
    logs = "\n".join(f"--- {c.name}\n{c.log_path.read_text()[-2000:]}" for c in sup.children if c.log_path.exists())
    raise AssertionError(f"timed out waiting for {what}; last totals {sup.scrape()}\n{logs}")


def samples(text: str) -> dict[str, list]:
    """A process's scrape: sample name → its samples (labels and value)."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def spout_report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "spout.json").read_text())


