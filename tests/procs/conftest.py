"""The ``cluster`` fixture: start a topology's worker and acker processes with ``Supervisor``."""

from __future__ import annotations

import os

import pytest
from procs_support import COMPONENTS, topology

from squall.process.supervisor import Supervisor


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(COMPONENTS), os.environ.get("PYTHONPATH", "")]))
    started: list[Supervisor] = []

    def start(*, pin: bool = False, **kwargs) -> Supervisor:
        path, spec = topology(tmp_path, **kwargs)
        sup = Supervisor(spec_path=path, spec=spec, run_dir=tmp_path / "run", pin=pin)
        sup.start()
        started.append(sup)
        return sup

    yield start
    for sup in started:
        if not sup.stopping:
            sup.stop(timeout=10)


