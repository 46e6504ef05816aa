"""Squall on a real Kubernetes (kind, or any cluster from 1.20 on): the chart's operator runs Topologies,
scales them, loses no record when a worker pod dies, acks at least half as fast as before within a
stated time after a pod replacement and after a rescale, stops and starts their spouts when they
are suspended and resumed, and removes their pods when they are deleted; a Spark bolt runs its
jobs on executor pods. The tests run in file order, each continuing from the cluster state the
previous one left; the figures they measure are printed at the end of the run."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kube import Acked, Figures, Kubectl, eventually

from conftest import OPERATOR_IMAGE

MANIFESTS = Path(__file__).parent / "manifests"
CLICKS = yaml.safe_load((MANIFESTS / "clickstream.yaml").read_text())["spec"]["config"]["clickstream.clicks"]
LOGCOUNT = yaml.safe_load((MANIFESTS / "logcount.yaml").read_text())["spec"]
LINES = LOGCOUNT["config"]["logcount.lines"]
RATE = LOGCOUNT["config"]["logcount.rate"]
TIMEOUT = LOGCOUNT["messageTimeoutSeconds"]
WINDOW = 5  # seconds: a rate is "back" when one window this long acks at least half the rate before
BACK_BOUND = 30  # seconds from the replaced or rescaled pods being Ready until the rate is back
SUSPEND_BOUND = 30  # seconds from a suspend (resume) until a quiet window ends (the rate is back): the
# operator's command, not the kubelet's update of the mounted spec file, which took 58-65 s here


def spout_pod(kubectl: Kubectl, topology: str, spout: str) -> str:
    """The worker pod running ``spout`` (the one whose metrics have its max-spout-pending gauge)."""
    pods = [p["metadata"]["name"] for p in kubectl.pods(topology, "worker")]
    found = [p for p in pods if kubectl.metrics(p).has("squall_max_spout_pending", component=spout)]
    assert len(found) == 1, f"{spout} runs on {found} of {pods}"
    return found[0]


def acked(kubectl: Kubectl, pod: str, spout: str) -> float:
    return kubectl.metrics(pod).total("squall_acked_total", component=spout)


def wait_all_acked(kubectl: Kubectl, pod: str, spout: str, count: int, *, timeout: float, what: str) -> None:
    """Until ``spout`` (on ``pod``) has acked at least ``count`` trees and has none in flight."""
    def done() -> bool:
        metrics = kubectl.metrics(pod)
        return (metrics.total("squall_acked_total", component=spout) >= count
                and metrics.total("squall_pending_trees", component=spout) == 0)

    eventually(done, timeout=timeout, what=what)


def assert_all_processing(kubectl: Kubectl, topology: str) -> None:
    """Every worker and acker pod of ``topology`` says it is active, with every link to and from a peer up."""
    for pod in (p["metadata"]["name"] for role in ("worker", "acker") for p in kubectl.pods(topology, role)):
        scrape = kubectl.metrics(pod)
        assert scrape.total("squall_process_state", state="active") == 1, f"{pod} is not active"
        links = [(labels["peer"], labels["direction"], value) for name, labels, value in scrape.samples
                 if name == "squall_transport_connected"]
        assert links and all(value == 1 for *_, value in links), f"{pod}: links {links}"


def test_the_operator_runs(operator: Kubectl):
    operator("rollout", "status", "deployment/squall", "--timeout=120s")
    pods = operator.get("pods", "--selector", "app.kubernetes.io/component=operator")["items"]
    assert len(pods) == 2, "two replicas: one leads, both serve the webhook"
    # the slim image a user gets: the Dockerfile's operator target
    assert {pod["spec"]["containers"][0]["image"] for pod in pods} == {OPERATOR_IMAGE}
    for pod in pods:
        security = pod["spec"]["containers"][0]["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # the API server took the chart's NetworkPolicy for it (this cluster's bridge plugin does not enforce it)
    policy = operator.get("networkpolicy", "squall")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pods[0]["metadata"]["labels"].items()
    # one holds the Lease; Kubernetes 1.20 serves PodDisruptionBudgets as policy/v1beta1, which the chart picked
    holder = operator.field("lease/squall", "spec", "holderIdentity")
    assert holder and holder.split("_")[0] in {pod["metadata"]["name"] for pod in pods}
    assert operator.field("poddisruptionbudget/squall", "spec", "maxUnavailable") == 1


def test_the_webhook_refuses_a_broken_topology_and_the_operator_may_write_no_other_webhook(
        kubectl: Kubectl, operator: Kubectl):
    """The operator writes its webhook into the configuration the chart makes, with RBAC to patch that one
    alone; an operator that could create or change other webhook configurations could intercept any object."""
    broken = yaml.safe_load((MANIFESTS / "wordcount.yaml").read_text())
    broken["metadata"]["name"] = "broken"
    broken["spec"]["bolts"][0]["inputs"][0]["component"] = "nowhere"

    def refused() -> str | None:
        # a dry run: admission runs (the webhook has no side effects) and nothing is stored, so a try made
        # before the operator wrote the webhook (the CRD's schema lets it in) leaves nothing behind
        done = subprocess.run(["kubectl", "--kubeconfig", str(kubectl.kubeconfig), "--namespace", kubectl.namespace,
                               "apply", "--dry-run=server", "--filename", "-"], input=json.dumps(broken),
                              capture_output=True, text=True, timeout=60, check=False)
        return done.stderr if 'admission webhook "topology.squall.dev" denied' in done.stderr else None

    message = eventually(refused, timeout=60, what="the webhook to refuse the broken Topology")
    assert "unknown component 'nowhere'" in message
    account = "--as=system:serviceaccount:squall-system:squall"
    for verb, what, allowed in (("patch", "validatingwebhookconfigurations/squall.dev", "yes"),
                                ("patch", "validatingwebhookconfigurations/other", "no"),
                                ("create", "validatingwebhookconfigurations", "no"),
                                ("create", "mutatingwebhookconfigurations", "no")):
        answer = subprocess.run(["kubectl", "--kubeconfig", str(operator.kubeconfig), "auth", "can-i", verb, what,
                                 account], capture_output=True, text=True, timeout=60, check=False).stdout.strip()
        assert answer == allowed, f"{verb} {what}: {answer}"


def test_topologies_become_ready(kubectl: Kubectl, figures: Figures):
    start = time.monotonic()
    kubectl("apply", "--filename", str(MANIFESTS / "wordcount.yaml"), "--filename", str(MANIFESTS / "logcount.yaml"))
    kubectl("wait", "--for=condition=Ready", "topology/wordcount", "topology/logcount", "--timeout=600s", timeout=660)
    figures.add(f"time to Ready (apply of wordcount and logcount to both Ready): {time.monotonic() - start:.1f} s")
    wordcount = kubectl.get("topology/wordcount")
    assert wordcount["status"]["phase"] == "Running"
    assert (wordcount["status"]["readyWorkers"], wordcount["status"]["readyAckers"]) == (2, 2)
    assert len(kubectl.pods("logcount", "worker")) == 3 and len(kubectl.pods("logcount", "acker")) == 1


def test_workers_count_acked_trees(kubectl: Kubectl, figures: Figures):
    pod = spout_pod(kubectl, "wordcount", "sentences")
    first = eventually(lambda: acked(kubectl, pod, "sentences") or None, timeout=120, what="a first acked tree")
    eventually(lambda: acked(kubectl, pod, "sentences") > first, timeout=60, what="more acked trees")
    assert_all_processing(kubectl, "wordcount")
    figures.add(f"wordcount on 2 workers: {Acked(kubectl, 'wordcount', 'sentences').rate(10):.0f} trees acked/s")


def test_a_replaced_worker_pod_loses_no_record_and_acking_comes_back(kubectl: Kubectl, figures: Figures):
    spout = spout_pod(kubectl, "logcount", "lines")
    before = kubectl.get("pod", spout)
    victim = next(p["metadata"] for p in kubectl.pods("logcount", "worker") if p["metadata"]["name"] != spout)
    eventually(lambda: acked(kubectl, spout, "lines") >= 5 * RATE, timeout=300, what="lines flowing")
    lines = Acked(kubectl, "logcount", "lines")
    rate = lines.rate(2 * WINDOW)
    assert acked(kubectl, spout, "lines") < LINES - 60 * RATE, "logcount would end before the kill: raise its lines"

    killed, deleted_at = time.monotonic(), time.time()
    kubectl("delete", "pod", victim["name"], "--grace-period=1", "--wait=false")
    replacement: dict[str, Any] = {}

    def replacement_ready() -> bool:
        pod = kubectl.get("pod", victim["name"])
        if pod["metadata"]["uid"] == victim["uid"]:
            return False
        replacement.update(pod)
        return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))

    ready = lines.follow(replacement_ready, timeout=300, what="the deleted pod replaced and Ready")
    back = lines.recovery(rate=rate / 2, window=WINDOW, timeout=BACK_BOUND)
    # The StatefulSet creates the replacement once the old pod object is gone: Kubernetes' part of the
    # wait (a 1.20 kubelet removes the object only after its once-a-minute container GC took the
    # sandbox, docs/operations.md), the rest Squall's start. creationTimestamp has whole seconds.
    created = datetime.fromisoformat(replacement["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    figures.add(f"worker pod replaced (deleted, grace 1 s): new pod created {created.timestamp() - deleted_at:.0f} s "
                f"and Ready {ready:.1f} s after the delete, logcount back at >= half its {rate:.0f} lines acked/s "
                f"{back:.1f} s later ({WINDOW} s windows; bound {BACK_BOUND} s); longest stretch below half: "
                f"{lines.stall(since=killed, rate=rate / 2):.1f} s")

    wait_all_acked(kubectl, spout, "lines", LINES, timeout=LINES / RATE + 6 * TIMEOUT + 300,
                   what=f"all {LINES} lines acked")
    time.sleep(2 * TIMEOUT)  # a line acked twice would show up by now
    metrics = kubectl.metrics(spout)
    assert metrics.total("squall_acked_total", component="lines") == LINES, "every line acked exactly once"
    assert metrics.total("squall_failed_total", component="lines") > 0, (
        "no tree died with the pod: the kill tested nothing")
    after = kubectl.get("pod", spout)
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the spout's pod must survive the test"
    assert after["status"]["containerStatuses"][0]["restartCount"] == before["status"]["containerStatuses"][0][
        "restartCount"], "the spout's process restarted: its counters started over"
    replaced = kubectl.get("pod", victim["name"])
    assert replaced["metadata"]["uid"] != victim["uid"], "the StatefulSet brought the killed pod back"
    assert_all_processing(kubectl, "logcount")  # the replacement too, and its peers' links to it


def test_scaling_workers_from_2_to_3_acks_again_soon(kubectl: Kubectl, figures: Figures):
    sentences = Acked(kubectl, "wordcount", "sentences")
    rate = sentences.rate(2 * WINDOW)
    scaled = time.monotonic()
    kubectl("scale", "topology/wordcount", "--replicas=3")
    generation = kubectl.get("topology/wordcount")["metadata"]["generation"]

    def rolled_out() -> bool:
        topology = kubectl.get("topology/wordcount")
        status = topology["status"]
        return (status.get("observedGeneration") == generation and status.get("readyWorkers") == 3
                and any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
                and len(kubectl.pods("wordcount", "worker")) == 3
                and all(p["metadata"]["labels"].get("controller-revision-hash")
                        == kubectl.field("statefulset/wordcount-worker", "status", "updateRevision")
                        for p in kubectl.pods("wordcount", "worker")))

    ready = sentences.follow(rolled_out, timeout=600, what="wordcount rolled out on 3 workers and Ready")
    back = sentences.recovery(rate=rate / 2, window=WINDOW, timeout=BACK_BOUND)
    figures.add(f"rescale 2 -> 3 workers: Ready {ready:.1f} s after kubectl scale, wordcount back at >= half its "
                f"{rate:.0f} trees acked/s {back:.1f} s later ({WINDOW} s windows; bound {BACK_BOUND} s); longest "
                f"stretch below half: {sentences.stall(since=scaled, rate=rate / 2):.1f} s")
    assert len(kubectl.pods("wordcount", "acker")) == 3, "ackers: null means one acker per worker"
    after = sentences.rate(2 * WINDOW)
    figures.add(f"wordcount on 3 workers: {after:.0f} trees acked/s")
    assert after >= rate / 2, f"3 workers ack {after:.0f} trees/s, 2 acked {rate:.0f}"


def test_suspending_a_topology_stops_its_spouts_and_resuming_starts_them_again(kubectl: Kubectl, figures: Figures):
    """``spec.suspended`` reaches the worker processes at once, from the operator over their control
    channel: the spouts stop (no tree acked for a whole window) and start again well within the time
    the kubelet takes to update their mounted spec file (about a minute), with no pod replaced and
    the Topology Ready while suspended."""
    sentences = Acked(kubectl, "wordcount", "sentences")
    pods = {p["metadata"]["uid"] for p in kubectl.pods("wordcount", "worker")}

    def suspend(on: bool) -> float:
        kubectl("patch", "topology/wordcount", "--type=merge", "--patch", json.dumps({"spec": {"suspended": on}}))
        return time.monotonic()

    def quiet() -> bool:  # no tree acked during the last window of samples, every pod answering
        t, n = sentences.samples[-1]
        earlier = [(ts, ns) for ts, ns in sentences.samples if since <= ts <= t - WINDOW]
        return bool(earlier) and n == earlier[-1][1] and not sentences.unanswered

    since = suspend(True)
    stopped = sentences.follow(quiet, timeout=SUSPEND_BOUND, what="wordcount's spouts stopped: no tree acked for 5 s")
    topology = kubectl.get("topology/wordcount")
    assert topology["status"]["phase"] == "Suspended"
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in topology["status"]["conditions"]), (
        "a suspended topology's pods are ready: they run, and only their spouts wait")
    since = suspend(False)
    back = sentences.recovery(rate=100, window=WINDOW, timeout=SUSPEND_BOUND)
    figures.add(f"suspend: wordcount acked nothing for {WINDOW} s within {stopped:.1f} s of the patch; resumed at "
                f">= 100 trees acked/s {back:.1f} s after the next (bound {SUSPEND_BOUND} s each)")
    assert kubectl.get("topology/wordcount")["status"]["phase"] == "Running"
    assert {p["metadata"]["uid"] for p in kubectl.pods("wordcount", "worker")} == pods, "no pod was replaced"


def test_deleting_topologies_removes_their_pods(kubectl: Kubectl):
    kubectl("delete", "topology", "wordcount", "logcount", "--timeout=120s")
    selector = "app.kubernetes.io/instance in (wordcount,logcount)"
    for kind in ("pods", "statefulsets", "services", "configmaps"):
        eventually(lambda kind=kind: kubectl("get", kind, "--selector", selector, "--output", "name").strip() == "",
                   timeout=300, what=f"the topologies' {kind} to go")


def test_server_side_apply_keeps_another_managers_list_items_and_writes_nothing_again(kubectl: Kubectl):
    """The operator's apply as it writes on Kubernetes 1.25+: server-side applies (1.20 serves them
    too, and ignores ``fieldValidation``). An env var ``kubectl set env`` adds to a StatefulSet stays,
    and applying the same render again writes nothing (before, every resync applied it again, forever:
    the live list never matched the rendered one); a render without one of its own items is applied,
    and the API server removes that item and keeps the other manager's."""
    from kubernetes import config

    from squall_operator.apply import Kube, apply

    kube = Kube(config.new_client_from_config(str(kubectl.kubeconfig)), strict_apply=True)

    def stateful_set(*env: str) -> dict[str, Any]:
        meta = {"name": "ssa", "namespace": kubectl.namespace}
        return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
                "spec": {"replicas": 0, "serviceName": "ssa", "selector": {"matchLabels": {"app": "ssa"}},
                         "template": {"metadata": {"labels": {"app": "ssa"}}, "spec": {"containers": [
                             {"name": "c", "image": "squall:e2e", "env": [{"name": n, "value": "1"} for n in env]},
                         ]}}}}

    def live_env() -> list[str]:
        return [e["name"] for e in kubectl.field("statefulset/ssa", "spec", "template", "spec")["containers"][0]["env"]]

    try:
        assert apply(kube, [stateful_set("A", "C")], owned=lambda live: True).created == ["StatefulSet ssa"]
        kubectl("set", "env", "statefulset/ssa", "B=2")
        assert not apply(kube, [stateful_set("A", "C")], owned=lambda live: True).changed
        assert sorted(live_env()) == ["A", "B", "C"]
        assert apply(kube, [stateful_set("A")], owned=lambda live: True).patched == ["StatefulSet ssa"]
        assert sorted(live_env()) == ["A", "B"]
    finally:
        kubectl("delete", "statefulset", "ssa", "--ignore-not-found")


def test_a_spark_bolt_runs_its_jobs_on_executor_pods(kubectl: Kubectl, figures: Figures):
    start = time.monotonic()
    kubectl("apply", "--filename", str(MANIFESTS / "clickstream.yaml"))
    kubectl("wait", "--for=condition=Ready", "topology/clickstream", "--timeout=600s", timeout=660)
    (worker,) = (p["metadata"]["name"] for p in kubectl.pods("clickstream", "worker"))
    executors = "spark-role=executor,app.kubernetes.io/instance=clickstream"

    def running_executor() -> str | None:
        pods = kubectl.get("pods", "--selector", executors)["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running[0]["metadata"]["name"] if running else None

    executor = eventually(running_executor, timeout=300, what="a running Spark executor pod")
    owner = kubectl.get("pod", executor)["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Pod", worker), "executors are owned by their driver, the worker pod"

    wait_all_acked(kubectl, worker, "clicks", CLICKS, timeout=600, what=f"all {CLICKS} clicks acked through Spark")
    metrics = kubectl.metrics(worker)
    assert metrics.total("squall_acked_total", component="clicks") == CLICKS, "every click acked exactly once"
    assert metrics.total("squall_executed_total", component="print") > 0, "the batches' results reached the sink"
    figures.add(f"clickstream with its Spark bolt on an executor pod: {CLICKS} clicks acked "
                f"{time.monotonic() - start:.1f} s after the apply")
    kubectl("delete", "topology", "clickstream", "--timeout=120s")
    eventually(lambda: kubectl("get", "pods", "--selector", executors, "--output", "name").strip() == "",
               timeout=300, what="the executor pods to go with their driver")


def test_the_operator_never_restarted(operator: Kubectl):
    for pod in operator.get("pods", "--selector", "app.kubernetes.io/component=operator")["items"]:
        restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        assert restarts == 0, f"the operator restarted {restarts} times: kubectl --namespace " \
                              f"{operator.namespace} logs {pod['metadata']['name']} --previous"
