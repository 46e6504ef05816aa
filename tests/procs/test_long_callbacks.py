"""What a spout or bolt hands over during a long callback leaves its process at once, not when the
callback returns: resets, acks and emits made while ``execute`` (or a spout's ``next_tuple``) still runs
reach their acker or their next bolt in another process meanwhile.

Each topology puts its spout on worker-0 and the long callback's component on worker-1 (round-robin
assignment in component name order), so everything the callback hands over must cross processes.
"""

from __future__ import annotations

from procs_support import spout_report, wait_for


def test_a_bolt_that_resets_its_tuple_through_a_long_execute_keeps_its_tree_from_timing_out(run, tmp_path):
    """The issue's case: T = 1 s, each tuple held 3 s in execute with a reset every 0.3 s, the spout in
    another worker. The resets reached the acker only when execute returned, and every tree timed out."""
    sup = run(spout="NumberSpout", bolts=[{"name": "b-slow", "className": "Resetter"}], timeout=1,
              config={"test.count": 3, "test.rate": 0.25, "test.hold": 3})
    totals = wait_for(lambda t: t.acked["a-src"] + t.failed["a-src"] + t.timed_out["a-src"] >= 3, timeout=60,
                      sup=sup, what="the three trees decided")
    assert (totals.acked["a-src"], totals.failed["a-src"], totals.timed_out["a-src"]) == (3, 0, 0)
    sup.stop()
    assert spout_report(tmp_path)["acked"] == [0, 1, 2]


def test_an_ack_made_during_a_long_execute_reaches_the_acker_while_execute_runs(run, tmp_path):
    release = tmp_path / "release"
    sup = run(spout="NumberSpout", bolts=[{"name": "b-hold", "className": "AckThenWait"}], timeout=30,
              config={"test.count": 1, "test.release": str(release)})
    try:
        wait_for(lambda t: t.acked["a-src"] == 1, timeout=20, sup=sup, what="the tree acked while execute waits")
        assert not release.exists()  # execute still runs: only this test makes the file
    finally:
        release.touch()
    sup.stop()
    assert spout_report(tmp_path)["acked"] == [0]


def test_an_emit_made_during_a_long_execute_reaches_the_next_bolt_while_execute_runs(run, tmp_path):
    """b-hold (worker-1) emits, then waits; c-sink runs on worker-0 (round-robin: a-src, b-hold, c-sink)."""
    release = tmp_path / "release"
    sup = run(spout="NumberSpout", bolts=[{"name": "b-hold", "className": "EmitThenWait"},
                     {"name": "c-sink", "className": "Sink", "inputs": [{"component": "b-hold"}]}],
              timeout=30, config={"test.count": 1, "test.release": str(release)})
    try:
        wait_for(lambda t: t.executed["c-sink"] == 1, timeout=20, sup=sup, what="the emit executed downstream")
        assert not release.exists()
    finally:
        release.touch()
    wait_for(lambda t: t.acked["a-src"] == 1, timeout=20, sup=sup, what="the tree acked once execute returned")
    sup.stop()
    assert spout_report(tmp_path)["acked"] == [0]


def test_a_tuple_a_spout_emits_before_its_next_tuple_blocks_reaches_its_bolt_meanwhile(run, tmp_path):
    """A spout's next_tuple emits, then blocks: its tuple is executed by a bolt of another worker, and
    acked there (its ACK goes to the acker through the spout's worker, the acker's home, once it runs)."""
    release = tmp_path / "release"
    sup = run(spout="EmitThenWaitSpout", bolts=[{"name": "b-sink", "className": "Sink"}], timeout=30,
              config={"test.count": 1, "test.release": str(release)})
    try:
        wait_for(lambda t: t.executed["b-sink"] == 1, timeout=20, sup=sup, what="the spout's tuple executed")
        assert not release.exists()
    finally:
        release.touch()
    wait_for(lambda t: t.acked["a-src"] == 1, timeout=20, sup=sup, what="the tree acked")
    sup.stop()
    assert spout_report(tmp_path)["acked"] == [0]

