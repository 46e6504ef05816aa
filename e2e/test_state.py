"""Stateful bolts on a real Kubernetes: a word count whose counts live in a StatefulBolt's checkpointed
state, on the claim every worker pod of the Topology mounts, keeps every word at least once (exactly
once with ``topology.state.guarantee: exactly_once``) while a worker pod is deleted and the Topology is
rescaled 2 -> 3 -> 2 under load, refuses a change of its stateful bolt's tasks, and resumes its state when
it is deleted and applied again under the same name.

The clusters the suite runs on (kind, k8s-local) have no provisioner for the claim's class, so the test
makes its PersistentVolume: a hostPath directory on the node (one node: a ReadWriteOnce volume that
every worker pod mounts), made writable for the pods' user by a pod that runs as root.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from kube import Figures, Kubectl, eventually

MANIFEST = Path(__file__).parent / "manifests" / "statefulwc.yaml"
TOPOLOGY = yaml.safe_load(MANIFEST.read_text())
NAME = TOPOLOGY["metadata"]["name"]
SPEC = TOPOLOGY["spec"]
CLAIM = f"{NAME}-state"
STATE_DIR = "/var/lib/squall/state"  # squall.contract.STATE_MOUNT, where the log is too
LOG = SPEC["spouts"][0]["config"]["log.path"]
TOPIC = SPEC["spouts"][0]["config"]["log.topic"]
GROUP = SPEC["spouts"][0]["config"]["log.group"]
COUNT = "count"  # the stateful bolt
TASKS = next(b["tasks"] for b in SPEC["bolts"] if b["name"] == COUNT)
NODE_DIR = "/var/tmp/squall-e2e"  # on the node: each run's volume is a directory below it
USER = 10001  # the image's user, the pods'
WORDS = [f"w{i:02d}" for i in range(40)]
SENTENCES_PER_CHUNK = 200
ROLLOUT = 600  # seconds for a rescale or a replaced pod to be Ready

# Run in a worker pod: the true word counts of every sentence in the log, the counts committed in the
# count bolt's state (a SQLite file per task, read with the embedded store itself), and the spouts'
# committed offsets against the log's end.
READ = f"""
import collections, glob, json
from pathlib import Path
from squall.spouts.log import DurableLog
from squall.state.stores import SqliteStore
log = DurableLog({LOG!r})
true, ends = collections.Counter(), {{}}
for p in range(log.partition_count({TOPIC!r})):
    ends[p], offset = log.watermarks({TOPIC!r}, p)[1], 0
    while batch := log.read({TOPIC!r}, p, offset, 10000):
        for record in batch:
            true.update(record.value.split())
        offset = batch[-1].offset + 1
state, files = collections.Counter(), sorted(glob.glob({STATE_DIR!r} + "/{NAME}/{COUNT}-*.db"))
for name in files:
    state.update(SqliteStore(Path(name)).load()[1])
committed = {{p: c.offset for p, c in log.committed({GROUP!r}, {TOPIC!r}).items()}}
print(json.dumps({{"true": true, "state": state, "files": files, "ends": ends, "committed": committed}}))
"""


def sentences(chunk: int) -> str:
    """Chunk ``chunk`` of the log, as JSON lines (``squall log produce``): sentences of 2 to 7 words."""
    lines = []
    for i in range(SENTENCES_PER_CHUNK):
        n = chunk * SENTENCES_PER_CHUNK + i
        lines.append(json.dumps(" ".join(WORDS[(n * 7 + j * 13) % len(WORDS)] for j in range(2 + n % 6))))
    return "\n".join(lines) + "\n"


def worker(index: int) -> str:
    return f"{NAME}-worker-{index}"


def read_state(kubectl: Kubectl) -> dict:
    return json.loads(kubectl("exec", worker(0), "--container", "worker", "--", "python", "-c", READ,
                              timeout=120))


def ready(kubectl: Kubectl, workers: int) -> bool:
    """The latest spec applied, ``workers`` ready worker pods all made from the StatefulSet's latest revision."""
    topology = kubectl.get(f"topology/{NAME}")
    status = topology.get("status") or {}
    pods = kubectl.pods(NAME, "worker")
    revision = kubectl.field(f"statefulset/{NAME}-worker", "status", "updateRevision")
    return (status.get("observedGeneration") == topology["metadata"]["generation"]
            and status.get("readyWorkers") == workers and len(pods) == workers
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
            and all(p["metadata"]["labels"].get("controller-revision-hash") == revision for p in pods))


class Producer(threading.Thread):
    """Appends a chunk of sentences to the log every ``every`` seconds, through whichever worker pod
    answers (``squall log produce`` in it: the log is on the claim). A chunk whose produce failed is tried
    again: the truth is read from the log at the end, whatever reached it."""

    def __init__(self, kubectl: Kubectl, *, every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.kubectl, self.every = kubectl, every
        self.chunks, self.failures = 0, 0
        self.error: Exception | None = None  # the last failure
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            for index in (0, 1):  # worker-0 is never deleted here; worker-1 stands in while it switches
                try:
                    self.kubectl("exec", "--stdin", worker(index), "--container", "worker", "--",
                                 "squall", "log", "produce", LOG, "--topic", TOPIC, stdin=sentences(self.chunks),
                                 timeout=60)
                except (AssertionError, OSError) as exc:  # a pod switching or starting; the API server busy
                    self.failures += 1
                    self.error = exc
                    continue
                self.chunks += 1
                break

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=120)


def prepare_volume(kubectl: Kubectl, directory: str) -> None:
    """The hostPath directory of the claim's PersistentVolume, owned by the pods' user, with the log's topic
    made (two partitions, one per spout task), by a pod that runs as root; then the PersistentVolume,
    bound in advance to the claim the operator makes."""
    prep = f"{NAME}-prepare"
    script = (f"mkdir -p /node/{directory} && python -c 'from squall.spouts.log import DurableLog; "
              f"DurableLog(\"/node/{directory}/{Path(LOG).name}\", create=True).create_topic(\"{TOPIC}\", "
              f"partitions=2)' && chown -R {USER}:{USER} /node/{directory}")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": prep},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "prepare", "image": "squall-topologies:e2e", "imagePullPolicy": "Never",
               "command": ["sh", "-c", script], "securityContext": {"runAsUser": 0},
               "volumeMounts": [{"name": "node", "mountPath": "/node"}]}],
               "volumes": [{"name": "node", "hostPath": {"path": NODE_DIR, "type": "DirectoryOrCreate"}}]}}
    kubectl("delete", "pod", prep, "--ignore-not-found", "--wait=true")
    kubectl("apply", "--filename", "-", stdin=json.dumps(pod))
    def prepared() -> bool:
        phase = kubectl.field(f"pod/{prep}", "status", "phase")
        if phase == "Failed":  # not worth waiting for
            raise RuntimeError(f"preparing the volume failed: {kubectl('logs', prep)}")
        return phase == "Succeeded"

    eventually(prepared, timeout=300, what="the volume's directory prepared")
    kubectl("delete", "pod", prep, "--wait=false")
    volume = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": directory},
              "spec": {"capacity": {"storage": SPEC["state"]["size"]}, "accessModes": ["ReadWriteOnce"],
                       "persistentVolumeReclaimPolicy": "Retain",
                       "storageClassName": SPEC["state"]["storageClassName"],
                       "claimRef": {"namespace": kubectl.namespace, "name": CLAIM},
                       "hostPath": {"path": f"{NODE_DIR}/{directory}", "type": "Directory"}}}
    kubectl("apply", "--filename", "-", stdin=json.dumps(volume))


def at_least_once(state: dict) -> str | None:
    """Why the committed counts are not yet every word of the log at least once (None: they are)."""
    short = {w: (state["state"].get(w, 0), n) for w, n in state["true"].items() if state["state"].get(w, 0) < n}
    behind = {p: (state["committed"].get(p), end) for p, end in state["ends"].items()
              if state["committed"].get(p) != end}
    if not short and not behind:
        return None
    return f"words under their true count (committed, true): {short}; spout offsets behind (committed, end): {behind}"


def counted(kubectl: Kubectl, *, timeout: float) -> dict:
    """The state once every record of the log is counted at least once, and the spouts committed it all."""
    last: dict = {}

    def done() -> bool:
        last.update(read_state(kubectl))
        return at_least_once(last) is None

    try:
        eventually(done, timeout=timeout, what="every word of the log counted at least once", every=5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {at_least_once(last) if last else 'the state was never read'}") from None
    return last


@pytest.fixture
def volume(kubectl: Kubectl):
    directory = f"squall-e2e-{NAME}-{time.strftime('%Y%m%d-%H%M%S')}"
    prepare_volume(kubectl, directory)
    yield directory
    kubectl("delete", "topology", NAME, "--ignore-not-found", "--timeout=120s")
    kubectl("delete", "pvc", CLAIM, "--ignore-not-found", "--timeout=120s")
    kubectl("delete", "pv", directory, "--ignore-not-found", "--timeout=120s")


def apply(kubectl: Kubectl, guarantee: str) -> None:
    """The manifest's Topology, its state's guarantee ``guarantee``."""
    doc = json.loads(json.dumps(TOPOLOGY))
    doc["spec"]["config"]["topology.state.guarantee"] = guarantee
    kubectl("apply", "--filename", "-", stdin=json.dumps(doc))


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_stateful_word_count_counts_every_word_through_a_pod_deletion_and_rescales(
        kubectl: Kubectl, volume: str, figures: Figures, guarantee: str):
    """At least once, every word of the log is in the committed counts once or more; exactly once, once."""
    start = time.monotonic()
    apply(kubectl, guarantee)
    eventually(lambda: ready(kubectl, 2), timeout=ROLLOUT, what=f"{NAME} Ready on 2 workers")
    claim = kubectl.get("pvc", CLAIM)
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == volume
    assert not claim["metadata"].get("ownerReferences"), "kept when the Topology goes: no owner"
    figures.add(f"stateful word count ({guarantee}) Ready on 2 workers {time.monotonic() - start:.1f} s after the "
                "apply")

    producer = Producer(kubectl)
    producer.start()
    try:
        eventually(lambda: producer.chunks >= 5, timeout=120, what="sentences flowing")
        eventually(lambda: sum(read_state(kubectl)["state"].values()) > 0, timeout=120, what="a first commit")

        victim = kubectl.get("pod", worker(1))["metadata"]
        kubectl("delete", "pod", victim["name"], "--grace-period=1", "--wait=false")
        began = time.monotonic()
        eventually(lambda: kubectl.get("pod", victim["name"])["metadata"]["uid"] != victim["uid"]
                   and ready(kubectl, 2), timeout=ROLLOUT, what="the deleted worker pod replaced and Ready")
        replaced = time.monotonic() - began

        for workers in (3, 2):
            began = time.monotonic()
            kubectl("scale", f"topology/{NAME}", f"--replicas={workers}")
            eventually(lambda workers=workers: ready(kubectl, workers), timeout=ROLLOUT,
                       what=f"{NAME} rescaled to {workers} workers and Ready")
            figures.add(f"stateful word count rescaled to {workers} workers: Ready "
                        f"{time.monotonic() - began:.1f} s after kubectl scale")
        time.sleep(10)  # sentences on 2 workers again
    finally:
        producer.stop()
    assert producer.chunks >= 10, (f"only {producer.chunks} chunks produced ({producer.failures} failed, the "
                                   f"last: {producer.error})")

    # A change of the stateful bolt's tasks is refused: by the admission webhook, else by the operator
    refusal = f"stateful bolt '{COUNT}' runs {TASKS} task(s) and the new spec gives it {TASKS + 2}"
    bolts = [dict(b, tasks=TASKS + 2) if b["name"] == COUNT else b for b in SPEC["bolts"]]
    try:
        kubectl("patch", f"topology/{NAME}", "--type=merge", "--patch", json.dumps({"spec": {"bolts": bolts}}))
    except AssertionError as exc:
        assert refusal in str(exc), exc
    else:
        eventually(lambda: refusal in json.dumps(kubectl.field(f"topology/{NAME}", "status", "conditions")),
                   timeout=120, what="the operator refusing the change of the stateful bolt's tasks")
        kubectl("patch", f"topology/{NAME}", "--type=merge", "--patch", json.dumps({"spec": {"bolts": SPEC["bolts"]}}))

    began = time.monotonic()
    state = counted(kubectl, timeout=300)
    true, total = sum(state["true"].values()), sum(state["state"].values())
    assert len(state["files"]) == TASKS, f"a store per task of {COUNT}: {state['files']}"
    if guarantee == "exactly_once":
        over = {w: (state["state"].get(w, 0), n) for w, n in state["true"].items() if state["state"].get(w, 0) != n}
        assert not over and set(state["state"]) == set(state["true"]), f"not exactly once (committed, true): {over}"
    figures.add(f"stateful word count ({guarantee}): {sum(state['ends'].values())} sentences "
                f"({producer.chunks} chunks, produced while worker-1 was deleted (replaced and Ready in "
                f"{replaced:.1f} s) and the Topology rescaled 2 -> 3 -> 2) counted at least once "
                f"{time.monotonic() - began:.1f} s after the last; "
                f"{total} words in the committed state for {true} in the log ({total - true} counted more than "
                f"once, {100 * (total - true) / true:.2f} %)")

    # Deleted and applied again under the same name: the claim stayed, and the state resumes from it.
    kubectl("delete", "topology", NAME, "--timeout=120s")
    eventually(lambda: not kubectl.pods(NAME, "worker"), timeout=300, what="the worker pods gone")
    assert kubectl.get("pvc", CLAIM)["metadata"]["uid"] == claim["metadata"]["uid"], "the claim was kept"
    apply(kubectl, guarantee)
    eventually(lambda: ready(kubectl, 2), timeout=ROLLOUT, what=f"{NAME} Ready again")
    again = read_state(kubectl)
    lost = {w: (again["state"].get(w, 0), n) for w, n in state["state"].items() if again["state"].get(w, 0) < n}
    assert not lost, f"the state did not resume as committed (now, before): {lost}"
