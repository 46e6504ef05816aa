"""Operator failover: how long after the leading operator replica is killed does another one reconcile a
change, with Squall's Lease election (``squall_operator/leader.py``, as shipped) and with kopf's peering?

Against the cluster of ``$KUBECONFIG``, in a namespace of its own (``squall-bench-failover``, made
afresh and deleted at the end; the Topology and KopfPeering CRDs it applies stay), two operator
candidates run as local processes in each mode:

- ``lease``: ``python -m squall_operator`` with ``SQUALL_OPERATOR_LEASE``, its timings as shipped (a
  Lease of 8 s, renewed every 2 s);
- ``peering-LIFETIME`` (by default 60 s, kopf's default; 15 s; and 8 s, the Lease's duration): kopf's own
  peering (a ``KopfPeering`` and its CRD, from kopf's docs, applied by the bench), through kopf's settings
  (``settings.peering``: name, priority, lifetime; mandatory) in a process that registers Squall's
  handlers (``squall_operator.handlers``) and runs kopf as ``operate`` does, without the election, the
  webhook and the probes. Each new candidate gets a lower priority than the ones before it, so that it
  waits rather than pausing the leader (kopf pauses every operator when two have the same priority).

Each trial waits a random part of the leader's refresh period (so that the kill falls anywhere between
two renewals or keep-alives), SIGKILLs the leader, patches the Topology's workers (1 ↔ 2) at once, and
measures from the kill until the other candidate says it leads (its log) and until the worker
StatefulSet carries the new replicas (its reconcile applied the change); then a new candidate is
started in place of the killed one, as a pod's restart would, and waits in its turn. The Topology's
pods never run (a nodeSelector no node has, an image never pulled): what is measured is the operators'.
Every mode runs the resync once an hour, so that only a takeover reconciles the change (with peering,
Squall's resync, which runs beside kopf's watches, would go on in a paused replica).

    python bench/failover.py [--trials 5] [--modes lease,peering-60,peering-15,peering-8]

With 5 trials, about a minute and a half per mode, and 5 min for ``peering-60``. A benchmark prints
figures and never fails.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from squall.process.supervisor import free_ports  # noqa: E402
from squall_operator.leader import LeaseTimes  # noqa: E402

NAMESPACE = "squall-bench-failover"
TOPOLOGY = "failover"
LEASE = "squall-bench"
PEERING = "squall-bench"
TOPOLOGY_CRD = REPO / "charts" / "squall" / "crds" / "topology.yaml"
# kopf's docs ("Peering"): the namespaced peering resource, its status kept by the operators
PEERING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "kopfpeerings.kopf.dev"},
    "spec": {"scope": "Namespaced", "group": "kopf.dev",
             "names": {"kind": "KopfPeering", "plural": "kopfpeerings", "singular": "kopfpeering"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {
                     "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}
# what a candidate logs once it leads: Squall's election, or kopf's peering, which starts paused
LEADING = {"lease": "leading: holding the Lease", "peering": "Resuming operations after the pause"}
WAITING_FOR_LEASE = "not leading: the Lease"
START_TIMEOUT = 120.0  # seconds for a candidate to start and lead or wait (its imports, kopf's start)
POLL = 0.1


@dataclass(frozen=True)
class Mode:
    name: str
    lifetime: int | None  # kopf's peering lifetime; None: Squall's Lease

    @property
    def kind(self) -> str:
        return "lease" if self.lifetime is None else "peering"

    @property
    def period(self) -> float:
        """The longest time between two renewals (the Lease's retry) or keep-alives (kopf: lifetime − 5..10)."""
        return LeaseTimes().retry if self.lifetime is None else float(max(1, self.lifetime - 5))

    @property
    def takeover_timeout(self) -> float:
        return 60.0 + (2 * self.lifetime if self.lifetime else 30.0)

    @property
    def label(self) -> str:
        if self.lifetime is None:
            times = LeaseTimes()
            return f"Squall's Lease ({times.duration:.0f} s, renewed every {times.retry:.0f} s)"
        return f"kopf peering, lifetime {self.lifetime} s" + (" (default)" if self.lifetime == 60 else "")


MODES = "lease,peering-60,peering-15,peering-8"  # kopf's default lifetime, a short one, and the Lease's 8 s


def parse_mode(name: str) -> Mode:
    """``lease``, or ``peering-LIFETIME`` (seconds)."""
    kind, _, lifetime = name.partition("-")
    if name == "lease":
        return Mode(name, None)
    if kind == "peering" and lifetime.isdigit() and int(lifetime) >= 1:
        return Mode(name, int(lifetime))
    raise argparse.ArgumentTypeError(f"{name!r}: a mode is lease or peering-LIFETIME (seconds), e.g. peering-15")


@dataclass
class Candidate:
    """One operator replica: a local process, its log in a file."""

    process: subprocess.Popen
    log: Path
    kind: str
    name: str  # its peer's identity (kopf's POD_ID)

    def said(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")

    def leads(self) -> bool:
        return self.said(LEADING[self.kind])

    def waits(self, cluster: Cluster) -> bool:
        """Whether it runs and waits: a Lease's candidate says so; a peer, which kopf starts paused when the
        peering is mandatory and leaves so silently, has written its keep-alive into the peering."""
        if self.leads():
            return False
        return self.said(WAITING_FOR_LEASE) if self.kind == "lease" else self.name in cluster.peers()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 15) -> str:
        return "\n".join(f"    {line[:240]}" for line in self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Trial:
    leading: float | None  # seconds from the kill until the other candidate said it leads
    reconciled: float | None  # ... until the worker StatefulSet carried the change


@dataclass
class Cluster:
    """The bench's namespace, CRDs and Topology, through the ``kubernetes`` client."""

    api: client.ApiClient
    objects: client.CustomObjectsApi = field(init=False)
    apps: client.AppsV1Api = field(init=False)
    core: client.CoreV1Api = field(init=False)

    def __post_init__(self) -> None:
        self.objects = client.CustomObjectsApi(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.core = client.CoreV1Api(self.api)

    def prepare(self) -> None:
        self.delete_namespace()
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        for crd in (yaml.safe_load(TOPOLOGY_CRD.read_text()), PEERING_CRD):
            self.apply_crd(crd)

    def apply_crd(self, crd: dict[str, Any]) -> None:
        extensions = client.ApiextensionsV1Api(self.api)
        name = crd["metadata"]["name"]
        try:
            extensions.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
            live = extensions.read_custom_resource_definition(name)
            crd = {**crd, "metadata": {**crd["metadata"], "resourceVersion": live.metadata.resource_version}}
            extensions.replace_custom_resource_definition(name, crd)
        until(lambda: any(c.type == "Established" and c.status == "True" for c in
                          extensions.read_custom_resource_definition(name).status.conditions or ()),
              60, f"the CRD {name} established")

    def delete_namespace(self) -> None:
        try:
            self.core.delete_namespace(NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise
        until(lambda: not self.exists(), 180, f"the namespace {NAMESPACE} deleted")

    def exists(self) -> bool:
        try:
            self.core.read_namespace(NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def fresh_mode(self) -> None:
        """No Lease, a KopfPeering with no peers in it, and the Topology at 1 worker."""
        for delete in (lambda: client.CoordinationV1Api(self.api).delete_namespaced_lease(LEASE, NAMESPACE),
                       lambda: self.objects.delete_namespaced_custom_object(
                           "kopf.dev", "v1", NAMESPACE, "kopfpeerings", PEERING),
                       lambda: self.objects.delete_namespaced_custom_object(
                           "squall.dev", "v1alpha1", NAMESPACE, "topologies", TOPOLOGY)):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise
        until(lambda: self.replicas() is None, 60, "the last mode's StatefulSet deleted")
        self.objects.create_namespaced_custom_object("kopf.dev", "v1", NAMESPACE, "kopfpeerings", {
            "apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}})
        self.objects.create_namespaced_custom_object("squall.dev", "v1alpha1", NAMESPACE, "topologies", topology())

    def peers(self) -> set[str]:
        """The identities in the KopfPeering's status: every peer whose keep-alive has not expired or been cleaned."""
        peering = self.objects.get_namespaced_custom_object("kopf.dev", "v1", NAMESPACE, "kopfpeerings", PEERING)
        return set(peering.get("status") or {})

    def scale(self, workers: int) -> None:
        self.objects.patch_namespaced_custom_object("squall.dev", "v1alpha1", NAMESPACE, "topologies", TOPOLOGY,
                                                    {"spec": {"workers": workers}})

    def replicas(self) -> int | None:
        """The worker StatefulSet's spec.replicas (None: there is none)."""
        try:
            return self.apps.read_namespaced_stateful_set(f"{TOPOLOGY}-worker", NAMESPACE).spec.replicas
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


def topology() -> dict[str, Any]:
    """A Topology whose pods are never scheduled, and whose rescale applies at once (Recreate: no drain)."""
    nowhere = {"spec": {"nodeSelector": {"squall.dev/bench": "nowhere"}}}
    return {"apiVersion": "squall.dev/v1alpha1", "kind": "Topology", "metadata": {"name": TOPOLOGY},
            "spec": {"workers": 1, "ackers": 0, "upgradeStrategy": "Recreate", "image": "squall:bench-never-pulled",
                     "podTemplate": {"workers": nowhere, "ackers": nowhere},
                     "spouts": [{"name": "sentences", "className": "examples.wordcount:SentenceSpout"}],
                     "bolts": [{"name": "split", "className": "examples.wordcount:SplitSentence",
                                "inputs": [{"component": "sentences", "grouping": {"type": "shuffle"}}]}]}}


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(POLL)
    raise TimeoutError(f"waited {timeout:.0f} s for {what}")


def start(mode: Mode, logs: Path, number: int) -> Candidate:
    """Candidate ``number`` of ``mode``: the operator's entrypoint with a Lease, or kopf's peering with
    priority 1000 − ``number`` (each later one below every earlier one)."""
    name = f"candidate-{number}"
    liveness, metrics = free_ports(2)
    env = os.environ | {"SQUALL_OPERATOR_NAMESPACES": NAMESPACE, "SQUALL_OPERATOR_POD_NAMESPACE": NAMESPACE,
                        "SQUALL_OPERATOR_RESYNC_SECONDS": "3600", "SQUALL_OPERATOR_LOG_LEVEL": "INFO",
                        "SQUALL_OPERATOR_LIVENESS": f"http://127.0.0.1:{liveness}/healthz",
                        "SQUALL_OPERATOR_METRICS_PORT": str(metrics), "POD_ID": name}
    if mode.lifetime is None:
        command = [sys.executable, "-m", "squall_operator"]
        env["SQUALL_OPERATOR_LEASE"] = LEASE
    else:
        command = [sys.executable, str(Path(__file__).resolve()), "--peer", f"{mode.lifetime},{1000 - number}"]
    log = logs / f"{mode.name}-{number}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    return Candidate(process, log, mode.kind, name)


def run_peer(lifetime: int, priority: int) -> None:
    """A candidate of the peering modes: Squall's handlers in kopf, with kopf's peering instead of the Lease."""
    import kopf

    from squall_operator import handlers
    from squall_operator.__main__ import api_client
    from squall_operator.settings import Settings

    settings = Settings.from_env()
    api = api_client()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(kopf.login_via_client)
    handlers.register(registry, settings=settings, api=api)
    peered = handlers.kopf_settings(settings, api)
    peered.peering.standalone = False
    peered.peering.mandatory = True
    peered.peering.clusterwide = False
    peered.peering.name = PEERING
    peered.peering.priority = priority
    peered.peering.lifetime = lifetime
    asyncio.run(kopf.operator(registry=registry, settings=peered, clusterwide=False,
                              namespaces=list(settings.namespaces)))


def run_mode(cluster: Cluster, mode: Mode, trials: int, logs: Path) -> list[Trial]:
    cluster.fresh_mode()
    numbers = iter(range(1000))
    candidates: list[Candidate] = []

    def started() -> Candidate:
        candidates.append(start(mode, logs, next(numbers)))
        return candidates[-1]

    workers, results = 1, []
    try:
        leader = started()
        until(leader.leads, START_TIMEOUT, "the first candidate to lead")
        until(lambda: cluster.replicas() == 1, START_TIMEOUT, "the first candidate's reconcile of the Topology")
        standby = started()
        until(functools.partial(standby.waits, cluster), START_TIMEOUT, "the second candidate to wait")
        for trial in range(1, trials + 1):
            time.sleep(random.uniform(0, mode.period))
            workers = 3 - workers
            leader.kill()
            killed = time.monotonic()
            cluster.scale(workers)
            leading = reconciled = None
            deadline = killed + mode.takeover_timeout
            while time.monotonic() < deadline and reconciled is None:
                if leading is None and standby.leads():
                    leading = time.monotonic() - killed
                if cluster.replicas() == workers:
                    reconciled = time.monotonic() - killed
                    if leading is None and standby.leads():
                        leading = reconciled
                time.sleep(POLL)
            results.append(Trial(leading, reconciled))
            print(f"  {mode.name} trial {trial}: leading after {seconds(leading)}, "
                  f"the rescale to {workers} applied after {seconds(reconciled)}", flush=True)
            if reconciled is None:
                raise TimeoutError(f"no takeover within {mode.takeover_timeout:.0f} s")
            leader, standby = standby, started()
            until(functools.partial(standby.waits, cluster), START_TIMEOUT, "the new candidate to wait")
    except TimeoutError as exc:
        print(f"  {mode.name}: {exc}; its candidates' logs end:", flush=True)
        for candidate in candidates:
            print(f"  {candidate.name}:\n{candidate.tail()}", flush=True)
    finally:
        for candidate in candidates:
            candidate.stop()
    return results


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def figures(values: list[float]) -> str:
    if not values:
        return f"{'—':>7} {'—':>6} {'—':>6}"
    return f"{statistics.median(values):7.1f} {min(values):6.1f} {max(values):6.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5, help="kills of the leader per mode (default 5)")
    parser.add_argument("--modes", type=lambda names: [parse_mode(name) for name in names.split(",") if name],
                        default=MODES, help=f"comma-separated: lease, peering-LIFETIME (default {MODES})")
    parser.add_argument("--peer", help=argparse.SUPPRESS)  # LIFETIME,PRIORITY: run as a peering candidate
    args = parser.parse_args()
    if args.peer:
        lifetime, priority = (int(part) for part in args.peer.split(","))
        run_peer(lifetime, priority)
        return 0
    modes = args.modes
    try:
        config.load_kube_config()
    except (config.ConfigException, OSError) as exc:
        print(f"failover.py: no cluster to run against ({exc}): set KUBECONFIG to a cluster's kubeconfig "
              "(k8s-local: export KUBECONFIG=/var/lib/k8s-local/admin.kubeconfig)", file=sys.stderr)
        return 2
    cluster = Cluster(client.ApiClient())
    host = cluster.api.configuration.host
    try:
        version = client.VersionApi(cluster.api).get_code(_request_timeout=10).git_version
    except Exception as exc:  # noqa: BLE001 - urllib3's and the API's errors alike: no cluster to measure
        print(f"failover.py: the cluster at {host} ($KUBECONFIG) does not answer: {exc}", file=sys.stderr)
        return 2
    print(f"cluster {host}, Kubernetes {version}; load average {os.getloadavg()[0]:.2f}", flush=True)
    cluster.prepare()
    results: dict[str, list[Trial]] = {}
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
        try:
            for mode in modes:
                begun = time.monotonic()
                results[mode.name] = run_mode(cluster, mode, args.trials, Path(tmp))
                print(f"  {mode.name}: {time.monotonic() - begun:.0f} s", flush=True)
        finally:
            cluster.delete_namespace()
    print()
    print(f"{'mode':<42} {'trials':>6}  {'kill → leading, s':>22}  {'kill → change reconciled, s':>22}")
    print(f"{'':<42} {'':>6}  {'median':>7} {'min':>6} {'max':>6}  {'median':>7} {'min':>6} {'max':>6}")
    for mode in modes:
        trials = results.get(mode.name, [])
        leading = [t.leading for t in trials if t.leading is not None]
        reconciled = [t.reconciled for t in trials if t.reconciled is not None]
        print(f"{mode.label:<42} {len(reconciled):>3}/{len(trials):<2}  {figures(leading)}  {figures(reconciled)}")
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared with other work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
