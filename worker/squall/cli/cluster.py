"""The Kubernetes API, as the cluster verbs (``squall list``, ``rebalance``, ``kill``, ``logs``, ``top NAME``...)
use it: a kubeconfig or the pod's own credentials, the current namespace or ``-n``, and errors that say
what to do.

Every verb goes through the API server only: Topologies with the ``squall.dev`` API, the pods' logs
with ``pods/log``, their ``/metrics`` through the API server's pod proxy (``pods/proxy``, as
``kubectl get --raw /api/v1/namespaces/NS/pods/P:9090/proxy/metrics`` does), so no port-forward.

Exit statuses the verbs share (:data:`EXIT_CODES`): 0 done; 1 not done (a wait that ran out, a
rebalance refused); 2 a bad argument or spec; 3 no cluster (no kubeconfig, the API server unreachable,
not logged in); 4 forbidden (the verb and resource are named); 5 no such topology.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from squall.contract import METRICS_PORT_NAME, ROLES
from squall.errors import SquallError

GROUP, VERSION, PLURAL = "squall.dev", "v1alpha1", "topologies"
INSTANCE, COMPONENT = "app.kubernetes.io/instance", "app.kubernetes.io/component"
MANAGED = "app.kubernetes.io/managed-by=squall-operator"
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
REQUEST_TIMEOUT = 15.0  # seconds for one API call (a follow of the logs has none)
NOT_DONE, INVALID, NO_CLUSTER, FORBIDDEN, NOT_FOUND = 1, 2, 3, 4, 5
EXIT_CODES = f"""exit status:
  0  done
  {NOT_DONE}  not done: a wait ran out, a rebalance was refused, no pod runs
  {INVALID}  a bad argument, or a spec the operator would refuse
  {NO_CLUSTER}  no cluster: no kubeconfig, the API server unreachable, not logged in
  {FORBIDDEN}  not allowed by RBAC (the verb and resource are named)
  {NOT_FOUND}  no such topology"""


class ClusterError(SquallError):
    """A cluster verb that could not be done; ``exit_code`` says why, for scripts (:data:`EXIT_CODES`)."""

    def __init__(self, message: str, *, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def options(parser: argparse.ArgumentParser) -> None:
    """The options every cluster verb takes, as kubectl names them."""
    parser.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's, else default)")
    parser.add_argument("--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config; "
                        "in a pod without one: the pod's ServiceAccount)")
    parser.add_argument("--context", help="the kubeconfig context (default: its current context)")


def describe(exc: BaseException) -> str:
    """An API exception's message (the Status' message when the API server sent one)."""
    import json

    body = getattr(exc, "body", None)
    if body:
        with contextlib.suppress(ValueError, TypeError):
            return str(json.loads(body).get("message") or body)
    return f"{getattr(exc, 'status', '')} {getattr(exc, 'reason', '') or exc}".strip()


@dataclass
class Cluster:
    """One namespace of one cluster, logged in."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str
    server: str

    @classmethod
    def connect(cls, args: argparse.Namespace) -> Cluster:
        """Log in as ``kubectl`` would: ``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``, else the pod's
        ServiceAccount; the namespace from ``-n``, the context, the pod's, else ``default``."""
        try:
            from kubernetes import client, config
        except ImportError:
            raise ClusterError("the cluster verbs need the kubernetes client: pip install 'squall[operator]'",
                               exit_code=NO_CLUSTER) from None
        configuration = client.Configuration()
        path = args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or \
            str(Path.home() / ".kube" / "config")
        namespace = args.namespace
        if args.kubeconfig or Path(path).is_file():
            try:
                config.load_kube_config(config_file=path, context=args.context, client_configuration=configuration)
                contexts, active = config.list_kube_config_contexts(config_file=path)
            except (config.ConfigException, OSError, ValueError, TypeError) as exc:
                raise ClusterError(f"cannot use the kubeconfig {path}: {exc}", exit_code=NO_CLUSTER) from None
            chosen = next((c for c in contexts if c["name"] == args.context), active) if args.context else active
            namespace = namespace or ((chosen or {}).get("context") or {}).get("namespace")
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException:
                raise ClusterError(f"no kubeconfig ({path} does not exist) and not in a pod: give --kubeconfig, "
                                   "set KUBECONFIG, or log in to a cluster (kubectl config view shows where "
                                   "kubectl finds one)", exit_code=NO_CLUSTER) from None
            with contextlib.suppress(OSError):
                namespace = namespace or IN_CLUSTER_NAMESPACE.read_text().strip()
        return cls(api=client.ApiClient(configuration), namespace=namespace or "default", server=configuration.host)

    @contextlib.contextmanager
    def calling(self, verb: str, resource: str, name: str | None = None) -> Iterator[None]:
        """Turn what the API server or the network says into a :class:`ClusterError` naming what was asked."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        what = f"{resource} {name!r}" if name else resource
        try:
            yield
        except ApiException as exc:
            if exc.status == 403:
                raise ClusterError(f"forbidden: you may not {verb} {resource} in namespace {self.namespace} "
                                   f"({describe(exc)}); ask for a role that allows it (kubectl auth can-i {verb} "
                                   f"{resource} -n {self.namespace})", exit_code=FORBIDDEN) from None
            if exc.status == 401:
                raise ClusterError(f"not logged in to {self.server}: {describe(exc)} (your credentials expired or are "
                                   "wrong: log in again)", exit_code=NO_CLUSTER) from None
            if exc.status == 404 and resource == PLURAL and name is None:
                raise ClusterError(f"the API server {self.server} serves no topologies: the Topology CRD is not "
                                   "installed (helm install squall charts/squall)", exit_code=NOT_FOUND) from None
            if exc.status == 404 and resource == PLURAL:
                raise ClusterError(f"no topology {name!r} in namespace {self.namespace}: `squall list -n "
                                   f"{self.namespace}` lists those there (is it another namespace? -n NAMESPACE)",
                                   exit_code=NOT_FOUND) from None
            raise ClusterError(f"{verb} {what} in namespace {self.namespace} failed: {describe(exc)}",
                               exit_code=INVALID if exc.status in (400, 409, 422) else NOT_DONE) from None
        except (HTTPError, OSError) as exc:
            raise ClusterError(f"cannot reach the API server {self.server}: {exc} (is the cluster up, and the "
                               "kubeconfig's the right one?)", exit_code=NO_CLUSTER) from None

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api)

    def topology(self, name: str) -> dict[str, Any]:
        with self.calling("get", PLURAL, name):
            return self._custom().get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name,
                                                               _request_timeout=REQUEST_TIMEOUT)

    def topologies(self) -> list[dict[str, Any]]:
        with self.calling("list", PLURAL):
            found = self._custom().list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                                 _request_timeout=REQUEST_TIMEOUT)
        return sorted(found.get("items") or [], key=lambda t: t["metadata"]["name"])

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the Topology (with ``metadata.resourceVersion``: only if unchanged since)."""
        with self.calling("patch", PLURAL, name):
            return self._custom().patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, body, _request_timeout=REQUEST_TIMEOUT,
                _content_type="application/merge-patch+json")

    def delete(self, name: str) -> None:
        with self.calling("delete", PLURAL, name):
            self._custom().delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name,
                                                           _request_timeout=REQUEST_TIMEOUT)

    def pods(self, topology: str | None = None) -> list[dict[str, Any]]:
        """The worker and acker pods (of ``topology``; of every topology by default), by name."""
        selector = MANAGED + (f",{INSTANCE}={topology}" if topology else "")
        with self.calling("list", "pods"):
            found = self._core().list_namespaced_pod(self.namespace, label_selector=selector,
                                                     _request_timeout=REQUEST_TIMEOUT)
        pods = [self.api.sanitize_for_serialization(p) for p in found.items]
        # filtered here too: the labels the API server matched, and a Spark executor pod is no process of ours
        return sorted((p for p in pods if (p["metadata"].get("labels") or {}).get(COMPONENT) in ROLES and
                       (topology is None or p["metadata"]["labels"].get(INSTANCE) == topology)),
                      key=lambda p: p["metadata"]["name"])

    def proxy_get(self, pod: dict[str, Any], path: str, *, timeout: float = 5.0) -> str:
        """``GET path`` of a pod's metrics port, through the API server's pod proxy (``pods/proxy``)."""
        port = metrics_port(pod)
        name = pod["metadata"]["name"]
        with self.calling("get", "pods/proxy", name):
            response = self._core().connect_get_namespaced_pod_proxy_with_path(
                f"{name}:{port}", self.namespace, path.lstrip("/"), _preload_content=False, _request_timeout=timeout)
            return response.data.decode()

    def log(self, pod: str, container: str, *, follow: bool, tail: int | None) -> Any:
        """A pod's log, as a urllib3 response to read lines from (``pods/log``)."""
        with self.calling("get", "pods/log", pod):
            return self._core().read_namespaced_pod_log(pod, self.namespace, container=container, follow=follow,
                                                        tail_lines=tail, timestamps=False, _preload_content=False,
                                                        _request_timeout=None if follow else REQUEST_TIMEOUT)


def metrics_port(pod: dict[str, Any]) -> int:
    """The pod's metrics container port (9090 unless its template says otherwise)."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == METRICS_PORT_NAME:
                return int(port["containerPort"])
    return 9090


def role(pod: dict[str, Any]) -> str:
    return (pod["metadata"].get("labels") or {}).get(COMPONENT, "")


def running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's AGE: ``45s``, ``12m``, ``5h``, ``3d``."""
    if not timestamp:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - datetime.fromisoformat(timestamp.replace("Z", "+00:00")))
                         .total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def condition(topology: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (topology.get("status") or {}).get("conditions") or () if c.get("type") == kind), {})
