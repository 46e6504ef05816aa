"""``squall run --in-process`` keeps a stateful topology's state where a run of processes would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from squall.state.stores import SqliteStore

REPO = Path(__file__).resolve().parents[2]


def test_an_in_process_run_commits_its_state_under_the_run_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SQUALL_STATE_DIR"}
    done = subprocess.run([sys.executable, "-m", "squall", "run", "examples/statefulwordcount.yaml", "--in-process",
                           "--duration", "4", "--run-dir", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    files = sorted((tmp_path / "state" / "statefulwordcount").glob("count-*.db"))
    assert files, f"no state under {tmp_path / 'state'}"
    assert sum(sum(SqliteStore(f).load()[1].values()) for f in files) > 0
