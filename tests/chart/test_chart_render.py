"""The Helm chart renders, lints and produces valid Kubernetes objects, with default and other values."""

from __future__ import annotations

import json
import re

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
from chart_support import CHART, NAMESPACE, PODMONITOR_API, REPO, Rendered, deployment_env, render

from squall.topology import load_spec
from squall_operator import render as operator_render
from squall_operator.settings import Settings

# the chart's kubeVersion floor, and the newest schemas kubernetes-validate ships
KUBE_VERSIONS = ["1.27.0", kubernetes_validate.latest_version()]

VALUE_SETS = {
    "defaults": {},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"], "rbac": {"sparkExecutors": False},
                   "logLevel": "DEBUG", "topologyPodMonitors": "false"},
    "pod-monitor": {"monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "kps"}, "interval": "15s"},
                                   "alerts": {"enabled": True}, "operatorPodMonitor": {"enabled": True}},
                    "grafanaDashboard": {"namespace": "monitoring", "labels": {"team": "data"},
                                         "annotations": {"grafana_folder": "Squall"}}},
    "service-monitor": {"watchNamespaces": ["streams"],
                        "monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}},
    "customised": {
        "image": {"repository": "registry.example.com/squall", "tag": "1.2.3", "pullPolicy": "Always"},
        "topologyImage": "registry.example.com/topologies:7",
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccount": {"name": "streams-operator", "annotations": {"team": "data"}},
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": 1, "memory": "1Gi"}},
        "podAnnotations": {"example.com/scrape": "false"}, "podLabels": {"team": "data"},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "streams", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["streams"]}]}]}}},
        "priorityClassName": "streams", "topologyPodMonitors": True,
        "grafanaDashboard": {"enabled": False}, "rbac": {"aggregateToDefaultRoles": False},
    },
    "existing-account": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "squall-operator"}},
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"}

# kubernetes-validate has no schema for prometheus-operator's kinds: these cover the fields the chart
# sets, from the monitoring.coreos.com/v1 API reference (unknown fields are refused, as the CRDs do).
_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["key", "operator"],
        "properties": {"key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                       "values": {"type": "array", "items": {"type": "string"}}}}}}}
_ENDPOINT = {"type": "object", "additionalProperties": False, "required": ["port"], "properties": {
    "port": {"type": "string"}, "path": {"type": "string"},
    "interval": {"type": "string", "pattern": "^(([0-9]+)(ms|s|m|h|d|w|y))+$"}}}
_NAMESPACES = {"type": "object", "additionalProperties": False, "properties": {
    "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}}
MONITOR_SPECS = {
    "PodMonitor": {"type": "object", "additionalProperties": False, "required": ["selector", "podMetricsEndpoints"],
                   "properties": {"selector": _SELECTOR, "namespaceSelector": _NAMESPACES,
                                  "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}},
    "ServiceMonitor": {"type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
                       "properties": {"selector": _SELECTOR, "namespaceSelector": _NAMESPACES,
                                      "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}},
    "PrometheusRule": {"type": "object", "additionalProperties": False, "required": ["groups"], "properties": {
        "groups": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "rules"], "properties": {
                "name": {"type": "string"}, "rules": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "required": ["alert", "expr"], "properties": {
                        "alert": {"type": "string"}, "expr": {"type": "string"},
                        "for": {"type": "string", "pattern": "^(([0-9]+)(ms|s|m|h|d|w|y))+$"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}}},
}


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request) -> tuple[str, Rendered]:
    return request.param, render(VALUE_SETS[request.param])


def test_helm_lint_passes_strictly_with_every_value_set():
    for name, values in VALUE_SETS.items():
        report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.27.0")
        assert report["errors"] == [], f"{name}: {report['errors']}"
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert problems == [], f"{name}: helm lint reported {problems}"


def test_every_manifest_passes_kubernetes_validate(rendered):
    name, chart = rendered
    assert chart.objects, f"{name}: nothing rendered"
    for template, obj in chart.objects:
        where = f"{name}: {template} {obj['kind']} {obj['metadata'].get('name')}"
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            # the object's metadata through kubernetes-validate; its spec against the schema above
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]},
                                         KUBE_VERSIONS[-1], strict=True)
            jsonschema.validate(obj["spec"], MONITOR_SPECS[obj["kind"]])
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where} is invalid for Kubernetes {version}: {exc.message} at {list(exc.path)}")


def test_objects_are_placed_in_the_right_namespaces(rendered):
    name, chart = rendered
    allowed = {NAMESPACE, *VALUE_SETS[name].get("watchNamespaces", []),
               VALUE_SETS[name].get("grafanaDashboard", {}).get("namespace", NAMESPACE)}
    for _, obj in chart.objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, f"{obj['kind']} {obj['metadata']['name']} is cluster-scoped"
        else:
            assert namespace in allowed, f"{obj['kind']} {obj['metadata']['name']} in {namespace!r}"
    roles = {obj["metadata"]["namespace"] for obj in chart.of_kind("Role") if not obj["metadata"]["name"].endswith(
        "-leader")}
    rbac = VALUE_SETS[name].get("rbac", {}).get("create", True)
    assert roles == (set(VALUE_SETS[name].get("watchNamespaces", [])) if rbac else set())


def test_the_operator_runs_non_root_on_a_read_only_root_filesystem(rendered):
    name, chart = rendered
    deployment = chart.one("Deployment")
    spec = deployment["spec"]
    # one leads (the Lease), every one serves the webhook: a rolling update keeps one serving throughout
    assert spec["replicas"] == 2 and spec["strategy"] == {"type": "RollingUpdate",
                                                           "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == operator_render.RUN_AS
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], "the image's HOME and scratch space is /tmp"
    assert container["command"] == ["python", "-m", "squall_operator"]
    assert set(container["resources"]) >= {"requests", "limits"}
    endpoint = Settings.from_env(deployment_env(chart)).liveness
    liveness = re.fullmatch(r"http://0\.0\.0\.0:(\d+)(/\S*)", endpoint)
    assert liveness, f"the probes cannot reach {endpoint}"
    port = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("startupProbe", liveness.group(2)), ("livenessProbe", liveness.group(2)),
                        ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert port[get["port"]] == int(liveness.group(1)) and get["path"] == path, probe
    assert pod["serviceAccountName"] == (VALUE_SETS[name].get("serviceAccount", {}).get("name") or "squall")


def test_the_environment_is_what_the_operator_reads():
    source = (REPO / "operator" / "squall_operator" / "settings.py").read_text()
    read = set(re.findall(r"\b(SQUALL_OPERATOR_[A-Z_]+)\b", source))
    for name, values in VALUE_SETS.items():
        env = deployment_env(render(values))
        assert set(env) == read, f"{name}: the chart sets {sorted(env)}, the operator reads {sorted(read)}"
        settings = Settings.from_env(env)
        assert settings.namespaces == tuple(values.get("watchNamespaces", ()))
        assert settings.log_level == values.get("logLevel", "INFO")
    customised = Settings.from_env(deployment_env(render(VALUE_SETS["customised"])))
    assert customised.image == "registry.example.com/topologies:7"
    assert customised.podmonitor == "true"
    assert Settings.from_env(deployment_env(render())).image == "squall:0.1.0", "the chart's appVersion"


def test_the_charts_own_monitor_replaces_the_operators_pod_monitors():
    assert deployment_env(render())["SQUALL_OPERATOR_PODMONITOR"] == "auto"
    assert deployment_env(render(VALUE_SETS["pod-monitor"]))["SQUALL_OPERATOR_PODMONITOR"] == "false"
    assert deployment_env(render(VALUE_SETS["service-monitor"]))["SQUALL_OPERATOR_PODMONITOR"] == "false"
    with pytest.raises(helm.HelmRenderError, match="scraped twice"):
        render({"topologyPodMonitors": "true", "monitoring": {"podMonitor": {"enabled": True}}})
    with pytest.raises(helm.HelmRenderError, match="at most one"):
        render({"monitoring": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}}})


def test_the_operator_serves_metrics_that_its_own_pod_monitor_scrapes():
    rendered = render({"monitoring": {"operatorPodMonitor": {"enabled": True, "labels": {"team": "data"}}}})
    monitor = rendered.one("PodMonitor", "squall-operator")
    pod = rendered.one("Deployment")["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert str(ports["metrics"]) == deployment_env(rendered)["SQUALL_OPERATOR_METRICS_PORT"]
    assert monitor["metadata"]["labels"].items() >= {"release": "kube-prometheus-stack", "team": "data"}.items()
    dashboards = render().one("ConfigMap", "squall-dashboard")["data"]
    assert json.loads(dashboards["squall-operator.json"])["uid"] == "squall-operator"


def test_the_operator_is_scraped_wherever_the_pod_monitor_api_is_served_unless_turned_off():
    # a default install next to kube-prometheus-stack: the operator dashboard has its series
    with_api = render(api_versions=[PODMONITOR_API])
    monitor = with_api.one("PodMonitor", "squall-operator")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "The PodMonitor squall-operator scrapes the operator." in with_api.notes
    # without the API, a PodMonitor would fail the install: none, and NOTES says what to do
    without = render()
    assert not without.of_kind("PodMonitor")
    assert "the cluster served no monitoring.coreos.com/v1 PodMonitor API" in without.notes
    assert "monitoring.operatorPodMonitor.enabled=true" in without.notes
    # an explicit value wins either way
    off = render({"monitoring": {"operatorPodMonitor": {"enabled": False}}}, api_versions=[PODMONITOR_API])
    assert not off.of_kind("PodMonitor")
    assert "monitoring.operatorPodMonitor.enabled=false" in off.notes
    assert render({"monitoring": {"operatorPodMonitor": {"enabled": True}}}).one("PodMonitor", "squall-operator")
    assert render({"monitoring": {"operatorPodMonitor": {"enabled": "false"}}},
                  api_versions=[PODMONITOR_API]).of_kind("PodMonitor") == []


@pytest.mark.parametrize("values", [{}, {"networkPolicy": {"metricsNamespaces": ["observability", "monitoring"]}},
                                    {"networkPolicy": {"metricsNamespaces": []}}])
def test_notes_name_the_namespaces_that_may_scrape_and_how_to_admit_another(values):
    rendered = render(values)
    admitted = re.search(r"NetworkPolicy lets only pods of the namespaces (.+)\n", rendered.notes)
    assert admitted, rendered.notes
    # what the operator renders into each NetworkPolicy, from the environment the chart gives it
    assert admitted.group(1).split(", ") == list(Settings.from_env(deployment_env(rendered)).metrics_from)
    assert "helm upgrade squall charts/squall -n squall-system --reuse-values" in rendered.notes
    assert "--set 'networkPolicy.metricsNamespaces={<its namespace>}'" in rendered.notes
    assert "NetworkPolicy" not in render({**values, "networkPolicy": {"enabled": False}}).notes


def test_a_default_install_s_monitors_are_selected_by_kube_prometheus_stack():
    # kube-prometheus-stack's Prometheus selects monitors labelled release=<its release name>
    assert deployment_env(render())["SQUALL_OPERATOR_PODMONITOR_LABELS"] == "release=kube-prometheus-stack"
    assert deployment_env(render({"monitoring": {"release": "prom"}}))["SQUALL_OPERATOR_PODMONITOR_LABELS"] == (
        "release=prom")
    assert deployment_env(render({"monitoring": {"release": ""}}))["SQUALL_OPERATOR_PODMONITOR_LABELS"] == ""
    monitor = render({"monitoring": {"release": "prom", "serviceMonitor": {"enabled": True}}}).one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"


def _matches(selector: dict, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def test_monitors_select_exactly_the_pods_and_services_the_operator_renders():
    spec = load_spec(REPO / "examples" / "wordcount.yaml")
    objects = operator_render.render(spec, namespace="streams", image="squall:test", podmonitor=False)
    pods = [o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] == "StatefulSet"]
    services = [o["metadata"]["labels"] for o in objects if o["kind"] == "Service"]
    # a role's StatefulSet and PodDisruptionBudget carry its pods' labels, but monitors select only pods
    # and Services
    others = [o["metadata"]["labels"] for o in objects
              if o["kind"] not in ("StatefulSet", "Service", "PodDisruptionBudget")]
    assert len(pods) == 2 and len(services) == 2, "a worker and an acker StatefulSet and Service"
    pod_monitor = render(VALUE_SETS["pod-monitor"]).one("PodMonitor", "squall-topologies")
    service_monitor = render(VALUE_SETS["service-monitor"]).one("ServiceMonitor")
    operator_pod = render().one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert all(_matches(pod_monitor["spec"]["selector"], labels) for labels in pods)
    assert all(_matches(service_monitor["spec"]["selector"], labels) for labels in services)
    for monitor in (pod_monitor, service_monitor):
        assert not any(_matches(monitor["spec"]["selector"], labels) for labels in [*others, operator_pod])
    assert pod_monitor["metadata"]["labels"]["release"] == "kps"
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    assert service_monitor["spec"]["namespaceSelector"] == {"matchNames": ["streams"]}
    # the port the operator names in its pods and Services
    port = {p["name"] for o in objects if o["kind"] == "Service" for p in o["spec"]["ports"]}
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] in port
    assert service_monitor["spec"]["endpoints"][0]["port"] in port


def test_the_chart_ships_the_repository_crd():
    assert (CHART / "crds" / "topology.yaml").read_bytes() == (REPO / "crds" / "topology.yaml").read_bytes(), (
        "charts/squall/crds/topology.yaml differs from crds/topology.yaml: copy it over")
    with helm.Chart.load(CHART) as chart:
        assert [c["filename"] for c in chart.crds] == ["squall/crds/topology.yaml"]


def test_the_dashboard_configmap_holds_the_documented_dashboard():
    docs = (REPO / "docs" / "grafana-dashboard.json").read_text()
    assert (CHART / "dashboards" / "squall.json").read_text() == docs, (
        "charts/squall/dashboards/squall.json and docs/grafana-dashboard.json must be the same file")
    chart = render(VALUE_SETS["pod-monitor"])
    config_map = chart.one("ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["labels"]["team"] == "data"
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Squall"}
    assert json.loads(config_map["data"]["squall.json"]) == json.loads(docs)
    assert not render({"grafanaDashboard": {"enabled": False}}).of_kind("ConfigMap")


def test_notes_give_the_next_steps():
    notes = render().notes
    for step in ("rollout status deployment/squall", "squall submit examples/wordcount.yaml | kubectl apply -f -",
                 "kubectl wait topology/wordcount --for=condition=Ready", "kubectl scale topology/wordcount",
                 "squall:0.1.0", "squall-dashboard"):
        assert step in notes, step
    assert "every namespace" in notes
    # how to see the dashboard, and what kube-prometheus-stack needs to pick the monitors
    for step in ("port-forward svc/kube-prometheus-stack-grafana 3000:80", "http://localhost:3000/d/squall-topology",
                 "http://localhost:3000/d/squall-operator",
                 "labelled release=kube-prometheus-stack", "squall top http://localhost:9090/metrics"):
        assert step in notes, step
    assert "release=kps" in render({"monitoring": {"release": "kps"}}).notes
    assert "carry no release label" in render({"monitoring": {"release": ""}}).notes
    assert "namespaces streams" in render(VALUE_SETS["service-monitor"]).notes


def test_the_operator_runs_the_slim_image_and_topologies_the_worker_image():
    deployment = render().one("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "squall-operator:0.1.0"
    assert deployment_env(render())["SQUALL_OPERATOR_IMAGE"] == "squall:0.1.0"
    tagged = render({"image": {"repository": "registry.example.com/squall", "tag": "7"},
                     "operatorImage": {"repository": "registry.example.com/squall-operator", "tag": ""}})
    (container,) = tagged.one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/squall-operator:7"  # the worker image's tag by default
    assert deployment_env(tagged)["SQUALL_OPERATOR_IMAGE"] == "registry.example.com/squall:7"


@pytest.mark.parametrize("values, fullname, name", [
    ({}, "squall", "squall"),
    ({"nameOverride": "streams"}, "squall-streams", "streams"),
    ({"fullnameOverride": "ops-squall"}, "ops-squall", "squall"),
])
def test_name_overrides_name_every_object(values, fullname, name):
    chart = render(values)
    deployment = chart.one("Deployment")
    assert deployment["metadata"]["name"] == fullname
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == name
    assert chart.one("ClusterRole", fullname) and chart.one("ServiceAccount", fullname)
    assert chart.one("Service", f"{fullname}-webhook")["spec"]["selector"] == deployment["spec"]["selector"][
        "matchLabels"]
    assert deployment_env(chart)["SQUALL_OPERATOR_WEBHOOK_HOST"] == f"{fullname}-webhook.{NAMESPACE}.svc"
    binding = chart.one("ClusterRoleBinding", fullname)
    assert binding["subjects"][0]["name"] == fullname and binding["roleRef"]["name"] == fullname


def test_a_long_full_name_is_cut_where_a_name_or_label_must_fit_63_characters():
    """A Service's name is a DNS-1035 label, as is every label value; other names may be longer (253)."""
    chart = render({"fullnameOverride": "squall-operator-for-the-streaming-platform-team-prod-eu1"})
    short = [obj["metadata"]["name"] for obj in chart.of_kind("Service")]
    short += [value for _, obj in chart.objects for value in (obj["metadata"].get("labels") or {}).values()]
    assert short and all(len(name) <= 63 for name in short), [n for n in short if len(n) > 63]
    service = "squall-operator-for-the-streaming-platform-team-prod-eu-webhook"  # 63
    assert chart.one("Service", service)
    assert deployment_env(chart)["SQUALL_OPERATOR_WEBHOOK_HOST"] == f"{service}.{NAMESPACE}.svc"


def test_notes_send_topologies_to_a_watched_namespace():
    """With watchNamespaces, a Topology applied to kubectl's current namespace is never run: the commands
    name the first watched one (before, they named none, and kubectl wait timed out after 5 minutes)."""
    everywhere = render({}).notes
    assert "squall submit examples/wordcount.yaml | kubectl apply -f -" in everywhere
    notes = render({"watchNamespaces": ["team-a", "team-b"], "rbac": {"sparkExecutors": False}}).notes
    assert "namespaces team-a, team-b only: a Topology elsewhere is left alone" in notes
    for command in ("squall submit examples/wordcount.yaml | kubectl -n team-a apply -f -",
                    "kubectl -n team-a wait topology/wordcount", "kubectl -n team-a scale topology/wordcount",
                    "kubectl -n team-a delete topology/wordcount", "kubectl -n team-a port-forward pod/wordcount"):
        assert command in notes, notes


def test_labels_given_in_values_are_written_once_and_never_replace_the_selectors():
    """A values label of a key the chart writes too made the key appear twice (render() refuses that, as
    helm install does); the dashboard's grafana_dashboard could not take the sidecar's own value."""
    rendered = render({"grafanaDashboard": {"enabled": True, "labels": {"grafana_dashboard": "true"}},
                       "podLabels": {"app.kubernetes.io/component": "mine", "team": "search"},
                       "monitoring": {"podMonitor": {"enabled": True, "labels": {"app.kubernetes.io/part-of": "x"}},
                                      "release": "kps"}})
    assert rendered.one("ConfigMap", "squall-dashboard")["metadata"]["labels"]["grafana_dashboard"] == "true"
    pod = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pod["app.kubernetes.io/component"] == "operator" and pod["team"] == "search"
    monitor = rendered.of_kind("PodMonitor")[0]["metadata"]["labels"]
    assert monitor["app.kubernetes.io/part-of"] == "squall" and monitor["release"] == "kps"


def test_operations_md_lists_every_permission_the_operators_cluster_role_grants():
    """docs/operations.md's RBAC table says it holds exactly what the operator calls; it had left out
    Secrets, NetworkPolicies, deleting pods and the mutating webhook configurations."""
    text = (REPO / "docs" / "operations.md").read_text()
    table = text[text.index("| API group | resources | verbs | why |"):]
    table = table[:table.index("\n\n")]
    documented = set()
    for row in table.splitlines()[2:]:
        group, resources, verbs = (cell.strip() for cell in row.strip("|").split("|")[:3])
        group = "" if group == "core" else group.strip("`")
        for resource in re.findall(r"`([a-z/]+)`", resources):
            documented |= {(group, resource, verb.strip()) for verb in verbs.split(",")}
    role = render({"rbac": {"sparkExecutors": True}, "webhook": {"enabled": True}}).one("ClusterRole", "squall")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted - documented == set()


@pytest.mark.parametrize("webhook", [True, False], ids=["webhook", "no webhook"])
def test_the_operator_pod_lets_in_its_probes_webhook_and_scrapers_only(webhook):
    """The operator's NetworkPolicy selects its pod, names only ports the pod has, lets the metrics port in
    from the scraping namespaces and its own, and the webhook's only while there is one. (This machine's
    cluster does not enforce NetworkPolicies: e2e shows the API server accepts it, not that it blocks.)"""
    chart = render({"webhook": {"enabled": webhook}, "networkPolicy": {"metricsNamespaces": ["prom", NAMESPACE]}})
    policy, pod = chart.one("NetworkPolicy")["spec"], chart.one("Deployment")["spec"]["template"]
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Ingress"]
    named = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
    open_to_all, scrape = policy["ingress"]
    assert "from" not in open_to_all
    assert [p["port"] for p in open_to_all["ports"]] == ["health", *(["webhook"] if webhook else [])]
    assert [p["port"] for p in scrape["ports"]] == ["metrics"]
    assert {p["port"] for rule in policy["ingress"] for p in rule["ports"]} <= named
    assert scrape["from"] == [{"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["prom", NAMESPACE]}]}}]
    assert render({"networkPolicy": {"enabled": False}}).of_kind("NetworkPolicy") == []
