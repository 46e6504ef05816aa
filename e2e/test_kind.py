"""Squall on a real Kubernetes (kind): the chart's operator runs Topologies, scales them, loses no record
when a worker pod dies, and removes their pods when they are deleted. The tests run in file order, each
continuing from the cluster state the previous one left."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from kube import Kubectl, eventually

MANIFESTS = Path(__file__).parent / "manifests"
LOGCOUNT = yaml.safe_load((MANIFESTS / "logcount.yaml").read_text())["spec"]
LINES = LOGCOUNT["config"]["logcount.lines"]
RATE = LOGCOUNT["config"]["logcount.rate"]
TIMEOUT = LOGCOUNT["messageTimeoutSeconds"]


def spout_pod(kubectl: Kubectl, topology: str, spout: str) -> str:
    """The worker pod running ``spout`` (the one whose metrics have its max-spout-pending gauge)."""
    pods = [p["metadata"]["name"] for p in kubectl.pods(topology, "worker")]
    found = [p for p in pods if kubectl.metrics(p).has("squall_max_spout_pending", component=spout)]
    assert len(found) == 1, f"{spout} runs on {found} of {pods}"
    return found[0]


def acked(kubectl: Kubectl, pod: str, spout: str) -> float:
    return kubectl.metrics(pod).total("squall_acked_total", component=spout)


def test_the_operator_runs(operator: Kubectl):
    operator("rollout", "status", "deployment/squall", "--timeout=120s")
    (pod,) = operator.get("pods", "--selector", "app.kubernetes.io/component=operator")["items"]
    security = pod["spec"]["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_topologies_become_ready(kubectl: Kubectl):
    kubectl("apply", "--filename", str(MANIFESTS / "wordcount.yaml"), "--filename", str(MANIFESTS / "logcount.yaml"))
    kubectl("wait", "--for=condition=Ready", "topology/wordcount", "topology/logcount", "--timeout=600s", timeout=660)
    wordcount = kubectl.get("topology/wordcount")
    assert wordcount["status"]["phase"] == "Running"
    assert (wordcount["status"]["readyWorkers"], wordcount["status"]["readyAckers"]) == (2, 2)
    assert len(kubectl.pods("logcount", "worker")) == 3 and len(kubectl.pods("logcount", "acker")) == 1


def test_workers_count_acked_trees(kubectl: Kubectl):
    pod = spout_pod(kubectl, "wordcount", "sentences")
    first = eventually(lambda: acked(kubectl, pod, "sentences") or None, timeout=120, what="a first acked tree")
    eventually(lambda: acked(kubectl, pod, "sentences") > first, timeout=60, what="more acked trees")


def test_a_killed_worker_loses_no_record(kubectl: Kubectl):
    spout = spout_pod(kubectl, "logcount", "lines")
    before = kubectl.get("pod", spout)
    victim = next(p["metadata"] for p in kubectl.pods("logcount", "worker") if p["metadata"]["name"] != spout)
    eventually(lambda: acked(kubectl, spout, "lines") >= 5 * RATE, timeout=300, what="lines flowing")
    assert acked(kubectl, spout, "lines") < LINES - 30 * RATE, "logcount ended before the kill: raise its lines"

    kubectl("delete", "pod", victim["name"], "--grace-period=1", "--wait=false")

    def all_acked() -> bool:
        metrics = kubectl.metrics(spout)
        return (metrics.total("squall_acked_total", component="lines") >= LINES
                and metrics.total("squall_pending_trees", component="lines") == 0)

    eventually(all_acked, timeout=LINES / RATE + 6 * TIMEOUT + 300, what=f"all {LINES} lines acked")
    time.sleep(2 * TIMEOUT)  # a line acked twice would show up by now
    metrics = kubectl.metrics(spout)
    assert metrics.total("squall_acked_total", component="lines") == LINES, "every line acked exactly once"
    assert metrics.total("squall_failed_total", component="lines", reason="timeout") > 0, (
        "no tree died with the pod: the kill tested nothing")
    after = kubectl.get("pod", spout)
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the spout's pod must survive the test"
    assert after["status"]["containerStatuses"][0]["restartCount"] == before["status"]["containerStatuses"][0][
        "restartCount"], "the spout's process restarted: its counters started over"
    replaced = kubectl.get("pod", victim["name"])
    assert replaced["metadata"]["uid"] != victim["uid"], "the StatefulSet brought the killed pod back"


def test_scaling_workers_from_2_to_3(kubectl: Kubectl):
    kubectl("scale", "topology/wordcount", "--replicas=3")
    generation = kubectl.get("topology/wordcount")["metadata"]["generation"]
    kubectl("wait", f"--for=jsonpath={{.status.observedGeneration}}={generation}", "topology/wordcount",
            "--timeout=120s")
    kubectl("rollout", "status", "statefulset/wordcount-worker", "--timeout=600s", timeout=660)
    kubectl("wait", "--for=jsonpath={.status.readyWorkers}=3", "topology/wordcount", "--timeout=600s", timeout=660)
    kubectl("wait", "--for=condition=Ready", "topology/wordcount", "--timeout=600s", timeout=660)
    assert len(kubectl.pods("wordcount", "worker")) == 3
    assert len(kubectl.pods("wordcount", "acker")) == 3, "ackers: null means one acker per worker"
    pod = spout_pod(kubectl, "wordcount", "sentences")
    first = eventually(lambda: acked(kubectl, pod, "sentences") or None, timeout=180, what="trees acked on 3 workers")
    eventually(lambda: acked(kubectl, pod, "sentences") > first, timeout=60, what="more trees acked on 3 workers")


def test_deleting_topologies_removes_their_pods(kubectl: Kubectl):
    kubectl("delete", "topology", "wordcount", "logcount", "--timeout=120s")
    selector = "app.kubernetes.io/instance in (wordcount,logcount)"
    for kind in ("pods", "statefulsets", "services", "configmaps"):
        eventually(lambda kind=kind: kubectl("get", kind, "--selector", selector, "--output", "name").strip() == "",
                   timeout=300, what=f"the topologies' {kind} to go")
