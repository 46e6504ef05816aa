"""The ``cluster`` fixture: start a topology's worker and acker processes with ``Supervisor``."""

from __future__ import annotations

import os

import pytest
import yaml
from procs_support import COMPONENTS, topology

from squall.process.supervisor import Supervisor
from squall.topology import TopologySpec


@pytest.fixture
def supervise(tmp_path, monkeypatch):
    """``supervise(path, spec, pin=False)``: start a topology's processes with the test components on their
    PYTHONPATH; every one started is stopped at the test's end."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(COMPONENTS), os.environ.get("PYTHONPATH", "")]))
    started: list[Supervisor] = []

    def start(path, spec: TopologySpec, *, pin: bool = False) -> Supervisor:
        sup = Supervisor(spec_path=path, spec=spec, run_dir=tmp_path / "run", pin=pin)
        sup.start()
        started.append(sup)
        return sup

    yield start
    for sup in started:
        if not sup.stopping:
            sup.stop(timeout=10)


@pytest.fixture
def cluster(tmp_path, supervise):
    """Start procs_support.topology's test topology (its keyword arguments)."""

    def start(*, pin: bool = False, **kwargs) -> Supervisor:
        path, spec = topology(tmp_path, **kwargs)
        return supervise(path, spec, pin=pin)
    return start


@pytest.fixture
def run(tmp_path, supervise):
    """Start a topology of test components: the spout ``a-src`` and ``bolts``, each a bolt spec whose
    className is a class of squall_test_components and whose inputs default to a shuffle of ``a-src``
    (round-robin assignment in component name order places them over the workers)."""

    def start(*, spout: str, bolts: list[dict], config: dict, timeout: int, workers: int = 2,
              ackers: int = 1) -> Supervisor:
        doc = {
            "name": "proc-test", "workers": workers, "ackers": ackers, "messageTimeoutSeconds": timeout,
            "config": {"test.report": str(tmp_path / "spout.json"), **config},
            "spouts": [{"name": "a-src", "className": f"squall_test_components:{spout}"}],
            "bolts": [{**bolt, "className": f"squall_test_components:{bolt['className']}",
                       "inputs": bolt.get("inputs", [{"component": "a-src", "grouping": {"type": "shuffle"}}])}
                      for bolt in bolts],
        }
        path = tmp_path / "topology.yaml"
        path.write_text(yaml.safe_dump(doc))
        return supervise(path, TopologySpec.from_dict(doc))
    return start
