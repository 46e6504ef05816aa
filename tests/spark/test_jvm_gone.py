"""A Spark job whose JVM stops answering or dies: run in a process of its own (``jvm_gone.py``), since it
takes that process's JVM, so this module does without the session the other Spark tests share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("java")]


@pytest.mark.long
def test_a_batch_fails_at_its_deadline_and_the_bolt_goes_on_whether_the_jvm_stopped_answering_or_died():
    """The job timeout cancelled the job first, a call into the JVM on the executor thread that every
    executor of the process shares: a stopped JVM (a long pause) held the whole process until it answered,
    and a dead one made the call raise, so the batch was never failed and the bolt was stuck for good
    (found by the Spark audit)."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("jvm_gone.py")), "stop", "kill"],
                          capture_output=True, text=True, timeout=300)
    runs = {r["mode"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(runs) == {"stop", "kill"}, done.stderr[-3000:]
    for mode, run in runs.items():
        # at the 3 s timeout, not once the JVM answered again (45 s for a stopped one, never for a dead one)
        assert run["failed_after"] is not None and run["failed_after"] < 15, (mode, run)
        # the replays went through the JVM, or a new one
        assert run["acked"] == list(range(10)), (mode, run, done.stderr[-3000:])
