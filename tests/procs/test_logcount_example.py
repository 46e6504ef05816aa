"""examples/logcount end to end: the runner with a kill -9 mid-run, and ``squall run`` on its YAML."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from examples.logcount import read_counts

from squall.spouts.log import DurableLog

REPO = Path(__file__).resolve().parents[2]
RECORDS = 40_000


def _number(text: str, label: str) -> int:
    match = re.search(rf"^{label}:\s+([\d,]+)", text, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{text}"
    return int(match[1].replace(",", ""))


def _committed(path: Path) -> dict[int, int]:
    log = DurableLog(path)
    try:
        return {p: c.offset for p, c in log.committed("logcount", "records").items()}
    finally:
        log.close()


@pytest.mark.timeout(180)
def test_the_runner_counts_every_record_at_least_once_across_a_kill(tmp_path):
    out_dir = tmp_path / "logcount"
    run = subprocess.run([sys.executable, "-m", "examples.logcount", "--records", str(RECORDS),
                          "--dir", str(out_dir), "--kill-at", "0.25"],
                         cwd=REPO, capture_output=True, text=True, timeout=170)
    text = run.stdout
    assert run.returncode == 0, text + run.stderr

    # The kill landed mid-run and the supervisor restarted the worker.
    killed = re.search(r"^killed (worker-\d) \(pid \d+, runs spout task 0 of 'records'\) with SIGKILL after "
                       rf"([\d,]+) of {RECORDS:,} records were counted$", text, re.MULTILINE)
    assert killed, text
    assert int(killed[2].replace(",", "")) < RECORDS
    assert f"{killed[1]} exited with signal SIGKILL; restarting it (restart 1)" in text
    assert re.search(r"^\s+[\d.]+ s  counted\s+[\d,]+ / ", text, re.MULTILINE)  # progress lines

    # The printed claims ...
    assert _number(text, "records produced") == RECORDS
    assert _number(text, "counted at least once") == RECORDS
    assert "(every record)" in text
    twice = _number(text, "counted twice or more")
    assert _number(text, "worker restarts") == 1
    assert re.search(r"^elapsed:\s+[\d.]+ s", text, re.MULTILINE)
    # ... are what the sinks durably recorded, and every offset was committed.
    assert read_counts(out_dir) == (RECORDS, twice)
    assert _committed(out_dir / "log.db") == dict.fromkeys(range(4), RECORDS // 4)
    # The restarted spout task resumed from its group's committed offsets.
    assert re.search(r"reading records/0 from offset [1-9]\d* \(committed\)",
                     (out_dir / "run" / f"{killed[1]}.log").read_text())


@pytest.mark.timeout(120)
def test_squall_run_counts_a_log_produced_with_squall_log(tmp_path):
    """The YAML as documented: produce .squall/logcount/log.db, then `squall run` from that directory."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH")] if p)}
    produce = subprocess.run([sys.executable, "-m", "squall", "log", "produce", ".squall/logcount/log.db",
                              "--topic", "records", "--partitions", "4"],
                             input="".join(f"{n}\n" for n in range(2000)), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert produce.returncode == 0, produce.stderr
    run = subprocess.run([sys.executable, "-m", "squall", "run", str(REPO / "examples" / "logcount.yaml"),
                          "--trees", "2000", "--run-dir", str(tmp_path / "run")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2,000 trees acked" in run.stdout
    assert read_counts(tmp_path / ".squall" / "logcount")[0] == 2000  # every record counted
    # Deactivating on SIGTERM committed every acked offset: a rerun would resume after them.
    assert _committed(tmp_path / ".squall" / "logcount" / "log.db") == dict.fromkeys(range(4), 500)
