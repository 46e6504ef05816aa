"""Rendering, as pure functions: the important fields of every object, Kubernetes' own schemas for all
of them, and the runtime accepting the environment the operator gives its pods."""

from __future__ import annotations

import json
import pathlib

import kubernetes_validate
import pytest
import yaml

from squall.errors import TopologyError
from squall.process.pod import ProcessConfig
from squall.topology.spec import TopologySpec, load_spec
from squall.transport.tls import issue
from squall_operator.render import child_refs, render, resolve_image, template_hash

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
K8S_VERSION = "1.30.0"  # the oldest Kubernetes the manifests must suit
NS = "prod"

BASE = {
    "name": "wc",
    "workers": 2,
    "messageTimeoutSeconds": 20,
    "spouts": [{"name": "sentences", "className": "examples.wordcount:SentenceSpout"}],
    "bolts": [{"name": "split", "className": "examples.wordcount:SplitSentence", "parallelism": 2,
               "inputs": [{"component": "sentences"}]}],
}
SPARK = {**BASE, "ackers": 1, "image": "squall:1", "imagePullPolicy": "IfNotPresent", "maxSpoutPending": None,
         "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
         "spark": {"executors": 3, "executorMemory": "2g", "conf": {"spark.sql.shuffle.partitions": "8"}}}
NO_ACKERS = {**BASE, "ackers": 0}
SECURE = {"tls": issue("wc"), "metrics_from": ("monitoring",)}  # the operator's defaults


def spec(doc: dict) -> TopologySpec:
    return TopologySpec.from_dict(doc)


def by_kind(manifests: list[dict]) -> dict[tuple[str, str], dict]:
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def container(sts: dict) -> dict:
    return sts["spec"]["template"]["spec"]["containers"][0]


def env_list(sts: dict) -> list[dict]:
    return container(sts)["env"]


def env(sts: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env_list(sts) if "value" in e}


SPECS = {**{f"example {p.stem}": load_spec(p) for p in EXAMPLES},
         "spark": spec(SPARK), "no ackers": spec(NO_ACKERS)}


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("podmonitor", [False, True])
def test_every_manifest_is_valid_kubernetes(name, podmonitor):
    manifests = render(SPECS[name], namespace=NS, image="squall:test", podmonitor=podmonitor, **SECURE)
    assert {"Secret", "NetworkPolicy"} <= {m["kind"] for m in manifests}
    for manifest in manifests:
        if manifest["kind"] == "PodMonitor":  # kubernetes-validate has no schema for prometheus-operator CRDs
            assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    assert ("PodMonitor" in {m["kind"] for m in manifests}) == podmonitor


@pytest.mark.parametrize("name", SPECS)
def test_no_nulls_or_empty_values_that_the_api_server_would_drop(name):
    """The operator compares what it renders with what it reads back, which must hold all of it."""
    def walk(value, path):
        assert value is not None, path
        if isinstance(value, dict):
            assert value or path.endswith("emptyDir"), path
            for key, sub in value.items():
                walk(sub, f"{path}.{key}")
        elif isinstance(value, list):
            assert value, path
            for i, sub in enumerate(value):
                walk(sub, f"{path}[{i}]")
    for manifest in render(SPECS[name], namespace=NS, image="squall:test", podmonitor=True, **SECURE):
        walk(manifest, f"{manifest['kind']}/{manifest['metadata']['name']}")


def test_objects_names_and_labels():
    manifests = render(spec(BASE), namespace=NS, image="squall:test")
    assert [(m["kind"], m["metadata"]["name"]) for m in manifests] == [
        ("ConfigMap", "wc-spec"), ("ServiceAccount", "wc"), ("Service", "wc-worker"), ("StatefulSet", "wc-worker"),
        ("Service", "wc-acker"), ("StatefulSet", "wc-acker"), ("PodDisruptionBudget", "wc-worker"),
        ("PodDisruptionBudget", "wc-acker")]
    for m in manifests:
        assert m["metadata"]["namespace"] == NS
        assert {k: v for k, v in m["metadata"]["labels"].items() if k != "app.kubernetes.io/component"} == {
            "app.kubernetes.io/name": "squall", "app.kubernetes.io/instance": "wc",
            "app.kubernetes.io/part-of": "squall", "app.kubernetes.io/managed-by": "squall-operator"}
        assert (m["apiVersion"], m["kind"], m["metadata"]["name"]) in child_refs("wc")
    spark = render(spec(SPARK), namespace=NS, image="squall:test", podmonitor=True, **SECURE)
    assert {(m["apiVersion"], m["kind"], m["metadata"]["name"]) for m in spark} == set(child_refs("wc"))


def test_config_map_holds_the_whole_spec():
    topology = spec(SPARK)
    cm = by_kind(render(topology, namespace=NS, image="x"))["ConfigMap", "wc-spec"]
    assert TopologySpec.from_dict(yaml.safe_load(cm["data"]["topology.yaml"])) == topology
    assert cm["data"]["generation"] == "0"  # not known
    numbered = by_kind(render(topology, namespace=NS, image="x", generation=7))["ConfigMap", "wc-spec"]
    assert numbered["data"]["generation"] == "7"  # the Topology's, beside the spec file


def test_statefulsets():
    objs = by_kind(render(spec(BASE), namespace=NS, image="squall:test"))
    for role, replicas in (("worker", 2), ("acker", 2)):  # ackers: null = one per worker
        sts = objs["StatefulSet", f"wc-{role}"]
        pod = sts["spec"]["template"]
        assert sts["spec"]["replicas"] == replicas
        assert sts["spec"]["serviceName"] == f"wc-{role}"
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        assert sts["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == role
        c = container(sts)
        assert c["command"] == ["squall", role] and c["image"] == "squall:test"
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports == {"grpc": 7070, "metrics": 9090}
        for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            assert c[probe]["httpGet"]["path"] == path and ports[c[probe]["httpGet"]["port"]] == 9090
        # the default budget: 300 s of startup before liveness counts
        assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] == 300
        assert c["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        security = pod["spec"]["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
        assert pod["spec"]["serviceAccountName"] == "wc"
        assert pod["spec"]["automountServiceAccountToken"] is False  # no Spark: no API access
        # SIGTERM drains for up to the message timeout: the grace period must outlast it
        assert pod["spec"]["terminationGracePeriodSeconds"] > 20
        # the ConfigMap is mounted as a directory: a subPath mount would never see updates (suspend)
        mount = next(m for m in c["volumeMounts"] if m["name"] == "spec")
        assert "subPath" not in mount and mount["readOnly"] is True
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "spec")
        assert volume["configMap"]["name"] == "wc-spec"
        # the spec file, and the Topology generation it comes from beside it
        assert {item["path"] for item in volume["configMap"]["items"]} == {"topology.yaml", "generation"}
        assert env(sts)["SQUALL_TOPOLOGY"] == f"{mount['mountPath']}/topology.yaml"
        assert "imagePullPolicy" not in c
    assert container(by_kind(render(spec(SPARK), namespace=NS, image="x"))["StatefulSet", "wc-worker"])[
        "resources"] == SPARK["resources"]


def test_environment_is_the_process_contract():
    objs = by_kind(render(spec(BASE), namespace=NS, image="squall:test"))
    assert env(objs["StatefulSet", "wc-worker"]) == {
        "SQUALL_TOPOLOGY": "/etc/squall/topology.yaml",
        "SQUALL_NAMESPACE": NS,
        "SQUALL_WORKER_PEERS": "wc-worker-{i}.wc-worker.prod.svc:7070",
        "SQUALL_ACKER_PEERS": "wc-acker-{i}.wc-acker.prod.svc:7070",
        "SQUALL_GRPC_PORT": "7070",
        "SQUALL_METRICS_PORT": "9090",
        # user code may fork (PySpark's JVM) while gRPC streams: gRPC's fork handlers crashed the children
        "GRPC_ENABLE_FORK_SUPPORT": "false",
    }
    # an acker runs no user code: numpy's OpenBLAS keeps to one thread there, not one per core of the node
    assert env(objs["StatefulSet", "wc-acker"]) == env(objs["StatefulSet", "wc-worker"]) | {"OPENBLAS_NUM_THREADS": "1"}


@pytest.mark.parametrize("role,hostname,index", [("worker", "wc-worker-1", 1), ("acker", "wc-acker-0", 0)])
def test_the_runtime_accepts_the_pod_environment(tmp_path, role, hostname, index):
    """What a pod gets (env, and the ConfigMap as its spec file) is what squall worker/acker need."""
    objs = by_kind(render(spec(BASE), namespace=NS, image="squall:test"))
    spec_file = tmp_path / "topology.yaml"
    spec_file.write_text(objs["ConfigMap", "wc-spec"]["data"]["topology.yaml"])
    pod_env = env(objs["StatefulSet", f"wc-{role}"]) | {"SQUALL_TOPOLOGY": str(spec_file), "HOSTNAME": hostname}
    cfg = ProcessConfig.from_env(role, pod_env)
    assert cfg.index == index
    assert cfg.worker_addresses == [f"wc-worker-{i}.wc-worker.{NS}.svc:7070" for i in range(2)]
    assert cfg.acker_addresses == [f"wc-acker-{i}.wc-acker.{NS}.svc:7070" for i in range(2)]
    assert (cfg.grpc_port, cfg.metrics_port) == (7070, 9090)
    assert cfg.spec.message_timeout_seconds == 20


def test_headless_services_resolve_pods_before_they_are_ready():
    objs = by_kind(render(spec(BASE), namespace=NS, image="x"))
    for role in ("worker", "acker"):
        svc, sts = objs["Service", f"wc-{role}"], objs["StatefulSet", f"wc-{role}"]
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["publishNotReadyAddresses"] is True
        assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"grpc": 7070, "metrics": 9090}


def test_suspending_changes_only_the_config_map():
    running = render(spec(BASE), namespace=NS, image="x")
    suspended = render(spec({**BASE, "suspended": True}), namespace=NS, image="x")
    changed = [a["kind"] for a, b in zip(running, suspended, strict=True) if a != b]
    assert changed == ["ConfigMap"]


@pytest.mark.parametrize("change, plan, pods", [
    # what processes agree on: a new plan, the pods switched to it in place (no new template)
    ({"workers": 3}, True, False), ({"ackers": 1}, True, False),
    ({"bolts": [{**BASE["bolts"][0], "parallelism": 3}]}, True, False), ({"config": {"key": "value"}}, True, False),
    # how pods are made: new pods, the same plan
    ({"imagePullPolicy": "Always"}, False, True), ({"resources": {"requests": {"cpu": "2"}}}, False, True),
    ({"upgradeStrategy": "Recreate"}, False, False),
    # both: the timeout is the processes' and the pods' termination grace period
    ({"messageTimeoutSeconds": 60}, True, True),
])
def test_a_spec_change_makes_a_new_plan_new_pod_templates_or_both(change, plan, pods):
    before = by_kind(render(spec(BASE), namespace=NS, image="x"))
    after = by_kind(render(spec({**BASE, **change}), namespace=NS, image="x"))
    assert (spec(BASE).fingerprint() != spec({**BASE, **change}).fingerprint()) == plan
    for sts in ("wc-worker", "wc-acker"):
        assert (before["StatefulSet", sts]["spec"]["template"] != after["StatefulSet", sts]["spec"]["template"]) == pods
        assert (template_hash(before["StatefulSet", sts]) != template_hash(after["StatefulSet", sts])) == pods


def test_no_ackers():
    objs = by_kind(render(spec(NO_ACKERS), namespace=NS, image="x"))
    assert ("StatefulSet", "wc-acker") not in objs and ("Service", "wc-acker") not in objs
    assert yaml.safe_load(objs["ConfigMap", "wc-spec"]["data"]["topology.yaml"])["ackers"] == 0


def test_spark_driver_and_executors():
    objs = by_kind(render(spec(SPARK), namespace=NS, image="squall:1"))
    worker, acker = objs["StatefulSet", "wc-worker"], objs["StatefulSet", "wc-acker"]
    names = [e["name"] for e in env_list(worker)]
    # $(SQUALL_POD_NAME) is only expanded when the variable is defined earlier in the list
    assert names.index("SQUALL_POD_NAME") < names.index("SQUALL_SPARK_CONF")
    assert env_list(worker)[names.index("SQUALL_POD_NAME")]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}}
    assert json.loads(env(worker)["SQUALL_SPARK_CONF"]) == {
        "spark.master": "k8s://https://kubernetes.default.svc:443",
        "spark.submit.deployMode": "client",
        "spark.driver.host": "$(SQUALL_POD_NAME).wc-worker.prod.svc",
        "spark.driver.port": "7078",
        "spark.driver.blockManager.port": "7079",
        "spark.kubernetes.namespace": NS,
        "spark.kubernetes.driver.pod.name": "$(SQUALL_POD_NAME)",
        "spark.kubernetes.container.image": "squall:1",
        "spark.kubernetes.authenticate.driver.serviceAccountName": "wc",
        "spark.executor.instances": "3",
        "spark.executor.cores": "1",
        "spark.executor.memory": "2g",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "8",
        # the executors carry the topology's labels, so its NetworkPolicy lets them reach their driver
        "spark.kubernetes.executor.label.app.kubernetes.io/name": "squall",
        "spark.kubernetes.executor.label.app.kubernetes.io/instance": "wc",
        "spark.kubernetes.executor.label.app.kubernetes.io/component": "spark-executor",
        # hardened as the worker pods are (squall_operator.render.executor_pod)
        "spark.kubernetes.executor.podTemplateFile": "/etc/squall/executor-pod-template.yaml",
        "spark.kubernetes.executor.podTemplateContainerName": "spark-kubernetes-executor",
    }
    assert "SQUALL_SPARK_CONF" not in env(acker) and "SQUALL_POD_NAME" not in {e["name"] for e in env_list(acker)}
    assert worker["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert acker["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert {p["name"]: p["port"] for p in objs["Service", "wc-worker"]["spec"]["ports"]} == {
        "grpc": 7070, "metrics": 9090, "spark-driver": 7078, "spark-blockmgr": 7079}
    assert {p["containerPort"] for p in container(worker)["ports"]} == {7070, 9090, 7078, 7079}
    assert {p["port"] for p in objs["Service", "wc-acker"]["spec"]["ports"]} == {7070, 9090}
    assert container(worker)["imagePullPolicy"] == "IfNotPresent"

    role = objs["Role", "wc-spark"]
    assert role["rules"] == [{"apiGroups": [""],
                              "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
                              "verbs": ["create", "get", "list", "watch", "delete", "deletecollection", "patch"]}]
    binding = objs["RoleBinding", "wc-spark"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "wc-spark"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "wc", "namespace": NS}]

    own_image = json.loads(env(by_kind(render(
        spec({**SPARK, "spark": {"executorImage": "spark:3"}}), namespace=NS, image="squall:1"))[
        "StatefulSet", "wc-worker"])["SQUALL_SPARK_CONF"])
    assert own_image["spark.kubernetes.container.image"] == "spark:3"
    assert ("Role", "wc-spark") not in by_kind(render(spec(BASE), namespace=NS, image="x"))


def selects(selector: dict, labels: dict) -> bool:
    """Whether a Kubernetes label selector (matchLabels, and matchExpressions with In) selects ``labels``."""
    return selector.get("matchLabels", {}).items() <= labels.items() and all(
        labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", ()))


def test_pod_monitor_scrapes_workers_and_ackers():
    objs = by_kind(render(spec(BASE), namespace=NS, image="x", podmonitor=True))
    monitor = objs["PodMonitor", "wc"]
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
    for role in ("worker", "acker"):
        pod_labels = objs["StatefulSet", f"wc-{role}"]["spec"]["template"]["metadata"]["labels"]
        assert selects(monitor["spec"]["selector"], pod_labels)
    # kube-prometheus-stack selects monitors by its release label; the monitor's own labels win
    labelled = by_kind(render(spec(BASE), namespace=NS, image="x", podmonitor=True,
                              monitor_labels={"release": "kps", "app.kubernetes.io/instance": "other"}))
    assert labelled["PodMonitor", "wc"]["metadata"]["labels"] == {**monitor["metadata"]["labels"], "release": "kps"}


def test_a_topology_named_like_the_helm_release_selects_none_of_the_operators_pods():
    """The chart's operator pod carries name squall and instance <release>: a Topology named like the release,
    in the operator's namespace, had its NetworkPolicy fence the operator pod off from the API server (every
    Topology then refused by the webhook) and its PodMonitor scrape it (found by the operator audit)."""
    objs = by_kind(render(spec({**BASE, "name": "squall"}), namespace=NS, image="x", podmonitor=True,
                          tls=issue("squall"), metrics_from=["monitoring"]))
    operator_pod = {"app.kubernetes.io/name": "squall", "app.kubernetes.io/instance": "squall",
                    "app.kubernetes.io/component": "operator"}
    for selector in (objs["NetworkPolicy", "squall"]["spec"]["podSelector"],
                     objs["PodMonitor", "squall"]["spec"]["selector"]):
        assert not selects(selector, operator_pod)
        for role in ("worker", "acker"):
            assert selects(selector, objs["StatefulSet", f"squall-{role}"]["spec"]["template"]["metadata"]["labels"])


def test_image_comes_from_the_spec_or_the_operator():
    assert resolve_image(spec({**BASE, "image": "mine:1"}), "default:1") == "mine:1"
    assert resolve_image(spec(BASE), "default:1") == "default:1"
    with pytest.raises(TopologyError, match="has no image: set spec.image"):
        resolve_image(spec(BASE), None)


@pytest.mark.parametrize("budget, failures", [(120, 60), (121, 61), (10, 5)])
def test_the_startup_budget_is_the_startup_probes(budget, failures):
    sts = by_kind(render(spec({**BASE, "startupTimeoutSeconds": budget}), namespace=NS, image="x"))[
        "StatefulSet", "wc-worker"]
    probe = container(sts)["startupProbe"]
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (2, failures)  # never less than the budget
    with pytest.raises(TopologyError, match="startupTimeoutSeconds: must be at least 10"):
        spec({**BASE, "startupTimeoutSeconds": 5})


def test_a_disruption_budget_per_role_and_soft_spreading_across_nodes():
    objs = by_kind(render(spec(BASE), namespace=NS, image="x"))
    for role in ("worker", "acker"):
        budget = objs["PodDisruptionBudget", f"wc-{role}"]
        pod = objs["StatefulSet", f"wc-{role}"]["spec"]["template"]
        assert budget["apiVersion"] == "policy/v1" and budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert term["podAffinityTerm"]["labelSelector"] == budget["spec"]["selector"]  # its own role's pods
        (spread,) = pod["spec"]["topologySpreadConstraints"]
        assert spread["whenUnsatisfiable"] == "ScheduleAnyway" and spread["topologyKey"] == "kubernetes.io/hostname"

    older = by_kind(render(spec({**BASE, "disruptionBudget": {"maxUnavailable": "25%"}}), namespace=NS, image="x",
                           pdb_api="policy/v1beta1"))
    assert older["PodDisruptionBudget", "wc-worker"]["apiVersion"] == "policy/v1beta1"
    assert older["PodDisruptionBudget", "wc-worker"]["spec"]["maxUnavailable"] == "25%"
    for off in (render(spec({**BASE, "disruptionBudget": None}), namespace=NS, image="x"),
                render(spec(BASE), namespace=NS, image="x", pdb_api=None)):
        assert "PodDisruptionBudget" not in {m["kind"] for m in off}
    assert ("PodDisruptionBudget", "wc-acker") not in by_kind(render(spec(NO_ACKERS), namespace=NS, image="x"))


@pytest.mark.parametrize("value, message", [(0, "at least 1 pod must be allowed to go"),
                                            ("25", "a percentage is written as '25%'"), (True, "use a number of pods")])
def test_a_budget_that_would_block_drains_is_refused(value, message):
    with pytest.raises(TopologyError, match=f"disruptionBudget.maxUnavailable: {message}"):
        spec({**BASE, "disruptionBudget": {"maxUnavailable": value}})


def test_a_pod_template_replaces_the_default_spreading():
    zones = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                            "whenUnsatisfiable": "DoNotSchedule",
                                            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "wc"}}}],
             "affinity": {"podAntiAffinity": None}}
    pod = by_kind(render(spec({**BASE, "podTemplate": {"workers": {"spec": zones}}}), namespace=NS, image="x"))[
        "StatefulSet", "wc-worker"]["spec"]["template"]["spec"]
    assert [c["topologyKey"] for c in pod["topologySpreadConstraints"]] == ["kubernetes.io/hostname",
                                                                            "topology.kubernetes.io/zone"]
    assert "affinity" not in pod  # emptied: left out, as the API server would
