"""A windowed bolt across processes: its tasks in two workers, the windows' outputs (anchored to every tuple
of the window) crossing to a sink in the other worker, every tree acked once its window was computed."""

from __future__ import annotations

import json
import os
import signal

import yaml
from procs_support import COMPONENTS, spout_report, wait_for
from squall_test_windows import LateRows, WindowRows
from squall_test_windows import late as is_late

from squall.process.supervisor import Supervisor
from squall.topology import TopologySpec

N = 1500


def test_windows_across_processes_ack_every_tree_once_its_window_was_computed(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(COMPONENTS), os.environ.get("PYTHONPATH", "")]))
    doc = {
        "name": "proc-windows", "workers": 2, "ackers": 2, "messageTimeoutSeconds": 30,
        "config": {"test.count": N, "test.rate": 1000, "test.report": str(tmp_path / "spout.json"),
                   "test.sums": str(tmp_path / "sums")},
        # names sort a < b < c: the spout on worker-0, a window task and a sink task on each worker
        "spouts": [{"name": "a-numbers", "className": "squall_test_components:NumberSpout"}],
        "bolts": [
            {"name": "b-window", "className": "squall_test_windows:Summer", "parallelism": 2,
             "window": {"length": {"seconds": 0.25}, "watermarkIntervalSeconds": 0.05},
             "inputs": [{"component": "a-numbers", "grouping": {"type": "fields", "fields": ["n"]}}]},
            {"name": "c-sink", "className": "squall_test_windows:SumSink", "parallelism": 2,
             "inputs": [{"component": "b-window", "grouping": {"type": "fields", "fields": ["end"]}}]},
        ],
    }
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    sup = Supervisor(spec_path=path, spec=TopologySpec.from_dict(doc), run_dir=tmp_path / "run")
    sup.start()
    try:
        wait_for(lambda t: t.acked["a-numbers"] >= N, timeout=60, sup=sup, what=f"{N} trees acked")
    finally:
        codes = sup.stop(timeout=20)
    assert set(codes.values()) == {0}
    report = spout_report(tmp_path)
    assert report["acked"] == list(range(N)) and report["failed"] == 0
    sums = [json.loads(p.read_text()) for p in tmp_path.glob("sums-*.json")]
    assert len(sums) == 2 and all(s["windows"] for s in sums)  # windows reached the sink in both workers
    # tumbling windows: each number in exactly one, each window's output anchored to its every tuple
    assert sum(s["size"] for s in sums) == N and sum(s["total"] for s in sums) == N * (N - 1) // 2
    assert sum(s["anchors"] for s in sums) == N
    final = sup.final_totals()
    assert final.timed_out["a-numbers"] == 0


def test_durable_windows_come_back_from_their_store_after_a_sigkill(tmp_path, monkeypatch):
    """b-window's windows are durable: worker-1, with one of its tasks, is killed mid-run; the task comes back
    on its store (under the run directory; tests/test_windows.py shows what it restores), the tuples its last
    commit lacks are replayed, and every number is acked once and is in a window the sink wrote."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(COMPONENTS), os.environ.get("PYTHONPATH", "")]))
    count = 3000
    doc = {
        "name": "proc-windows", "workers": 2, "ackers": 1, "messageTimeoutSeconds": 5,
        "config": {"test.count": count, "test.rate": 500, "test.report": str(tmp_path / "spout.json"),
                   "sink.dir": str(tmp_path / "sink"), "topology.state.checkpoint.interval.ms": 200},
        "spouts": [{"name": "a-numbers", "className": "squall_test_components:NumberSpout"}],
        "bolts": [
            {"name": "b-window", "className": "squall_test_windows:Members", "parallelism": 2, "stateful": True,
             "window": {"length": {"seconds": 1}, "watermarkIntervalSeconds": 0.05},
             "inputs": [{"component": "a-numbers", "grouping": {"type": "fields", "fields": ["n"]}}]},
            {"name": "c-sink", "className": "squall_test_windows:WindowRows", "tickFrequencySeconds": 0.1,
             "inputs": [{"component": "b-window", "grouping": {"type": "global"}}]},
        ],
    }
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    sup = Supervisor(spec_path=path, spec=TopologySpec.from_dict(doc), run_dir=tmp_path / "run")
    sup.start()
    try:
        wait_for(lambda t: t.acked["a-numbers"] >= 1000, timeout=60, sup=sup, what="a first part acked")
        victim = sup.child("worker-1")
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        wait_for(lambda t: t.acked["a-numbers"] >= count, timeout=120, sup=sup, what="every number acked")
        wait_for(lambda t: len(windowed(tmp_path)) == count, timeout=30, sup=sup, what="every number in a window")
    finally:
        sup.stop(timeout=20)
    assert spout_report(tmp_path)["acked"] == list(range(count))
    assert list((tmp_path / "run").glob("state/proc-windows/b-window-*.db"))  # the windows' stores


def windowed(tmp_path) -> set[int]:
    rows = WindowRows.query(tmp_path / "sink", "SELECT numbers FROM windows") if (tmp_path / "sink").exists() else []
    return {n for (numbers,) in rows for n in json.loads(numbers)}


def test_event_time_windows_across_processes_send_late_tuples_to_the_late_stream(tmp_path, monkeypatch):
    """The window task in worker-1 (global grouping), the spout and the window sink in worker-0, the late sink in
    worker-1: every number is in exactly one 1-second window of its timestamps, or, 10 s behind the watermark,
    on the late stream."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(COMPONENTS), os.environ.get("PYTHONPATH", "")]))
    count = 2000
    doc = {
        # the far one's tree waits for a window that never fires: the stop's drain waits out the timeout for it
        "name": "proc-windows", "workers": 2, "ackers": 1, "messageTimeoutSeconds": 10,
        "config": {"test.count": count, "test.rate": 500, "test.report": str(tmp_path / "spout.json"),
                   "sink.dir": str(tmp_path / "sink")},
        "spouts": [{"name": "a-numbers", "className": "squall_test_windows:StampedSpout"}],
        "bolts": [
            {"name": "b-window", "className": "squall_test_windows:Members",
             "window": {"length": {"seconds": 1}, "timestampField": "ts", "lagSeconds": 1,
                        "watermarkIntervalSeconds": 0.05, "lateTupleStream": "late"},
             "inputs": [{"component": "a-numbers", "grouping": {"type": "global"}}]},
            {"name": "c-sink", "className": "squall_test_windows:WindowRows", "tickFrequencySeconds": 0.1,
             "inputs": [{"component": "b-window"}]},
            {"name": "d-late", "className": "squall_test_windows:LateRows", "tickFrequencySeconds": 0.1,
             "inputs": [{"component": "b-window", "stream": "late"}]},
        ],
    }
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    sup = Supervisor(spec_path=path, spec=TopologySpec.from_dict(doc), run_dir=tmp_path / "run")
    sup.start()
    try:
        wait_for(lambda t: t.acked["a-numbers"] >= count, timeout=90, sup=sup, what="every number acked")
    finally:
        sup.stop(timeout=40)
    assert spout_report(tmp_path)["acked"] == list(range(count))  # the one far ahead waits for its window
    late = {n for (n,) in LateRows.query(tmp_path / "sink", "SELECT n FROM late")}
    assert late == {n for n in range(count) if is_late(n)}
    windows = [json.loads(numbers) for (numbers,) in WindowRows.query(tmp_path / "sink", "SELECT numbers FROM windows")]
    assert sorted(n for w in windows for n in w) == [n for n in range(count) if not is_late(n)]
    assert all(len({(n * 10 - 1) // 1000 for n in w}) == 1 for w in windows)  # each (end - 1 s, end]
