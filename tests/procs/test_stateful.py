"""Stateful bolts across real processes: their state, in the embedded store under the run directory,
survives a worker killed with SIGKILL; every record is in the committed counts at least once."""

from __future__ import annotations

import collections
import os
import signal

from procs_support import spout_report, wait_for

from squall.state.stores import SqliteStore

COUNT = 3000


def committed(tmp_path) -> tuple[collections.Counter, list[int]]:
    """The count bolt's committed counts, summed over its tasks, and each task's last checkpoint."""
    total: collections.Counter = collections.Counter()
    txids = []
    for path in sorted((tmp_path / "run" / "state" / "proc-test").glob("b-count-*.db")):
        txid, items = SqliteStore(path).load()
        total.update(items)
        txids.append(txid)
    return total, txids


def test_a_stateful_count_keeps_every_record_at_least_once_through_a_sigkill(run, tmp_path):
    """b-count's two tasks run one per worker, the checkpoint spout on worker-1 (after the user's
    components); a-src on worker-0, which keeps the replays. worker-1 is killed mid-run: its task's state
    comes back from its last commit, what it held is replayed, and the checkpoint spout resumes."""
    sup = run(spout="NumberSpout", timeout=5, config={"test.count": COUNT, "test.rate": 500,
                                                      "topology.state.checkpoint.interval.ms": 200},
              bolts=[{"name": "b-count", "className": "CountByTen", "parallelism": 2, "stateful": True,
                      "inputs": [{"component": "a-src", "grouping": {"type": "fields", "fields": ["n"]}}]}])
    wait_for(lambda t: t.acked["a-src"] >= 500, timeout=60, sup=sup, what="a first part acked")
    before, _ = committed(tmp_path)
    assert sum(before.values()) > 0  # checkpoints committed already: the kill has state to lose
    victim = sup.child("worker-1")
    os.kill(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait()
    wait_for(lambda t: t.acked["a-src"] >= COUNT, timeout=120, sup=sup, what="every record acked")
    sup.stop()
    assert spout_report(tmp_path)["acked"] == list(range(COUNT))
    counts, txids = committed(tmp_path)
    truth = collections.Counter(str(n % 10) for n in range(COUNT))
    assert len(txids) == 2 and min(txids) >= 0
    for key, n in truth.items():
        assert counts[key] >= n, f"key {key}: {counts[key]} committed of {n} records"
    assert set(counts) == set(truth)


def test_a_drain_commits_what_the_stateful_bolts_hold_and_ends_without_waiting_out_the_timeout(run, tmp_path):
    """SIGTERM drains: the spouts stop, and the checkpoint spout runs one last checkpoint, which commits what
    the stateful bolts hold and acks it. Without it their inputs stayed held, every drain ran out at the
    message timeout, and what they held timed out and was replayed."""
    sup = run(spout="NumberSpout", timeout=20, config={"test.count": -1, "test.rate": 300},
              bolts=[{"name": "b-count", "className": "CountByTen", "parallelism": 2, "stateful": True,
                      "inputs": [{"component": "a-src", "grouping": {"type": "fields", "fields": ["n"]}}]}])
    wait_for(lambda t: t.acked["a-src"] >= 300, timeout=60, sup=sup, what="the topology to run")
    assert set(sup.stop().values()) == {0}
    for child in sup.children:
        assert "drained for the message timeout" not in child.log_path.read_text(), child.name
    report = spout_report(tmp_path)
    assert report["failed"] == 0 and report["acked"] == list(range(report["emitted"]))
    counts, _ = committed(tmp_path)
    assert sum(counts.values()) == report["emitted"]  # each acked record committed once: nothing replayed
