"""``e2e/local-cluster.sh``, the e2e suite's entry on this machine's own Kubernetes: the checks it makes
before it touches the cluster. The k8s-local scripts it would call are stand-ins here that record the
call and fail, so a check that let the run through stops at the first of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "e2e" / "local-cluster.sh"


def test_a_short_disk_stops_the_run_before_the_cluster_is_touched(tmp_path: Path) -> None:
    k8s, calls = tmp_path / "k8s-local", tmp_path / "calls"
    k8s.mkdir()
    for name in ("down.sh", "build.sh", "up.sh", "image.sh", "load-image.sh"):
        (k8s / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit 1\n')
        (k8s / name).chmod(0o755)
    env = {**os.environ, "K8S_LOCAL": str(k8s), "SQUALL_E2E_DISK_GB": str(10**9)}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "GB free on /var/lib" in done.stderr and "buildah rmi --prune" in done.stderr
    assert not calls.exists(), calls.read_text()
