"""The chart's RBAC grants the operator exactly what it calls.

What it calls is found by running the operator's own reconcile code against an in-memory API server
that records every request (create, no-op, prune, refresh, invalid spec), plus what kopf does for the
handlers the operator registers. The rendered ClusterRole (or Roles, with watchNamespaces) must allow
all of it, and allow nothing else but two documented extras.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import kopf
import pytest
import yaml
from chart_support import REPO, deployment_env, render
from kubernetes import client

from squall_operator import admission, cluster, crd, handlers, leader, reconcile, resource
from squall_operator import render as operator_render
from squall_operator.apply import Kube
from squall_operator.settings import Settings

Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
NAMESPACE = "streams"

# What kopf itself calls besides its handlers' resources (kopf 1.45: _core/reactor/observation.py,
# _core/engines/posting.py): Events are posted as core v1; unless scanning is off, CRDs are watched to
# notice resources that come and go, and with a list of namespaces, the namespaces are listed and watched.
KOPF_EVENTS = {("", "events", "create")}
KOPF_SCANNING = {("apiextensions.k8s.io", "customresourcedefinitions", "list"),
                 ("apiextensions.k8s.io", "customresourcedefinitions", "watch")}
KOPF_NAMESPACES = {("", "namespaces", "list"), ("", "namespaces", "watch")}
# With the webhook, the operator writes it into the configuration the chart made (admission.Configuration),
# and kopf manages no configuration (it would create them).
WEBHOOK = {("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch")}
# Granted although no request of the operator needs them, for the reasons the chart's comments give.
FINALIZERS = {("squall.dev", "topologies/finalizers", "update")}  # kopf.adopt's blockOwnerDeletion


@dataclass
class _Response:
    status: int
    data: bytes
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def response(self) -> _Response:
        return self

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return self.headers


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386)."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class RecordingApi(client.ApiClient):
    """Objects kept by their URL; every request recorded as (method, path)."""

    def __init__(self, served: dict[str, list[str]]) -> None:
        super().__init__(client.Configuration(host="http://api.invalid"))
        self.objects: dict[str, dict[str, Any]] = {}
        self.served = served  # discovery: "group/version" → plurals
        self.requests: list[tuple[str, str]] = []

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        path = urlsplit(url).path
        self.requests.append((method, path))
        group_version = re.fullmatch(r"/apis/([^/]+/[^/]+)", path)
        if group_version:
            if group_version.group(1) not in self.served:
                return _Response(404, b"{}")
            return _Response(200, json.dumps({"resources": [{"name": p} for p in self.served[group_version.group(1)]]})
                             .encode())
        body = json.loads(body) if isinstance(body, (str, bytes)) else body
        base = path.removesuffix("/status")
        if method == "GET" and re.fullmatch(r"/(api/v1|apis/[^/]+/[^/]+)/namespaces/[^/]+/[^/]+", path):  # a LIST
            items = [obj for at, obj in self.objects.items() if at.rsplit("/", 1)[0] == path]
            return _Response(200, json.dumps({"items": items}).encode())
        if method == "POST":
            path = f"{path}/{body['metadata'].get('name') or body['metadata']['generateName'] + str(len(self.objects))}"
            self.objects[path] = {**body, "metadata": {**body["metadata"], "uid": f"uid-{len(self.objects)}"}}
            return self._ok(path)
        if base not in self.objects:
            return _Response(404, b'{"reason": "NotFound"}', reason="Not Found")
        if method == "PATCH":
            self.objects[base] = _merge(self.objects[base], body)
        elif method == "DELETE":
            return _Response(200, json.dumps(self.objects.pop(base)).encode())
        return self._ok(base)

    def _ok(self, path: str) -> _Response:
        return _Response(200, json.dumps(self.objects[path]).encode())

    def permissions(self) -> set[Permission]:
        """The RBAC (group, resource, verb) of every request made, discovery aside (open to everyone)."""
        out = set()
        for method, path in self.requests:
            match = re.fullmatch(r"/(?:api/v1|apis/([^/]+)/[^/]+)/namespaces/[^/]+/([^/]+)(?:/([^/]+)(?:/([^/]+))?)?",
                                 path) or re.fullmatch(
                r"/apis/([^/]+)/[^/]+/(customresourcedefinitions|validatingwebhookconfigurations)/([^/]+)()",
                                                       path)
            if match is None:
                assert re.fullmatch(r"/apis/[^/]+/[^/]+", path), f"unexpected request {method} {path}"
                continue
            group, plural, name, sub = match.groups()
            verb = {"GET": "get" if name else "list", "POST": "create", "PATCH": "patch", "PUT": "update",
                    "DELETE": "delete" if name else "deletecollection"}[method]
            out.add((group or "", f"{plural}/{sub}" if sub else plural, verb))
        return out


def _topology(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": resource.API_VERSION, "kind": resource.KIND, "spec": spec,
            "metadata": {"name": "wordcount", "namespace": NAMESPACE, "uid": "topology-uid", "generation": 1}}


def operator_calls(monkeypatch) -> set[Permission]:
    """Run the operator's reconcile through every path that writes: create, no-op, prune, refresh, invalid."""
    api = RecordingApi({"monitoring.coreos.com/v1": ["podmonitors"]})
    spec = yaml.safe_load((REPO / "examples" / "wordcount.yaml").read_text())
    spec.pop("name")
    path = f"/apis/{resource.API_VERSION}/namespaces/{NAMESPACE}/{resource.PLURAL}/wordcount"
    api.objects[path] = _topology({**spec, "spark": {"executors": 1}})
    log = logging.getLogger("test")
    with_monitors = reconcile.Operator(settings=Settings(image="squall:test", podmonitor="auto"), kube=Kube(api))
    with_monitors.reconcile(NAMESPACE, "wordcount", log)  # creates everything, Spark RBAC and PodMonitor included
    kinds = {obj["kind"] for obj in api.objects.values()}
    assert {"ConfigMap", "ServiceAccount", "Role", "RoleBinding", "Service", "StatefulSet", "PodMonitor", "Secret",
            "NetworkPolicy"} <= kinds
    with_monitors.reconcile(NAMESPACE, "wordcount", log)  # nothing to change
    def children() -> list[dict[str, Any]]:
        return [obj for obj in api.objects.values() if obj["kind"] not in (resource.KIND, "Event")]

    for obj in children():  # someone edits every object by hand: the operator patches them back
        obj["metadata"]["labels"] = {**obj["metadata"]["labels"], "app.kubernetes.io/name": "edited"}
    with_monitors.reconcile(NAMESPACE, "wordcount", log)
    assert all(obj["metadata"]["labels"]["app.kubernetes.io/name"] == "squall" for obj in children())
    # a pod made from another template: drained (its process does not answer here), then replaced
    pod = f"/api/v1/namespaces/{NAMESPACE}/pods/wordcount-worker-0"
    api.objects[pod] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wordcount-worker-0",
                                                                         "namespace": NAMESPACE}}
    with_monitors.reconcile(NAMESPACE, "wordcount", log)  # draining
    with_monitors.reconcile(NAMESPACE, "wordcount", log)  # drained: the pod is deleted
    assert pod not in api.objects
    # stateful bolts: the state claim is made, then owned by the Topology when asked (its owner reference patched)
    stateful = copy.deepcopy(spec)
    stateful["bolts"][-1]["stateful"] = True
    api.objects[path]["spec"] = stateful
    with_monitors.reconcile(NAMESPACE, "wordcount", log)
    claim = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/wordcount-state"
    assert "ownerReferences" not in api.objects[claim]["metadata"]
    api.objects[path]["spec"] = {**stateful, "state": {"deleteClaimWithTopology": True}}
    with_monitors.reconcile(NAMESPACE, "wordcount", log)
    assert api.objects[claim]["metadata"]["ownerReferences"][0]["uid"] == "topology-uid"
    api.objects[path]["spec"] = {**spec, "ackers": 0}
    without = reconcile.Operator(settings=Settings(image="squall:test", podmonitor="false", tls=False,
                                                  network_policy=False), kube=Kube(api))
    without.reconcile(NAMESPACE, "wordcount", log)  # prunes Spark's RBAC, the ackers, the PodMonitor, TLS, policy
    kept = {"Event", "PersistentVolumeClaim"}  # the state claim is never pruned
    assert {obj["kind"] for obj in api.objects.values()} == kinds - {"Role", "RoleBinding", "PodMonitor", "Secret",
                                                                     "NetworkPolicy"} | kept
    without.refresh(NAMESPACE, "wordcount")
    api.objects[path]["spec"] = {**spec, "workers": 0}
    without.reconcile(NAMESPACE, "wordcount", log)  # invalid: only the status is written
    assert api.objects[path]["status"]["phase"] == "Failed"
    assert ("", "events", "create") in api.permissions(), "the operator posts Events"
    return api.permissions() | KOPF_EVENTS


def cluster_calls() -> set[Permission]:
    """What the operator calls cluster-wide at start-up: adding the CEL rules to the Topology CRD."""
    api = RecordingApi({})
    api.objects[f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{cluster.CRD_NAME}"] = crd.crd()
    assert cluster.install_cel(Kube(api), cluster.Features(version=(1, 30)), logging.getLogger("test"))
    return api.permissions()


def webhook_calls(settings: Settings) -> set[Permission]:
    """What the operator calls to point the webhook configuration at itself, and to empty it."""
    api = RecordingApi({})
    api.objects[f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{admission.CONFIGURATION}"] = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": admission.CONFIGURATION}}
    configuration = admission.Configuration(api, settings, logging.getLogger("test"))
    asyncio.run(configuration.publish({"caBundle": "Y2E=", "service": {"namespace": "n", "name": "s", "port": 1}}))
    asyncio.run(configuration.publish(None))
    assert WEBHOOK == api.permissions()
    return api.permissions()


def kopf_calls(settings: Settings) -> tuple[set[Permission], set[Permission]]:
    """What kopf calls for the operator with ``settings``: (in the namespaces it serves, cluster-wide).

    It lists and watches every resource it handles, and patches those with change handlers (their
    progress and last spec go to annotations); the cluster-wide reads depend on kopf's settings.
    """
    registry = kopf.OperatorRegistry()
    handlers.register(registry, settings=settings, api=client.ApiClient())
    namespaced: set[Permission] = set()
    for kind, verbs in ((registry._changing, ("list", "watch", "patch")), (registry._watching, ("list", "watch"))):
        for handler in kind.get_all_handlers():
            name = handler.selector.plural or handler.selector.any_name  # on.event("apps", "v1", "statefulsets")
            assert isinstance(name, str), handler.selector
            namespaced |= {(handler.selector.group or "", name, verb) for verb in verbs}
    assert ("squall.dev", "topologies", "watch") in namespaced and ("apps", "statefulsets", "watch") in namespaced
    cluster_wide: set[Permission] = set()
    if not handlers.kopf_settings(settings, client.ApiClient()).scanning.disabled:
        cluster_wide |= KOPF_SCANNING | (set() if settings.clusterwide else KOPF_NAMESPACES)
    if settings.clusterwide:
        cluster_wide |= cluster_calls()
    if settings.webhook_host:
        cluster_wide |= webhook_calls(settings)
    return namespaced, cluster_wide


def allowed(rules: list[dict[str, Any]]) -> set[Permission]:
    return {(group, res, verb) for rule in rules for group in rule["apiGroups"] for res in rule["resources"]
            for verb in rule["verbs"]}


def spark_grants() -> set[Permission]:
    spec = yaml.safe_load((REPO / "examples" / "wordcount.yaml").read_text())
    role = operator_render.spark_role(operator_render.TopologySpec.from_dict({**spec, "spark": {}}), namespace="x")
    return allowed(role["rules"])


@pytest.fixture(scope="module")
def needed(request) -> set[Permission]:
    """What the operator calls in a namespace whose Topologies it runs (its client, and kopf)."""
    monkeypatch = pytest.MonkeyPatch()
    request.addfinalizer(monkeypatch.undo)
    namespaced, _ = kopf_calls(Settings(image="squall:test"))
    return operator_calls(monkeypatch) | namespaced


def test_the_cluster_role_allows_what_the_operator_calls_and_nothing_else(needed):
    chart = render()
    role = chart.one("ClusterRole", "squall")
    granted = allowed(role["rules"])
    _, cluster = kopf_calls(Settings.from_env(deployment_env(chart)))
    need = needed | cluster
    assert not need - granted, f"the operator calls what the chart does not allow: {sorted(need - granted)}"
    extra = granted - need - spark_grants() - FINALIZERS
    assert not extra, f"the chart allows what the operator never calls: {sorted(extra)}"
    (binding,) = chart.of_kind("ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "squall"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "squall", "namespace": "squall-system"}]


def test_with_watch_namespaces_roles_in_those_namespaces_are_all_it_gets(needed):
    chart = render({"watchNamespaces": ["team-a", "team-b"]})
    _, cluster = kopf_calls(Settings.from_env(deployment_env(chart)))
    assert not cluster, "kopf reads nothing cluster-wide for a namespaced operator"
    roles = [r for r in chart.of_kind("Role") if r["metadata"]["name"] != "squall-leader"]  # (the Lease's, below)
    assert {r["metadata"]["namespace"] for r in roles} == {"team-a", "team-b"}
    for role in roles:
        granted = allowed(role["rules"])
        assert not needed - granted, f"{sorted(needed - granted)}"
        assert not granted - needed - spark_grants() - FINALIZERS
    operator_roles = [r["metadata"]["name"] for r in chart.of_kind("ClusterRole") if "topology-" not in
                      r["metadata"]["name"]]
    assert operator_roles == [] and chart.of_kind("ClusterRoleBinding") == []
    bindings = {(b["metadata"]["namespace"], b["roleRef"]["kind"], b["roleRef"]["name"])
                for b in chart.of_kind("RoleBinding")}
    assert bindings == {("team-a", "Role", "squall"), ("team-b", "Role", "squall"),
                        ("squall-system", "Role", "squall-leader")}


def leader_calls() -> set[Permission]:
    """What leader election calls: make the Lease, renew it, hand it back."""
    api = RecordingApi({})
    election = leader.Election(api=api, namespace=NAMESPACE, name="squall", holder="a")
    assert election._acquire_or_renew(1.0) and election._acquire_or_renew(1.0)
    election._release()
    assert api.objects[f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/squall"]["spec"].get(
        "holderIdentity") is None
    return api.permissions()


@pytest.mark.parametrize("values", [{}, {"watchNamespaces": ["team-a"]}], ids=["all namespaces", "named"])
def test_the_operator_may_hold_its_lease_in_its_own_namespace_and_no_other_lease(values):
    chart = render(values)
    settings = Settings.from_env(deployment_env(chart))
    role = chart.one("Role", "squall-leader")
    assert role["metadata"]["namespace"] == settings.own_namespace == "squall-system"
    assert allowed(role["rules"]) == leader_calls() == {("coordination.k8s.io", "leases", verb)
                                                         for verb in ("create", "get", "patch")}
    assert [r["resourceNames"] for r in role["rules"] if r["verbs"] != ["create"]] == [[settings.lease]]
    binding = chart.one("RoleBinding", "squall-leader")
    assert binding["roleRef"]["name"] == "squall-leader" and binding["metadata"]["namespace"] == "squall-system"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "squall", "namespace": "squall-system"}]


def test_without_spark_executors_the_spark_grant_goes(needed):
    chart = render({"rbac": {"sparkExecutors": False}})
    _, cluster_wide = kopf_calls(Settings.from_env(deployment_env(chart)))
    granted = allowed(chart.one("ClusterRole", "squall")["rules"])
    assert granted == needed | cluster_wide | FINALIZERS
    assert not spark_grants() <= granted
    assert spark_grants() <= allowed(render().one("ClusterRole", "squall")["rules"])


def test_users_get_topologies_through_the_built_in_roles():
    roles = {r["metadata"]["name"]: r for r in render().of_kind("ClusterRole")}
    edit, view = roles["squall-topology-edit"], roles["squall-topology-view"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert ("squall.dev", "topologies/scale", "patch") in allowed(edit["rules"])  # kubectl scale
    assert {verb for _, _, verb in allowed(view["rules"])} == {"get", "list", "watch"}
    assert not render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "x"}}).of_kind(
        "ClusterRole")


def test_without_the_webhook_neither_its_service_nor_its_permissions():
    with_webhook = render()
    service = with_webhook.one("Service", "squall-webhook")
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 9443, "targetPort": "webhook", "protocol": "TCP"}]
    assert deployment_env(with_webhook)["SQUALL_OPERATOR_WEBHOOK_HOST"] == "squall-webhook.squall-system.svc"
    for values in ({"webhook": {"enabled": False}}, {"watchNamespaces": ["team-a"]}):
        chart = render(values)
        assert [s for s in chart.of_kind("Service") if s["metadata"]["name"] == "squall-webhook"] == []
        assert deployment_env(chart)["SQUALL_OPERATOR_WEBHOOK_HOST"] == ""
        granted = set().union(*(allowed(r["rules"]) for r in chart.of_kind("ClusterRole") + chart.of_kind("Role")))
        assert not granted & WEBHOOK
        assert not chart.of_kind("ValidatingWebhookConfiguration")


def test_the_operator_may_patch_the_one_webhook_configuration_the_chart_makes_and_create_none():
    """A subject that may create or change webhook configurations can intercept any object of the cluster."""
    chart = render()
    (configuration,) = chart.of_kind("ValidatingWebhookConfiguration")
    assert configuration["metadata"]["name"] == admission.CONFIGURATION and not configuration.get("webhooks")
    rules = [r for r in chart.one("ClusterRole", "squall")["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert rules == [{"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
                      "resourceNames": [admission.CONFIGURATION], "verbs": ["patch"]}]
