"""Helpers to run kopf, for real, against kmock's Kubernetes emulator (a real HTTP server with watches).

What kmock does not emulate, and how these tests stand in for it:

- **generateName, uid, generation, resourceVersion, creationTimestamp**: :class:`ApiServer` adds
  them on create, and bumps ``resourceVersion`` on every write and ``generation`` when a write
  changes ``spec``, as the API server does.
- **The StatefulSet controller and the kubelet's pod status**: no pods exist and no StatefulSet status
  is written; tests write the status the controller would (:func:`roll_out`) when a topology is to
  become ready, and the pods a kubelet would report (:func:`put_pod`) when a pod is to fail.
- **Garbage collection**: deleting a Topology leaves its children in place; tests assert the
  ownerReferences that make Kubernetes delete them.
- **The kubelet**: no ConfigMap reaches a pod; tests check the ConfigMap a worker would read.
- **CRD schema validation and defaulting**: the emulator stores any document; the CRD schema is
  tested on its own (test_crd.py), and the operator parses specs with Squall's model either way.
- **Subresources**: a patch of ``/status`` merges into the whole object, and ``/scale`` is not
  translated to ``spec.workers``; the operator writes only ``/status``, and tests scale by
  patching ``spec.workers``, which is what ``kubectl scale`` changes.
- **Label selectors on lists, strategic merge patches**: the operator needs neither (it reads
  children by name and writes JSON merge patches).
- **Server-side apply and the server's version**: ``/version`` says 1.20 unless a test sets
  ``server_version``; an apply patch (1.25 and later) creates a missing object and otherwise merges
  as a JSON merge patch would, without field ownership; ``fieldValidation`` is not enforced (the
  tests check the operator asks for it).
- **Namespaces as objects** (kmock cannot parse ``/api/v1/namespaces``): a namespaced operator
  watches its named namespaces without listing them, which is what the namespaced test runs.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
import kopf
import yaml
from kubernetes import client

from squall.process.supervisor import free_ports
from squall_operator import resource
from squall_operator.apply import APPLY_PATCH
from squall_operator.handlers import operate
from squall_operator.settings import Settings

NAMESPACE = "default"
EMULATED = "X-Emulated"  # marks the requests the emulator makes to itself (an apply's create)
DEADLINE = 15.0  # generous: every wait ends on its condition long before this
TOPOLOGIES = f"{resource.API_VERSION}/{resource.PLURAL}"
STATEFULSETS = "apps/v1/statefulsets"
CONFIGMAPS = "v1/configmaps"
SERVICES = "v1/services"
PODS = "v1/pods"
SECRETS = "v1/secrets"
LEASES = "coordination.k8s.io/v1/leases"
NETWORK_POLICIES = "networking.k8s.io/v1/networkpolicies"
PODMONITORS = "monitoring.coreos.com/v1/podmonitors"
# what a Topology's children are made of, for counting the writes to them
CHILD_PLURALS = {"configmaps", "services", "serviceaccounts", "statefulsets", "roles", "rolebindings", "podmonitors",
                 "secrets", "networkpolicies"}
WRITES = {kmock.method.POST, kmock.method.PATCH, kmock.method.PUT, kmock.method.DELETE}

SPEC: dict[str, Any] = {
    "workers": 2,
    "messageTimeoutSeconds": 20,
    "spouts": [{"name": "sentences", "className": "examples.wordcount:SentenceSpout"}],
    "bolts": [{"name": "split", "className": "examples.wordcount:SplitSentence", "parallelism": 2,
               "inputs": [{"component": "sentences"}]},
              {"name": "count", "className": "examples.wordcount:WordCount",
               "inputs": [{"component": "split", "grouping": {"type": "fields", "fields": ["word"]}}]}],
}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merged(base: Any, patch: Any) -> Any:
    """``base`` with the JSON merge patch ``patch`` applied."""
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return patch
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(out.get(key), value)
    return out


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    """kmock's emulator plus the metadata the API server adds to objects (see the module docstring)."""

    _versions: itertools.count = attrs.field(factory=lambda: itertools.count(1), init=False)
    server_version: tuple[int, int] = (1, 20)  # what /version says: the cluster here is 1.20

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for path in ("/version", "/version/"):  # the kubernetes client asks with the slash
            self[f"get {path}"] << (lambda _: {"major": str(self.server_version[0]),
                                               "minor": str(self.server_version[1]),
                                               "gitVersion": "v{}.{}.0".format(*self.server_version)})

    async def _handle(self, request: kmock.Request) -> Any:
        if request.method == kmock.method.PATCH and request.resource is not None and \
                request.headers.get("Content-Type", "").startswith(APPLY_PATCH):
            # server-side apply creates what is missing (otherwise it is emulated as a merge patch)
            key = (request.resource, request.namespace, request.name)
            if key not in self.objects or self.objects[key].deleted:
                created = await self.post(request.url.path.rsplit("/", 1)[0], json=request.data,
                                          headers={EMULATED: "apply"})
                return aiohttp.web.json_response(await created.json(), status=created.status)
        data = request.data
        if request.method in (kmock.method.PUT, kmock.method.PATCH) and isinstance(data, dict) and \
                request.resource is not None:
            # a write that carries the resourceVersion it read conflicts (409) with a write made since
            key = (request.resource, request.namespace, request.name)
            read = data.get("metadata", {}).get("resourceVersion")
            if key in self.objects and not self.objects[key].deleted and read is not None and \
                    read != self.objects[key].raw.get("metadata", {}).get("resourceVersion"):
                return aiohttp.web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                  "reason": "Conflict", "code": 409}, status=409)
        if request.resource is not None and isinstance(data, dict) and request.action in (
                kmock.action.CREATE, kmock.action.UPDATE):
            meta = data.setdefault("metadata", {})
            # kopf waits for the resourceVersion of its own patches before it handles the next change
            meta["resourceVersion"] = str(next(self._versions))
            if request.action == kmock.action.CREATE:
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("generation", 1)
                meta.setdefault("creationTimestamp", _now())
            elif request.action == kmock.action.UPDATE and request.subresource is None and "spec" in data:
                key = (request.resource, request.namespace, request.name)
                if key in self.objects and not self.objects[key].deleted:
                    live = self.objects[key].raw
                    if _merged(copy.deepcopy(live.get("spec")), data["spec"]) != live.get("spec"):
                        meta["generation"] = int(live.get("metadata", {}).get("generation") or 1) + 1
        return await super()._handle(request)


def declare_resources(api: ApiServer) -> None:
    """What kopf discovers: the Topology CRD, StatefulSets, ConfigMaps, Services, pods, namespaces and events."""
    verbs = {"get", "list", "watch", "create", "patch", "update", "delete"}
    api.resources[TOPOLOGIES] = kmock.ResourceInfo(
        kind=resource.KIND, singular=resource.SINGULAR, shortnames=set(resource.SHORT_NAMES), namespaced=True,
        subresources={"status", "scale"}, verbs=verbs)
    api.resources[STATEFULSETS] = kmock.ResourceInfo(
        kind="StatefulSet", singular="statefulset", namespaced=True, subresources={"status", "scale"}, verbs=verbs)
    # kopf waits for namespaces in discovery even when it watches every namespace
    api.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", singular="namespace", namespaced=False,
                                                        verbs={"get", "list", "watch"})
    api.resources["v1/events"] = kmock.ResourceInfo(kind="Event", singular="event", namespaced=True, verbs=verbs)
    for res, kind in ((CONFIGMAPS, "ConfigMap"), (SERVICES, "Service"), (SECRETS, "Secret")):  # watched: drift repair
        api.resources[res] = kmock.ResourceInfo(kind=kind, singular=kind.lower(), namespaced=True, verbs=verbs)
    api.resources[PODS] = kmock.ResourceInfo(kind="Pod", singular="pod", namespaced=True, subresources={"status"},
                                             verbs=verbs)
    api.resources[LEASES] = kmock.ResourceInfo(kind="Lease", singular="lease", namespaced=True, verbs=verbs)


def declare_podmonitors(api: ApiServer) -> None:
    """As if the prometheus-operator's PodMonitor CRD were installed."""
    api.resources[PODMONITORS] = kmock.ResourceInfo(kind="PodMonitor", singular="podmonitor", namespaced=True,
                                                    verbs={"get", "list", "watch", "create", "patch", "delete"})


def free_port() -> int:
    """A free port below the kernel's ephemeral range (``squall run``'s own): no connection of another
    test can take it before the server it is for binds it."""
    return free_ports(1)[0]


class OperatorThread:
    """The operator, as ``python -m squall_operator`` runs it, in its own thread and event loop (as in
    a pod), logged in to ``url``."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.left = threading.Event()  # the operator would have ended its process: it lost its Lease
        self.settings = dataclasses.replace(settings, liveness=f"http://127.0.0.1:{free_port()}/healthz",
                                            metrics_port=free_port())
        self.url = url
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="operator", daemon=True)

    def _run(self) -> None:
        registry = kopf.OperatorRegistry()

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=self.url)

        try:
            asyncio.run(operate(settings=self.settings, registry=registry,
                                api=client.ApiClient(client.Configuration(host=self.url)),
                                stop_flag=self.stop_flag, ready_flag=self.ready_flag, leave=self._leave))
        except BaseException as exc:  # raised again by stop(), in the test
            self.error = exc

    def _leave(self) -> None:
        # instead of ending the process (leader.leave), which would end the tests'
        self.left.set()
        self.stop_flag.set()

    async def start(self, *, ready: bool = True) -> None:
        """Start the thread; wait for kopf to run (``ready``: it leads)."""
        self.thread.start()
        if ready:
            assert await asyncio.to_thread(self.ready_flag.wait, DEADLINE), "the operator did not start"

    async def stop(self) -> None:
        self.stop_flag.set()
        # kopf waits for the handlers in flight (reconciles, the resync) before it returns
        await asyncio.to_thread(self.thread.join, 2 * DEADLINE)
        assert not self.thread.is_alive(), "the operator did not stop"
        if self.error is not None:
            raise self.error


async def eventually(what: str, check: Callable[[], Any], *, timeout: float = DEADLINE) -> Any:
    """Poll ``check`` until it returns something truthy, and return that; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    result: Any = None
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what} (last: {result!r})")


def obj(api: ApiServer, res: str, name: str, *, namespace: str = NAMESPACE) -> dict[str, Any] | None:
    """A copy of the live object, or None."""
    key = (kmock.resource(res), namespace, name)
    if key not in api.objects or api.objects[key].deleted:
        return None
    return copy.deepcopy(api.objects[key].raw)


def status(api: ApiServer, name: str) -> dict[str, Any]:
    return (obj(api, TOPOLOGIES, name) or {}).get("status") or {}


def condition(api: ApiServer, name: str, kind: str) -> dict[str, Any]:
    return next((c for c in status(api, name).get("conditions", ()) if c["type"] == kind), {})


def env(sts: dict[str, Any]) -> dict[str, str]:
    """A StatefulSet container's literal environment."""
    container = sts["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def spec_in_config_map(api: ApiServer, name: str) -> dict[str, Any]:
    """The topology spec the pods read (the mounted ConfigMap)."""
    cm = obj(api, CONFIGMAPS, f"{name}-spec")
    assert cm is not None
    return yaml.safe_load(cm["data"]["topology.yaml"])


def events(api: ApiServer, reason: str | None = None) -> list[dict[str, Any]]:
    """The Events posted so far (oldest first), optionally with one reason."""
    found = [o.raw for (res, _, _), o in api.objects.items() if res.plural == "events" and not o.deleted]
    return [e for e in found if reason is None or e.get("reason") == reason]


def mark(api: ApiServer) -> int:
    """A position in the request log, for :func:`writes_since`."""
    return len(api)


def writes_since(api: ApiServer, position: int, plurals: set[str] = CHILD_PLURALS) -> list[str]:
    """The writes (create, patch, delete) to objects of ``plurals`` since ``position``."""
    return [f"{r.method.value} {r.url.path}" for r in list(api)[position:]
            if r.method in WRITES and r.resource is not None and r.resource.plural in plurals]


async def create_topology(api: ApiServer, name: str, spec: dict[str, Any], *,
                          namespace: str = NAMESPACE) -> dict[str, Any]:
    body = {"apiVersion": resource.API_VERSION, "kind": resource.KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    response = await api.post(f"/apis/{resource.API_VERSION}/namespaces/{namespace}/{resource.PLURAL}", json=body)
    assert response.status == 200, await response.text()
    return await response.json()


async def patch(api: ApiServer, res: str, name: str, body: dict[str, Any], *, subresource: str = "") -> None:
    """A JSON merge patch over HTTP (so that watchers see it)."""
    group_version, plural = res.rsplit("/", 1)
    prefix = "/api" if group_version == "v1" else "/apis"
    path = f"{prefix}/{group_version}/namespaces/{NAMESPACE}/{plural}/{name}" + (f"/{subresource}" if subresource
                                                                                 else "")
    response = await api.patch(path, json=body, headers={"Content-Type": "application/merge-patch+json"})
    assert response.status == 200, await response.text()


async def patch_spec(api: ApiServer, name: str, spec: dict[str, Any]) -> None:
    await patch(api, TOPOLOGIES, name, {"spec": spec})


async def roll_out(api: ApiServer, name: str, *, ready: int | None = None) -> None:
    """Write the status the StatefulSet controller would once its pods run the current template
    (``ready`` of them ready; all by default)."""
    sts = obj(api, STATEFULSETS, name)
    assert sts is not None, f"no StatefulSet {name}"
    replicas = sts["spec"]["replicas"]
    revision = f"{name}-{sts['spec']['template']['metadata']['annotations']['squall.dev/template-hash']}"
    await patch(api, STATEFULSETS, name, {"status": {
        "observedGeneration": sts["metadata"]["generation"], "replicas": replicas,
        "readyReplicas": replicas if ready is None else ready, "updatedReplicas": replicas,
        "currentReplicas": replicas, "availableReplicas": replicas if ready is None else ready,
        "currentRevision": revision, "updateRevision": revision}}, subresource="status")


async def put_pod(api: ApiServer, name: str, topology: str, pod_status: dict[str, Any], *,
                  metrics_port: int = 9090, grpc_port: int | None = None) -> None:
    """Create or replace pod ``name`` of ``topology`` with the status a kubelet would report, made from its
    StatefulSet's template as it is now (its annotations), as the StatefulSet controller would."""
    labels = {"app.kubernetes.io/name": "squall", "app.kubernetes.io/instance": topology,
              "app.kubernetes.io/managed-by": "squall-operator"}
    sts = obj(api, STATEFULSETS, name.rsplit("-", 1)[0])
    annotations = sts["spec"]["template"]["metadata"].get("annotations", {}) if sts else {}
    ports = [{"name": "metrics", "containerPort": metrics_port}]
    if grpc_port is not None:
        ports.append({"name": "grpc", "containerPort": grpc_port})
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "worker", "image": "squall:test", "ports": ports}]},
            "status": pod_status}
    if obj(api, PODS, name) is None:
        response = await api.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=body)
        assert response.status == 200, await response.text()
    else:
        await patch(api, PODS, name, {"status": None})
        await patch(api, PODS, name, {"status": pod_status})


def logged(records: list[logging.LogRecord], text: str, since: int = 0) -> bool:
    return any(text in r.getMessage() for r in records[since:])
