"""A topology's Kubernetes objects, rendered by pure functions: spec in, manifests (plain dicts) out.

Nothing here talks to a cluster, so ``squall render`` prints exactly what the operator applies (less
the ownerReferences, which need the Topology's uid). Manifests hold no nulls, no empty lists and no
empty maps but ``emptyDir: {}``: the API server drops those, and the operator compares what it
renders with what it reads back.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from squall import contract
from squall.contract import (
    ACKER,
    GRPC_PORT,
    GRPC_PORT_NAME,
    HEALTH_PATH,
    METRICS_PATH,
    METRICS_PORT,
    METRICS_PORT_NAME,
    READY_PATH,
    SPEC_DIR,
    SPEC_FILE,
    STATE_MOUNT,
    TLS_MOUNT,
    WORKER,
)
from squall.errors import TopologyError
from squall.state.config import DIR_KEY, EMBEDDED, PROVIDER_KEY, REDIS
from squall.topology.k8s import READ_WRITE_ONCE
from squall.topology.spec import TopologySpec
from squall.transport.tls import CA_FILE, CERT_FILE, KEY_FILE, Credentials
from squall_operator import pods

Manifest = dict[str, Any]

SPARK_DRIVER_PORT = 7078
SPARK_BLOCK_MANAGER_PORT = 7079
EXECUTOR_TEMPLATE_FILE = "executor-pod-template.yaml"
TEMPLATE_HASH = "squall.dev/template-hash"  # on the pod template: pods made from another template are replaced
TLS_CA = "squall.dev/tls-ca"  # the fingerprint of the CA the pods trust: a new CA rolls them
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # every namespace's own name, as a label (Kubernetes 1.21+)
RUN_AS = 10001  # the image's non-root user
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}}
# Kubernetes' own client and service address, as seen from any pod
K8S_MASTER = "k8s://https://kubernetes.default.svc:443"
MANAGED_BY = "squall-operator"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
PDB_API = "policy/v1"  # Kubernetes 1.21+; the operator uses policy/v1beta1 where that is all it finds
NODE = "kubernetes.io/hostname"
ROLES = {WORKER: pods.WORKERS, ACKER: pods.ACKERS}  # a StatefulSet's role -> its spec.podTemplate key


@dataclass(frozen=True)
class Names:
    """The name of every object of one topology: deterministic, so the operator finds them without listing."""

    topology: str

    @property
    def worker(self) -> str:
        return contract.service_name(self.topology, WORKER)

    @property
    def acker(self) -> str:
        return contract.service_name(self.topology, ACKER)

    @property
    def config_map(self) -> str:
        return f"{self.topology}-spec"

    @property
    def service_account(self) -> str:
        return self.topology

    @property
    def spark_role(self) -> str:
        return f"{self.topology}-spark"

    @property
    def pod_monitor(self) -> str:
        return self.topology

    @property
    def tls(self) -> str:
        return f"{self.topology}-tls"

    @property
    def network_policy(self) -> str:
        return self.topology

    @property
    def state_claim(self) -> str:
        return f"{self.topology}-state"


def labels(topology: str, *, component: str) -> dict[str, str]:
    """The standard ``app.kubernetes.io/*`` labels of every object of a topology."""
    return {**selector(topology, component=component), "app.kubernetes.io/part-of": "squall",
            MANAGED_BY_LABEL: MANAGED_BY}


def selector(topology: str, *, component: str) -> dict[str, str]:
    """The labels a Service or StatefulSet selects its pods by (never changed once created)."""
    return {**instance(topology), "app.kubernetes.io/component": component}


def instance(topology: str) -> dict[str, str]:
    """The labels every pod of a topology carries, whatever its component."""
    return {"app.kubernetes.io/name": "squall", "app.kubernetes.io/instance": topology}


SPARK_EXECUTOR = "spark-executor"  # the component label of a Spark executor pod
POD_COMPONENTS = (WORKER, ACKER, SPARK_EXECUTOR)


def pods_of(topology: str) -> dict[str, Any]:
    """A label selector of the topology's pods, and of no other: the chart's operator pod carries the same
    name and instance labels when a Topology is named like the Helm release in the operator's namespace."""
    return {"matchLabels": instance(topology), "matchExpressions": [
        {"key": "app.kubernetes.io/component", "operator": "In", "values": list(POD_COMPONENTS)}]}


def resolve_image(spec: TopologySpec, default: str | None) -> str:
    """``spec.image``, else the operator's default image; :class:`TopologyError` when there is neither."""
    image = spec.image or default
    if not image:
        raise TopologyError(f"topology {spec.name!r} has no image: set spec.image (or the operator's "
                            "SQUALL_OPERATOR_IMAGE, or squall render --image)")
    return image


def render(spec: TopologySpec, *, namespace: str, image: str, podmonitor: bool = False,
           monitor_labels: Mapping[str, str] | None = None, pdb_api: str | None = PDB_API,
           tls: Credentials | None = None, metrics_from: Collection[str] | None = None,
           control_from: Collection[str] = (), generation: int = 0,
           evict_unhealthy: bool = False) -> list[Manifest]:
    """Every object of the topology, in the order they are applied (the state claim among them, which the
    operator creates but does not own unless asked: :mod:`squall_operator.claims`).

    ``spec`` must be valid (:func:`squall_operator.resource.check_spec`); ``image`` comes from
    :func:`resolve_image`; ``podmonitor`` adds a prometheus-operator PodMonitor, with ``monitor_labels``
    besides its own (``release: ...`` for kube-prometheus-stack's selector); ``pdb_api`` is the
    PodDisruptionBudget apiVersion the cluster serves (None: no budgets), ``evict_unhealthy`` whether its
    budgets may say ``unhealthyPodEvictionPolicy`` (Kubernetes 1.27+). ``tls``: the topology's
    credentials, in a Secret its pods mount for mutual TLS (None: plaintext gRPC). ``metrics_from``:
    a NetworkPolicy lets in only the topology's own pods, and these namespaces on the metrics port
    (None: no NetworkPolicy), and ``control_from`` (the operator's) on the gRPC port, for a rebalance's
    commands. ``generation``: the Topology's ``metadata.generation``, written beside the spec file.
    """
    out = [config_map(spec, namespace=namespace, generation=generation), service_account(spec, namespace=namespace)]
    if state_claimed(spec):
        out.append(state_claim(spec, namespace=namespace))
    if tls is not None:
        out.append(tls_secret(spec, namespace=namespace, tls=tls))
    if metrics_from is not None:
        out.append(network_policy(spec, namespace=namespace, metrics_from=metrics_from, control_from=control_from))
    if spec.spark is not None:
        out += [spark_role(spec, namespace=namespace), spark_role_binding(spec, namespace=namespace)]
    out += [service(spec, WORKER, namespace=namespace),
            stateful_set(spec, WORKER, namespace=namespace, image=image, tls=tls)]
    if spec.num_ackers:
        out += [service(spec, ACKER, namespace=namespace),
                stateful_set(spec, ACKER, namespace=namespace, image=image, tls=tls)]
    if spec.disruption_budget is not None and pdb_api is not None:
        out += [disruption_budget(spec, role, namespace=namespace, api_version=pdb_api,
                                  evict_unhealthy=evict_unhealthy)
                for role in (WORKER, ACKER) if role == WORKER or spec.num_ackers]
    if podmonitor:
        out.append(pod_monitor(spec, namespace=namespace, labels=monitor_labels))
    return out


def child_refs(topology: str, *, pdb_api: str | None = PDB_API) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of everything :func:`render` can produce for a topology, rendered now or
    not: what is not rendered any more (ackers: 0, spark removed, PodMonitor off) gets deleted."""
    names = Names(topology)
    budgets = [(pdb_api, "PodDisruptionBudget", name) for name in (names.worker, names.acker)] if pdb_api else []
    return [("v1", "ConfigMap", names.config_map), ("v1", "ServiceAccount", names.service_account),
            ("v1", "Secret", names.tls), ("networking.k8s.io/v1", "NetworkPolicy", names.network_policy),
            ("rbac.authorization.k8s.io/v1", "Role", names.spark_role),
            ("rbac.authorization.k8s.io/v1", "RoleBinding", names.spark_role),
            ("v1", "Service", names.worker), ("apps/v1", "StatefulSet", names.worker),
            ("v1", "Service", names.acker), ("apps/v1", "StatefulSet", names.acker), *budgets,
            ("monitoring.coreos.com/v1", "PodMonitor", names.pod_monitor)]


def _meta(name: str, *, namespace: str, topology: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels(topology, component=component)}


def config_map(spec: TopologySpec, *, namespace: str, generation: int = 0) -> Manifest:
    """The whole spec as ``topology.yaml``, mounted into every pod; workers follow its ``suspended``,
    unless the operator's command from a newer ``generation`` (the Topology's, in the file beside it)
    said otherwise. With Spark, the executors' pod template too (Spark's driver reads it from a file)."""
    data = {SPEC_FILE: yaml.safe_dump(spec.to_dict(), sort_keys=False), contract.GENERATION_FILE: str(generation)}
    if spec.spark is not None:
        data[EXECUTOR_TEMPLATE_FILE] = yaml.safe_dump(executor_pod(spec), sort_keys=False)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(Names(spec.name).config_map, namespace=namespace, topology=spec.name, component="spec"),
            "data": data}


def executor_pod(spec: TopologySpec) -> Manifest:
    """The pod template file of Spark's executors (``spark.kubernetes.executor.podTemplateFile``): the
    spec's template over Spark's executor container, which Spark completes (image, command, memory),
    hardened as the worker pods are (no privilege escalation, no capability, the runtime's seccomp
    profile, no API token: an executor never calls the API server), and on the topology's image as its
    user. An executor image of its own (``spark.executorImage``) runs as its image's user: the kubelet
    cannot tell whether a named ``USER`` (``apache/spark``'s ``spark``) is root, and would refuse to start
    it with ``runAsNonRoot``; its template may set ``runAsUser``."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if spec.spark is not None and spec.spark.executor_image is None:
        context = {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS, **context}
    container: dict[str, Any] = {"name": pods.MAIN_CONTAINER[pods.SPARK_EXECUTORS]}
    template = pods.templates(spec).get(pods.SPARK_EXECUTORS)
    if template is not None and template.resources is not None:
        container["resources"] = template.resources.model_dump(by_alias=True, exclude_none=True)
    pod = {"metadata": {}, "spec": pods.harden({"automountServiceAccountToken": False, "securityContext": context,
                                                "containers": [container]})}
    return {"apiVersion": "v1", "kind": "Pod", **pods.customise(pod, template)}  # which hardens what it adds


def service_account(spec: TopologySpec, *, namespace: str) -> Manifest:
    """The pods' identity; only a Spark driver (a worker pod) uses its token, through the Role below."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _meta(Names(spec.name).service_account, namespace=namespace, topology=spec.name,
                              component="identity")}


def state_providers(spec: TopologySpec) -> set[str | None]:
    """The state providers the stateful bolts' config picks (None: the default, the embedded store where
    the pods are given a directory), less the embedded stores given a directory of their own."""
    picked = set()
    for bolt in spec.bolts:
        conf = {**spec.config, **bolt.config}
        if bolt.stateful and not (conf.get(PROVIDER_KEY) in (None, EMBEDDED) and conf.get(DIR_KEY)):
            picked.add(conf.get(PROVIDER_KEY))
    return picked


def state_claimed(spec: TopologySpec) -> bool:
    """Whether the worker pods mount the topology's state claim: a stateful bolt keeps its state in the
    embedded store (the default provider) in the directory the pods are given (``SQUALL_STATE_DIR``)."""
    return bool(state_providers(spec) & {None, EMBEDDED})


def state_claim(spec: TopologySpec, *, namespace: str) -> Manifest:
    """The PersistentVolumeClaim every worker pod mounts at ``SQUALL_STATE_DIR``: one per topology, so that a
    task finds its store (``<topology>/<component>-<task>.db``) on whichever pod a rescale moves it to."""
    state = spec.state
    claim: dict[str, Any] = {"accessModes": [state.access_mode],
                             "resources": {"requests": {"storage": str(state.size)}}}
    if state.storage_class_name is not None:
        claim["storageClassName"] = state.storage_class_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": _meta(Names(spec.name).state_claim, namespace=namespace, topology=spec.name,
                              component="state"),
            "spec": claim}


def spark_role(spec: TopologySpec, *, namespace: str) -> Manifest:
    """What a Spark driver in client mode needs to run its executor pods in the topology's namespace."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _meta(Names(spec.name).spark_role, namespace=namespace, topology=spec.name, component="spark"),
            "rules": [{"apiGroups": [""],
                       "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
                       "verbs": ["create", "get", "list", "watch", "delete", "deletecollection", "patch"]}]}


def spark_role_binding(spec: TopologySpec, *, namespace: str) -> Manifest:
    names = Names(spec.name)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _meta(names.spark_role, namespace=namespace, topology=spec.name, component="spark"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.spark_role},
            "subjects": [{"kind": "ServiceAccount", "name": names.service_account, "namespace": namespace}]}


def tls_secret(spec: TopologySpec, *, namespace: str, tls: Credentials) -> Manifest:
    """The topology's CA certificate and the certificate and key all its processes present."""
    data = {CA_FILE: tls.ca, CERT_FILE: tls.cert, KEY_FILE: tls.key}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": _meta(Names(spec.name).tls, namespace=namespace, topology=spec.name, component="tls"),
            "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


def credentials(secret: Manifest | None) -> Credentials | None:
    """The credentials in a topology's TLS Secret as read from the API (None: missing or incomplete)."""
    data = (secret or {}).get("data") or {}
    try:
        return Credentials(*(base64.b64decode(data[key], validate=True) for key in (CA_FILE, CERT_FILE, KEY_FILE)))
    except (KeyError, TypeError, ValueError):
        return None


def network_policy(spec: TopologySpec, *, namespace: str, metrics_from: Collection[str],
                   control_from: Collection[str] = ()) -> Manifest:
    """Ingress to the topology's pods: anything from its own pods (gRPC, and Spark's driver and
    executors), the metrics port from the ``metrics_from`` namespaces, the gRPC port (a rebalance's
    commands) from the ``control_from`` namespaces, nothing else."""
    own = pods_of(spec.name)
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": own}]}]
    for port, namespaces in ((METRICS_PORT, metrics_from), (GRPC_PORT, control_from)):
        if namespaces:
            ingress.append({"from": [{"namespaceSelector": {"matchExpressions": [
                {"key": NAMESPACE_NAME, "operator": "In", "values": sorted(set(namespaces))}]}}],
                "ports": [{"port": port, "protocol": "TCP"}]})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(Names(spec.name).network_policy, namespace=namespace, topology=spec.name,
                              component="network"),
            "spec": {"podSelector": own, "policyTypes": ["Ingress"], "ingress": ingress}}


def _ports(spec: TopologySpec, role: str) -> list[tuple[str, int]]:
    ports = [(GRPC_PORT_NAME, GRPC_PORT), (METRICS_PORT_NAME, METRICS_PORT)]
    if role == WORKER and spec.spark is not None:  # Spark executors connect back to their driver
        ports += [("spark-driver", SPARK_DRIVER_PORT), ("spark-blockmgr", SPARK_BLOCK_MANAGER_PORT)]
    return ports


def service(spec: TopologySpec, role: str, *, namespace: str) -> Manifest:
    """The headless Service that gives each pod of a StatefulSet its DNS name (``<pod>.<service>``)."""
    name = getattr(Names(spec.name), role)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(name, namespace=namespace, topology=spec.name, component=role),
            "spec": {"clusterIP": "None",
                     # peers dial each other while starting up, before any of them is ready
                     "publishNotReadyAddresses": True,
                     "selector": selector(spec.name, component=role),
                     "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"}
                               for n, p in _ports(spec, role)]}}


def peers(spec: TopologySpec, role: str, *, namespace: str) -> str:
    """The ``SQUALL_<ROLE>_PEERS`` template: ``{i}`` is the pod ordinal (see docs/processes.md)."""
    return contract.peer_template(role, namespace=namespace).replace("{topology}", spec.name)


def spark_conf(spec: TopologySpec, *, namespace: str, image: str) -> dict[str, str]:
    """Spark properties for a worker pod that is a Spark driver in client mode.

    ``$(SQUALL_POD_NAME)`` is expanded by Kubernetes (the variable is defined before the one that
    uses it). Executors are owned by the driver pod, so they go when it goes.
    """
    assert spec.spark is not None
    spark, names = spec.spark, Names(spec.name)
    conf = {
        "spark.master": K8S_MASTER,
        "spark.submit.deployMode": "client",
        "spark.driver.host": f"$({contract.POD_NAME}).{names.worker}.{namespace}.svc",
        "spark.driver.port": str(SPARK_DRIVER_PORT),
        "spark.driver.blockManager.port": str(SPARK_BLOCK_MANAGER_PORT),
        # No spark.driver.bindAddress: the driver binds the address its host name resolves to (the
        # pod's own, through the headless Service). Spark advertises a bind address set to 0.0.0.0
        # in the executors' driver URL, and they cannot connect.
        "spark.kubernetes.namespace": namespace,
        "spark.kubernetes.driver.pod.name": f"$({contract.POD_NAME})",
        "spark.kubernetes.container.image": spark.executor_image or image,
        "spark.kubernetes.authenticate.driver.serviceAccountName": names.service_account,
        "spark.executor.instances": str(spark.executors),
        "spark.executor.cores": str(spark.executor_cores),
        "spark.executor.memory": spark.executor_memory,
        "spark.driver.memory": spark.driver_memory,
        # the topology's NetworkPolicy lets in its own pods: the executors are among them
        **{f"spark.kubernetes.executor.label.{k}": v
           for k, v in selector(spec.name, component=SPARK_EXECUTOR).items()},
    }
    conf["spark.kubernetes.executor.podTemplateFile"] = f"{SPEC_DIR}/{EXECUTOR_TEMPLATE_FILE}"
    conf["spark.kubernetes.executor.podTemplateContainerName"] = pods.MAIN_CONTAINER[pods.SPARK_EXECUTORS]
    return {**conf, **spark.conf}


def environment(spec: TopologySpec, role: str, *, namespace: str, image: str,
                tls: bool = False) -> list[dict[str, Any]]:
    """The process environment of the pod contract (:mod:`squall.contract`). The index is not
    set: each process takes it from its StatefulSet hostname (``<topology>-worker-3``); every topology
    setting comes from the mounted spec file."""
    env: list[dict[str, Any]] = [
        {"name": contract.TOPOLOGY, "value": contract.SPEC_PATH},
        {"name": contract.NAMESPACE, "value": namespace},
        {"name": contract.WORKER_PEERS, "value": peers(spec, WORKER, namespace=namespace)},
        {"name": contract.ACKER_PEERS, "value": peers(spec, ACKER, namespace=namespace)},
        {"name": contract.GRPC_PORT_VAR, "value": str(GRPC_PORT)},
        {"name": contract.METRICS_PORT_VAR, "value": str(METRICS_PORT)},
    ]
    if tls:
        env.append({"name": contract.TLS_DIR, "value": TLS_MOUNT})
    if role == WORKER and state_claimed(spec):
        env.append({"name": contract.STATE_DIR, "value": STATE_MOUNT})
    secret = spec.state.redis_secret
    if role == WORKER and secret is not None and REDIS in state_providers(spec):
        env.append({"name": contract.STATE_REDIS_URL,
                    "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}})
    env += [{"name": name, "value": value} for name, value in contract.role_env(role).items()]
    if role == WORKER and spec.spark is not None:
        env += [{"name": contract.POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": contract.SPARK_CONF,
                 "value": json.dumps(spark_conf(spec, namespace=namespace, image=image), sort_keys=True)}]
    return env


# Seconds between two startupProbe checks, and two readinessProbe checks: a replaced pod counts as up
# within 2 s of being so (at 5 s, its Ready lagged its process by up to two periods, startup then
# readiness). A /healthz or /readyz answer is a few attribute reads.
STARTUP_PERIOD = READY_PERIOD = 2
UNREADY_AFTER = 10  # seconds of failed readiness checks before a ready pod counts as not ready


def _probe(path: str, *, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": METRICS_PORT_NAME}, "periodSeconds": period, "timeoutSeconds": 2,
            "failureThreshold": failures}


def probes(spec: TopologySpec) -> dict[str, Any]:
    """Startup: ``/healthz`` answers within ``startupTimeoutSeconds`` (liveness waits for it, so a slow
    ``prepare()`` is not killed in a loop). Liveness: ``/healthz``, the process's loop is alive.
    Readiness: ``/readyz``, connected to every peer and active."""
    return {"startupProbe": _probe(HEALTH_PATH, period=STARTUP_PERIOD,
                                   failures=-(-spec.startup_timeout_seconds // STARTUP_PERIOD)),
            "livenessProbe": _probe(HEALTH_PATH, period=10, failures=3),
            "readinessProbe": _probe(READY_PATH, period=READY_PERIOD, failures=UNREADY_AFTER // READY_PERIOD)}


def stateful_set(spec: TopologySpec, role: str, *, namespace: str, image: str,
                 tls: Credentials | None = None) -> Manifest:
    """The worker (``spec.workers`` pods) or acker (``ackers``, or one per worker) StatefulSet."""
    names = Names(spec.name)
    name = getattr(names, role)
    spark_driver = role == WORKER and spec.spark is not None
    container: dict[str, Any] = {
        "name": role,
        "image": image,
        "command": ["squall", role],
        "env": environment(spec, role, namespace=namespace, image=image, tls=tls is not None),
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in _ports(spec, role)],
        **probes(spec),
        "resources": pods.resources(spec, ROLES[role], DEFAULT_RESOURCES),
        # a process that dies before it logs its error (an import failure) still says why: the log tail
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    volumes: list[dict[str, Any]] = [
        # mounted as a directory (never subPath), so ConfigMap updates reach running pods
        {"name": "spec", "configMap": {"name": names.config_map, "items": [
            {"key": key, "path": key} for key in sorted(config_map(spec, namespace=namespace)["data"])]}},
        {"name": "tmp", "emptyDir": {}}]
    annotations: dict[str, str] = {}
    if tls is not None:
        container["volumeMounts"].append({"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": names.tls, "defaultMode": 0o440}})
        annotations[TLS_CA] = tls.fingerprint()
    claimed = role == WORKER and state_claimed(spec)
    if claimed:
        container["volumeMounts"].append({"name": "state", "mountPath": STATE_MOUNT})
        volumes.append({"name": "state", "persistentVolumeClaim": {"claimName": names.state_claim}})
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    template = pods.customise({
        "metadata": {"labels": labels(spec.name, component=role), "annotations": annotations},
        "spec": {
            "serviceAccountName": names.service_account,
            # only a Spark driver talks to the API server
            "automountServiceAccountToken": spark_driver,
            # SIGTERM drains: spouts stop, pending trees finish within the message timeout
            "terminationGracePeriodSeconds": spec.message_timeout_seconds + 15,
            "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                                "fsGroup": RUN_AS, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            **spreading(spec.name, role=role, together=claimed and spec.state.access_mode == READ_WRITE_ONCE),
            "volumes": volumes,
        },
    }, pods.templates(spec).get(ROLES[role]))
    template["metadata"].setdefault("annotations", {})[TEMPLATE_HASH] = digest(template)
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": _meta(name, namespace=namespace, topology=spec.name, component=role),
        "spec": {
            "replicas": contract.process_count(spec, role),
            "serviceName": name,
            # pods are added and removed together: they wait for each other anyway
            "podManagementPolicy": "Parallel",
            # the operator replaces pods itself, after draining them (squall_operator.rebalance): a rolling
            # update would wait for each new pod to be ready, which it is not until its peers run its plan
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector(spec.name, component=role)},
            "template": template,
        },
    }


def template_hash(stateful_set: Manifest) -> str | None:
    """The hash of the pod template a rendered (or live) StatefulSet makes its pods from."""
    return stateful_set["spec"]["template"]["metadata"].get("annotations", {}).get(TEMPLATE_HASH)


def digest(value: Any) -> str:
    """A short, stable hash of a JSON value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def disruption_budget(spec: TopologySpec, role: str, *, namespace: str, api_version: str,
                      evict_unhealthy: bool = False) -> Manifest:
    """How many of a role's pods a voluntary disruption (a node drain) may take at once.

    With ``evict_unhealthy`` a pod that is not ready may always be evicted: a pod is ready only once
    every peer is up, so one pod that cannot start makes all of its role unready, and under the
    default policy such a budget would allow no eviction at all and block the node's drain."""
    assert spec.disruption_budget is not None
    budget: dict[str, Any] = {"maxUnavailable": spec.disruption_budget.max_unavailable,
                              "selector": {"matchLabels": selector(spec.name, component=role)}}
    if evict_unhealthy:
        budget["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    return {"apiVersion": api_version, "kind": "PodDisruptionBudget",
            "metadata": _meta(getattr(Names(spec.name), role), namespace=namespace, topology=spec.name,
                              component=role),
            "spec": budget}


def spreading(topology: str, *, role: str, together: bool = False) -> dict[str, Any]:
    """Soft anti-affinity and a soft spread across nodes: one node's loss takes as few of a role's pods
    as the cluster allows, and a small cluster still schedules them all. ``together``: the pods mount a
    ReadWriteOnce volume, which one node at a time can mount, so they all go to one node instead (a
    required affinity to each other: the first goes anywhere, the others where it is)."""
    match = {"matchLabels": selector(topology, component=role)}
    if together:
        return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": match, "topologyKey": NODE}]}}}
    return {
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": match, "topologyKey": NODE}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": NODE, "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": match}],
    }


def pod_monitor(spec: TopologySpec, *, namespace: str, labels: Mapping[str, str] | None = None) -> Manifest:
    """A prometheus-operator PodMonitor scraping ``/metrics`` of every worker and acker pod, with ``labels``
    added to its own (so that a Prometheus selecting monitors by label picks it)."""
    meta = _meta(Names(spec.name).pod_monitor, namespace=namespace, topology=spec.name, component="metrics")
    meta["labels"] = {**(labels or {}), **meta["labels"]}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": meta,
            "spec": {"selector": pods_of(spec.name),
                     "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": METRICS_PATH}]}}
