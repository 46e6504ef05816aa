"""``e2e/local-cluster.sh``, the e2e suite's entry on this machine's own Kubernetes: the checks it makes
before it touches the cluster, and the image build it hands to the suite. The k8s-local scripts and
the tools it calls are stand-ins here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "e2e" / "local-cluster.sh"


def _stand_ins(folder: Path, body: str) -> None:
    """The k8s-local scripts the script calls, each a shell script of ``body``."""
    folder.mkdir()
    for name in ("down.sh", "build.sh", "up.sh", "image.sh", "load-image.sh"):
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)


def test_a_short_disk_stops_the_run_before_the_cluster_is_touched(tmp_path: Path) -> None:
    k8s, calls = tmp_path / "k8s-local", tmp_path / "calls"
    _stand_ins(k8s, f'echo "${{0##*/}} $*" >> {calls}\nexit 1')  # records the call, and fails
    env = {**os.environ, "K8S_LOCAL": str(k8s), "SQUALL_E2E_DISK_GB": str(10**9)}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "GB free on /var/lib" in done.stderr and "buildah rmi --prune" in done.stderr
    assert not calls.exists(), calls.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="the script runs only as root, as the k8s-local scripts do")
def test_a_failed_prune_does_not_fail_the_image_build(tmp_path: Path) -> None:
    """The build hook the script hands to the suite: buildah refuses ``rmi --prune`` while a killed
    build's working container holds an image, and that housekeeping must not fail the e2e run."""
    k8s, bin_, hook = tmp_path / "k8s-local", tmp_path / "bin", tmp_path / "hook"
    _stand_ins(k8s, "exit 0")
    bin_.mkdir()
    # the suite's python records the hook instead of running pytest; buildah fails only its prune
    (bin_ / "python").write_text(f'#!/bin/sh\nprintf %s "$SQUALL_E2E_BUILD" > {hook}\n')
    (bin_ / "buildah").write_text('#!/bin/sh\n[ "$1" = rmi ] || exit 0\n'
                                  'echo "image is in use by a container" >&2\nexit 125\n')
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "K8S_LOCAL": str(k8s), "SQUALL_E2E_DISK_GB": "0", "PYTHON": str(bin_ / "python"),
           "PATH": f"{bin_}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    built = subprocess.run(["sh", "-c", hook.read_text()], cwd=SCRIPT.parents[1], env=env, capture_output=True,
                           text=True, timeout=60, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "buildah rmi --prune failed" in built.stderr
