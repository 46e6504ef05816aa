"""The ``squall`` command line's cluster verbs on a real Kubernetes, as a user runs them with a kubeconfig:
``list`` and ``top NAME`` read the pods' /metrics through the API server's pod proxy (no port-forward),
``set-log-level`` reaches every process through the operator and is set back when its time is up,
``logs`` merges the pods' logs, ``deactivate``/``activate`` stop and start the spouts, ``rebalance --wait``
rescales 1 -> 2 workers and returns once the operator says Rebalanced, and ``kill`` deactivates, waits and
deletes. One Topology of its own (``verbs``: the word count at a gentle rate), deleted at the end by the
kill; the tests run in file order, each from where the previous one left it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kube import Kubectl, eventually

REPO = Path(__file__).resolve().parents[1]
NAME = "verbs"
READY = 300  # seconds for the Topology's pods to be Ready (image present: about 15 s here)
REBALANCE = 600  # seconds for rebalance --wait (a rescale's new pods were Ready 6-13 s after the scale here)
LOG_TIMEOUT = 20  # seconds set-log-level lasts
RELAYED = 90  # seconds for the operator to tell every process (at once, at the annotation's update)


def squall(cluster: Any, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``squall ARGS`` in the Topologies' namespace with the cluster's kubeconfig, as a user would run it."""
    return subprocess.run([sys.executable, "-m", "squall", *args, "--namespace", "squall-e2e",
                           "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def pod_logs(kubectl: Kubectl) -> dict[str, str]:
    pods = [(p["metadata"]["name"], role) for role in ("worker", "acker") for p in kubectl.pods(NAME, role)]
    return {pod: kubectl("logs", pod, "--container", role, timeout=60) for pod, role in pods}


def test_list_shows_the_topology_with_its_rates(cluster: Any, kubectl: Kubectl):
    topology = yaml.safe_load((Path(__file__).parent / "manifests" / "wordcount.yaml").read_text())
    topology["metadata"]["name"] = NAME
    topology["spec"] |= {"workers": 1, "config": {"wordcount.rate": 500}}
    kubectl("apply", "--filename", "-", stdin=yaml.safe_dump(topology))
    kubectl("wait", f"topology/{NAME}", "--for=condition=Ready", f"--timeout={READY}s", timeout=READY + 30)

    def acking() -> dict | None:
        rows = {r["name"]: r for r in json.loads(ok(squall(cluster, "list", "-o", "json")))}
        row = rows.get(NAME)
        return row if row and (row["ackedPerSecond"] or 0) > 0 else None

    row = eventually(acking, timeout=120, what=f"squall list to show {NAME} acking")
    assert (row["phase"], row["workers"], row["readyWorkers"]) == ("Running", 1, 1)
    assert row["p99Ms"] is not None and row["failedPerSecond"] is not None
    table = ok(squall(cluster, "list")).splitlines()
    assert table[0].split()[:3] == ["NAME", "PHASE", "WORKERS"] and any(line.startswith(NAME) for line in table)


def test_top_shows_the_components_through_the_pod_proxy(cluster: Any, kubectl: Kubectl):
    def frame() -> str | None:
        out = ok(squall(cluster, "top", NAME, "--once"))
        header = out.splitlines()[0]
        return out if "trees acked 0.0/s" not in header else None

    out = eventually(frame, timeout=120, what="squall top to show trees acked")
    lines = out.splitlines()
    assert lines[0].startswith(f"topology {NAME}   processes 2/2")
    assert {line.split()[0] for line in lines[3:] if line.strip()} >= {"sentences", "split", "count"}
    missing = squall(cluster, "top", "nosuch", "--once")
    assert missing.returncode == 5 and "no topology 'nosuch' in namespace squall-e2e" in missing.stderr


def test_set_log_level_reaches_every_process_and_is_set_back(cluster: Any, kubectl: Kubectl):
    out = ok(squall(cluster, "set-log-level", NAME, "DEBUG", "--logger", "examples.wordcount",
                    "--timeout", str(LOG_TIMEOUT)))
    assert "logger examples.wordcount at DEBUG until" in out
    eventually(lambda: all("logger examples.wordcount at DEBUG for" in text for text in pod_logs(kubectl).values()),
               timeout=RELAYED, what="every process to set examples.wordcount at DEBUG")
    eventually(lambda: all("logger examples.wordcount back to its own level" in text
                           for text in pod_logs(kubectl).values()),
               timeout=LOG_TIMEOUT + RELAYED, what="every process to set it back")
    assert kubectl.field(f"topology/{NAME}", "metadata", "generation") == 1  # the spec untouched: no rebalance
    merged = ok(squall(cluster, "logs", NAME)).splitlines()
    assert any(line.startswith(f"[{NAME}-worker-0") and "set_log_level" in line for line in merged)
    assert any(line.startswith(f"[{NAME}-acker-0") for line in merged)


def test_deactivate_and_activate(cluster: Any, kubectl: Kubectl):
    ok(squall(cluster, "deactivate", NAME))
    kubectl.wait_field(f"topology/{NAME}", "status", "phase", equals="Suspended", timeout=120)
    ok(squall(cluster, "activate", NAME))
    kubectl.wait_field(f"topology/{NAME}", "status", "phase", equals="Running", timeout=120)


def test_rebalance_waits_until_the_operator_has_rebalanced(cluster: Any, kubectl: Kubectl):
    out = ok(squall(cluster, "rebalance", NAME, "--workers", "2", "--wait", str(REBALANCE), timeout=REBALANCE + 60))
    assert "Rebalanced: Ready" in out.splitlines()[-1]
    assert kubectl.field(f"topology/{NAME}", "status", "readyWorkers") == 2
    assert len(kubectl.pods(NAME, "worker")) == 2


def test_kill_deactivates_waits_and_deletes(cluster: Any, kubectl: Kubectl):
    ok(squall(cluster, "kill", NAME, "--wait", "5"))
    assert NAME not in [t["metadata"]["name"] for t in kubectl.get("topologies")["items"]]
    eventually(lambda: not kubectl.pods(NAME, "worker") and not kubectl.pods(NAME, "acker"), timeout=300,
               what=f"{NAME}'s pods to go")
    gone = squall(cluster, "kill", NAME, "--wait", "0")
    assert gone.returncode == 5 and f"no topology '{NAME}'" in gone.stderr
