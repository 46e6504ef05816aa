"""Per-role pod templates: merged strategically over the rendered pods, and refused (naming the field)
where they set an unknown field or one the operator owns."""

from __future__ import annotations

import copy
import json
import re

import kubernetes_validate
import pytest
import yaml
from operator_kit import SPEC, STATEFULSETS, condition, create_topology, eventually, obj, patch_spec, status
from test_render import BASE, K8S_VERSION, NS, SPARK, by_kind, container, env

from squall.errors import TopologyError
from squall_operator.pods import merge
from squall_operator.render import render, template_hash
from squall_operator.resource import check_spec

WORKERS = {
    "metadata": {"labels": {"team": "search"}, "annotations": {"example.com/owner": "ops"}},
    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
    "spec": {
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "squall", "effect": "NoSchedule"}],
        "priorityClassName": "streaming",
        "serviceAccountName": "kafka-reader",
        "containers": [
            {"name": "worker",
             "env": [{"name": "KAFKA_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "kafka", "key": "password"}}}],
             "envFrom": [{"secretRef": {"name": "kafka-client"}}],
             "volumeMounts": [{"name": "shared", "mountPath": "/data"}]},
            {"name": "log-shipper", "image": "fluent-bit:3",
             "volumeMounts": [{"name": "shared", "mountPath": "/data"}]},
        ],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "logcount"}}],
    },
}
TEMPLATED = {**BASE, "resources": {"requests": {"cpu": "250m"}}, "podTemplate": {"workers": WORKERS}}


def pod_of(manifests: list[dict], role: str) -> dict:
    """A StatefulSet's pod template, less its hash (which any change to it changes)."""
    pod = copy.deepcopy(by_kind(manifests)["StatefulSet", f"wc-{role}"]["spec"]["template"])
    del pod["metadata"]["annotations"]["squall.dev/template-hash"]
    return pod


def test_a_workers_template_merges_over_the_rendered_pod_and_leaves_the_ackers_alone():
    manifests = render(check_spec("wc", TEMPLATED), namespace=NS, image="squall:1")
    plain = render(check_spec("wc", {**BASE, "resources": TEMPLATED["resources"]}), namespace=NS, image="squall:1")
    pod, before = pod_of(manifests, "worker"), pod_of(plain, "worker")

    assert pod["metadata"]["labels"] == {**before["metadata"]["labels"], "team": "search"}
    assert pod["metadata"]["annotations"] == {**before["metadata"]["annotations"], "example.com/owner": "ops"}
    for key in ("imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName", "serviceAccountName"):
        assert pod["spec"][key] == WORKERS["spec"][key], key
    main, sidecar = pod["spec"]["containers"]
    assert (main["name"], sidecar["name"]) == ("worker", "log-shipper")
    assert main["command"] == ["squall", "worker"] and main["image"] == "squall:1"  # the operator's, kept
    assert main["env"] == before["spec"]["containers"][0]["env"] + WORKERS["spec"]["containers"][0]["env"]
    assert main["envFrom"] == [{"secretRef": {"name": "kafka-client"}}]
    assert [m["mountPath"] for m in main["volumeMounts"]] == ["/etc/squall", "/tmp", "/data"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["spec", "tmp", "shared"]
    assert main["resources"] == WORKERS["resources"]  # the role's own, typed
    assert pod["spec"]["securityContext"] == before["spec"]["securityContext"]

    # the ackers have no template: as rendered, with the topology's resources
    assert pod_of(manifests, "acker") == pod_of(plain, "acker")
    assert container(by_kind(manifests)["StatefulSet", "wc-acker"])["resources"] == {"requests": {"cpu": "250m"}}
    for manifest in manifests:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_a_template_change_replaces_the_pods_of_that_role_only():
    changed = copy.deepcopy(TEMPLATED)
    changed["podTemplate"]["workers"]["spec"]["nodeSelector"] = {"disk": "nvme"}
    before = by_kind(render(check_spec("wc", TEMPLATED), namespace=NS, image="x"))
    after = by_kind(render(check_spec("wc", changed), namespace=NS, image="x"))
    assert after["StatefulSet", "wc-worker"]["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "nvme"}
    assert template_hash(after["StatefulSet", "wc-worker"]) != template_hash(before["StatefulSet", "wc-worker"])
    assert template_hash(after["StatefulSet", "wc-acker"]) == template_hash(before["StatefulSet", "wc-acker"])


def test_strategic_merge():
    base = {"containers": [{"name": "worker", "env": [{"name": "A", "value": "1"}], "image": "x"}],
            "tolerations": [{"key": "a"}], "affinity": {"nodeAffinity": {"x": 1}}, "dnsPolicy": "ClusterFirst"}
    patch = {"containers": [{"name": "worker", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]}],
             "tolerations": [{"key": "b"}], "affinity": {"podAffinity": {"y": 2}}, "dnsPolicy": None}
    assert merge(base, patch) == {
        "containers": [{"name": "worker", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                        "image": "x"}],
        "tolerations": [{"key": "b"}],  # no merge key: replaced, as Kubernetes does
        "affinity": {"nodeAffinity": {"x": 1}, "podAffinity": {"y": 2}}}
    assert base["containers"][0]["env"] == [{"name": "A", "value": "1"}]  # not modified


def test_a_template_may_set_the_processes_log_level_of_the_contracts_variables():
    workers = {"spec": {"containers": [{"name": "worker", "env": [{"name": "SQUALL_LOG_LEVEL", "value": "DEBUG"}]}]}}
    pod = pod_of(render(check_spec("wc", {**BASE, "podTemplate": {"workers": workers}}), namespace=NS,
                        image="squall:1"), "worker")
    assert {"name": "SQUALL_LOG_LEVEL", "value": "DEBUG"} in pod["spec"]["containers"][0]["env"]


def test_spark_executors_template_goes_to_the_pod_template_file():
    executors = {"metadata": {"labels": {"team": "ml"}}, "resources": {"limits": {"nvidia.com/gpu": 1}},
                 "spec": {"nodeSelector": {"gpu": "true"}}}
    topology = check_spec("wc", {**SPARK, "podTemplate": {"sparkExecutors": executors}})
    objs = by_kind(render(topology, namespace=NS, image="squall:1"))
    template = yaml.safe_load(objs["ConfigMap", "wc-spec"]["data"]["executor-pod-template.yaml"])
    assert template == {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"team": "ml"}}, "spec": {
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "spark-kubernetes-executor", "resources": {"limits": {"nvidia.com/gpu": 1}},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        "nodeSelector": {"gpu": "true"}}}
    worker = objs["StatefulSet", "wc-worker"]
    conf = yaml.safe_load(env(worker)["SQUALL_SPARK_CONF"])
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/squall/executor-pod-template.yaml"
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == "spark-kubernetes-executor"
    items = next(v for v in worker["spec"]["template"]["spec"]["volumes"] if v["name"] == "spec")["configMap"]["items"]
    assert {i["path"] for i in items} == {"topology.yaml", "generation", "executor-pod-template.yaml"}


def test_spark_executors_are_hardened_without_a_template_of_their_own():
    """Spark made its executors from nothing of the operator's: privilege escalation allowed, every
    capability the runtime gives, the namespace's default API token (found by the security audit)."""
    objs = by_kind(render(check_spec("wc", SPARK), namespace=NS, image="squall:1"))
    template = yaml.safe_load(objs["ConfigMap", "wc-spec"]["data"]["executor-pod-template.yaml"])
    assert template["spec"]["automountServiceAccountToken"] is False
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    assert template["spec"]["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                                    "capabilities": {"drop": ["ALL"]}}
    conf = yaml.safe_load(env(objs["StatefulSet", "wc-worker"])["SQUALL_SPARK_CONF"])
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/squall/executor-pod-template.yaml"
    # an executor image of its own runs as its user, which may be a name the kubelet cannot check (found
    # by the review: apache/spark's USER spark failed to start with runAsNonRoot and no runAsUser)
    own = check_spec("wc", {**SPARK, "spark": {**SPARK["spark"], "executorImage": "apache/spark:3.5.1"}})
    template = yaml.safe_load(by_kind(render(own, namespace=NS, image="squall:1"))[
        "ConfigMap", "wc-spec"]["data"]["executor-pod-template.yaml"])
    assert template["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}


def test_containers_a_template_adds_run_without_privilege_escalation_and_capabilities():
    """A sidecar or an init container got the runtime's defaults (escalation allowed, the default
    capabilities): a setuid binary in its image made it root (found by the security audit). What a
    container adds within the restricted standard (NET_BIND_SERVICE) it keeps."""
    template = {"spec": {"initContainers": [{"name": "fetch-model", "image": "curl:8"}],
                         "containers": [{"name": "proxy", "image": "envoy:1", "securityContext": {
                             "capabilities": {"add": ["NET_BIND_SERVICE"]}}}]}}
    pod = pod_of(render(check_spec("wc", {**BASE, "podTemplate": {"workers": template}}), namespace=NS,
                        image="squall:1"), "worker")
    init, = pod["spec"]["initContainers"]
    proxy = next(c for c in pod["spec"]["containers"] if c["name"] == "proxy")
    assert init["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert proxy["securityContext"] == {"allowPrivilegeEscalation": False,
                                        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}


@pytest.mark.parametrize("template, message", [
    ({"spec": {"hostNetwork": True}}, "podTemplate.workers.spec.hostNetwork: the pods do not share the node's"),
    ({"spec": {"hostPID": True}}, "podTemplate.workers.spec.hostPID: the pods do not share the node's"),
    ({"spec": {"hostIPC": True}}, "podTemplate.workers.spec.hostIPC: the pods do not share the node's"),
    ({"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
     "podTemplate.workers.spec.volumes[0].hostPath: hostPath volumes are not allowed"),
    ({"spec": {"volumes": [{"name": "share", "nfs": {"server": "nas", "path": "/x"}}]}},
     "podTemplate.workers.spec.volumes[0].nfs: nfs volumes are not allowed"),
    ({"spec": {"containers": [{"name": "sidecar", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}]}]}},
     "podTemplate.workers.spec.containers[0].ports[0].hostPort: the pods take no port of the node"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": {"capabilities": {
        "drop": ["ALL"], "add": ["SYS_ADMIN"]}}}]}},
     "containers[0].securityContext.capabilities.add: SYS_ADMIN is not allowed"),
    ({"spec": {"initContainers": [{"name": "init", "image": "x", "securityContext": {"capabilities": {
        "add": ["SYS_PTRACE"]}}}]}},
     "initContainers[0].securityContext.capabilities.add: SYS_PTRACE is not allowed"),
    ({"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
     "podTemplate.workers.spec.securityContext.seccompProfile.type: Unconfined is not allowed"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]}},
     "containers[0].securityContext.appArmorProfile.type: Unconfined is not allowed"),
    ({"spec": {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}},
     "podTemplate.workers.spec.securityContext.seLinuxOptions: only the types"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": {"procMount": "Unmasked"}}]}},
     "containers[0].securityContext.procMount: only Default is allowed"),
    ({"spec": {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}},
     "podTemplate.workers.spec.securityContext.sysctls[0]: kernel.msgmax is not a safe sysctl"),
    ({"spec": {"ephemeralContainers": [{"name": "debug", "image": "x", "securityContext": {"privileged": True}}]}},
     "podTemplate.workers.spec.ephemeralContainers[0].securityContext.privileged: the pods run unprivileged"),
    # a sidecar that drops one capability kept all the others (found by the review)
    ({"spec": {"containers": [{"name": "proxy", "image": "x", "securityContext": {"capabilities": {
        "drop": ["NET_RAW"]}}}]}},
     "podTemplate.workers.spec.containers[0].securityContext.capabilities.drop: the pods drop ALL capabilities"),
    ({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}}},
     "podTemplate.workers.metadata.annotations.container.apparmor.security.beta.kubernetes.io/worker: "
     "unconfined is not allowed"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_what_the_restricted_pod_security_standard_forbids_is_refused(template, message):
    """Whoever may create a Topology got pods on the node's network, its root filesystem, or with any
    capability, through the pod template; the gate refused only privileged and root (found by the
    security audit). Now it keeps Kubernetes' Pod Security Standard restricted."""
    assert message in refused(template)
    assert "Pod Security Standard restricted" in refused(template) or "unprivileged" in message \
        or "drop ALL" in message


def test_what_the_restricted_standard_allows_passes():
    check_spec("wc", {**BASE, "podTemplate": {"workers": {"spec": {
        "volumes": [{"name": "model", "persistentVolumeClaim": {"claimName": "models"}},
                    {"name": "creds", "projected": {"sources": [{"secret": {"name": "s"}}]}}],
        "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
                            "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}],
                            "seLinuxOptions": {"level": "s0:c123,c456"}},
        "serviceAccountName": "model-reader",  # workload identity: the namespace's own accounts
        "containers": [{"name": "worker", "securityContext": {"capabilities": {"drop": ["ALL"],
                                                                               "add": ["NET_BIND_SERVICE"]}}}]}}}})


def refused(template: dict, role: str = "workers", base: dict = BASE) -> str:
    with pytest.raises(TopologyError) as info:
        check_spec("wc", {**base, "podTemplate": {role: template}})
    return str(info.value)


@pytest.mark.parametrize("template, message", [
    ({"spec": {"containers": [{"name": "worker", "command": ["sh"]}]}},
     "podTemplate.workers.spec.containers[0].command: the operator sets the command; remove it"),
    ({"spec": {"containers": [{"name": "worker", "ports": [{"containerPort": 80}]}]}},
     "podTemplate.workers.spec.containers[0].ports: the ports are the pod contract's"),
    ({"spec": {"containers": [{"name": "worker", "volumeMounts": [{"name": "cfg", "mountPath": "/etc/squall"}]}]}},
     "podTemplate.workers.spec.containers[0].volumeMounts[0]: the spec mount (/etc/squall)"),
    ({"spec": {"volumes": [{"name": "spec", "emptyDir": {}}]}},
     "podTemplate.workers.spec.volumes[0]: the volume 'spec' is the operator's"),
    ({"spec": {"volumes": [{"name": "tls", "secret": {"secretName": "kafka-client-tls"}}]}},
     "podTemplate.workers.spec.volumes[0]: the volume 'tls' is the operator's; name yours differently"),
    ({"spec": {"containers": [{"name": "worker", "volumeMounts": [{"name": "mine", "mountPath": "/etc/squall-tls"}]}]}},
     "containers[0].volumeMounts[0]: the spec mount (/etc/squall), the TLS mount (/etc/squall-tls), the state"),
    ({"spec": {"containers": [{"name": "worker", "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}]}]}},
     "containers[0].volumeMounts[0]: the spec mount (/etc/squall), the TLS mount (/etc/squall-tls), the state"),
    ({"spec": {"securityContext": {"runAsNonRoot": False}}},
     "podTemplate.workers.spec.securityContext.runAsNonRoot: the pods run as non-root"),
    ({"spec": {"containers": [{"name": "sidecar", "image": "x", "securityContext": {"runAsUser": 0}}]}},
     "podTemplate.workers.spec.containers[0].securityContext.runAsUser: 0 is root"),
    ({"spec": {"containers": [{"name": "worker", "resources": {"limits": {"cpu": 1}}}]}},
     "containers[0].resources: use podTemplate.<role>.resources (typed)"),
    ({"spec": {"containers": [{"name": "worker", "env": [{"name": "SQUALL_WORKERS", "value": "9"}]}]}},
     "containers[0].env[0]: SQUALL_WORKERS is the process contract's"),
    ({"metadata": {"labels": {"app.kubernetes.io/component": "x"}}},
     "podTemplate.workers.metadata.labels.app.kubernetes.io/component: the selector labels are the operator's"),
    ({"spec": {"nodeSelectr": {"disk": "ssd"}}},
     "podTemplate.workers.spec.nodeSelectr: unknown field of PodSpec; did you mean 'nodeSelector'?"),
    ({"spec": {"containers": [{"name": "worker", "envFrom": [{"secretRf": {"name": "s"}}]}]}},
     "podTemplate.workers.spec.containers[0].envFrom[0].secretRf: unknown field of EnvFromSource; "
     "did you mean 'secretRef'?"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_what_the_operator_owns_and_unknown_fields_are_refused(template, message):
    assert message in refused(template)


@pytest.mark.parametrize("template, message", [
    ({"spec": {"securityContext": None}},
     "podTemplate.workers.spec.securityContext: null would remove the pods' non-root security context; "
     "set only the keys you change"),
    ({"spec": {"securityContext": {"runAsNonRoot": None}}},
     "podTemplate.workers.spec.securityContext.runAsNonRoot: null would remove the operator's runAsNonRoot"),
    ({"spec": {"securityContext": {"seccompProfile": None}}},
     "podTemplate.workers.spec.securityContext.seccompProfile: null would remove the operator's seccompProfile"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": None}]}},
     "podTemplate.workers.spec.containers[0].securityContext: null would remove the non-root security context"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": {"capabilities": None}}]}},
     "containers[0].securityContext.capabilities: null would remove the operator's capabilities"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": {"capabilities": {"drop": None}}}]}},
     "containers[0].securityContext.capabilities.drop: the pods drop ALL capabilities"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}]}},
     "containers[0].securityContext.capabilities.drop: the pods drop ALL capabilities"),
    ({"spec": {"containers": [{"name": "worker", "securityContext": {"allowPrivilegeEscalation": None}}]}},
     "containers[0].securityContext.allowPrivilegeEscalation: null would remove the operator's"),
    ({"spec": {"volumes": None}},
     "podTemplate.workers.spec.volumes: null would remove the operator's volumes (the spec, TLS, /tmp); list only "
     "yours"),
    ({"spec": {"containers": None}},
     "podTemplate.workers.spec.containers: null would remove the main container"),
    ({"spec": {"containers": [{"name": "worker", "volumeMounts": None}]}},
     "podTemplate.workers.spec.containers[0].volumeMounts: null would remove the spec mount (/etc/squall)"),
    ({"spec": {"containers": [{"name": "worker", "env": None}]}},
     "podTemplate.workers.spec.containers[0].env: null would remove the process contract's SQUALL_* variables"),
    ({"spec": {"containers": [{"name": "worker", "image": None}]}},
     "podTemplate.workers.spec.containers[0].image: null would remove the image; spec.image sets it"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_null_that_would_remove_what_the_operator_owns_is_refused(template, message):
    assert message in refused(template)
    assert message.replace("workers", "ackers") in \
        refused(yaml.safe_load(yaml.safe_dump(template).replace("name: worker", "name: acker")), "ackers")


def test_a_null_may_remove_what_the_operator_does_not_own():
    """The same paths through the admission webhook's and the operator's check: a null elsewhere is a
    strategic merge's way to remove a default, and what is left of the security context stays restricted."""
    template = {"spec": {
        "affinity": {"podAntiAffinity": None},
        # OpenShift assigns the user and group itself: removing the operator's keeps the pods non-root
        "securityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
        "containers": [{"name": "worker", "securityContext": {"readOnlyRootFilesystem": False,
                                                              "capabilities": {"drop": ["ALL", "NET_RAW"]}}},
                       {"name": "log-shipper", "image": "fluent-bit:3", "env": None, "securityContext": None}],
    }}
    pod = pod_of(render(check_spec("wc", {**BASE, "podTemplate": {"workers": template}}), namespace=NS,
                        image="squall:1"), "worker")
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": False, "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL", "NET_RAW"]}}
    assert "podAntiAffinity" not in pod["spec"].get("affinity", {})


def test_a_null_in_what_a_template_adds_is_left_out_as_the_api_server_stores_it():
    """A sidecar's ``resources: null`` (what Helm's toYaml writes for an empty value) and a null in a map
    the rendered pod has not were kept: the StatefulSet never read back as rendered, and was written again at
    every reconcile (found by the operator audit)."""
    template = {"spec": {"containers": [{"name": "log-shipper", "image": "fluent-bit:3", "resources": None,
                                         "env": [{"name": "A", "value": "1", "valueFrom": None}]}],
                         "nodeSelector": {"disk": None}, "tolerations": [{"key": "k", "value": None}]}}
    sts = next(m for m in render(check_spec("wc", {**BASE, "podTemplate": {"workers": template}}), namespace=NS,
                                 image="squall:1") if m["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]
    assert "null" not in json.dumps(sts)
    assert pod["spec"]["containers"][1]["env"] == [{"name": "A", "value": "1"}]
    assert "nodeSelector" not in pod["spec"] and pod["spec"]["tolerations"] == [{"key": "k"}]


def test_the_acker_main_container_is_the_acker():
    assert "containers[0].command" in refused({"spec": {"containers": [{"name": "acker", "command": ["x"]}]}},
                                              "ackers")
    check_spec("wc", {**BASE, "podTemplate": {"ackers": {"spec": {"containers": [
        {"name": "worker-sidecar", "image": "x", "command": ["sleep", "1"]}]}}}})  # a sidecar's own command


def test_spark_executors_need_spark():
    assert "podTemplate.sparkExecutors: there are no Spark executors without spec.spark" in \
        refused({"spec": {}}, "sparkExecutors")


@pytest.mark.parametrize("resources, message", [
    ({"request": {"cpu": "1"}}, "resources.request: unknown key; did you mean 'requests'?"),
    ({"requests": {"cpu": "lots"}}, "resources.requests.cpu: not a Kubernetes quantity"),
    ({"requests": {"cpu": 0.5}}, "resources.requests.cpu: a fractional quantity must be a string"),
])
def test_resources_are_typed(resources, message):
    with pytest.raises(TopologyError, match="(?s)" + message.replace("(", r"\(").replace("?", r"\?")):
        check_spec("wc", {**BASE, "resources": resources})
    assert message.replace("resources.", "podTemplate.ackers.resources.", 1) in refused({"resources": resources},
                                                                                       "ackers")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_operator_renders_the_template_and_reports_a_refused_one(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", {**SPEC, "podTemplate": {"workers": {"spec": {"nodeSelector": {"disk": "ssd"}}}}})
    sts = await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
    assert sts["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}
    ackers = await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    assert "nodeSelector" not in ackers["spec"]["template"]["spec"]

    await patch_spec(api, "wc", {"podTemplate": {"workers": {"spec": {"containers": [
        {"name": "worker", "command": ["sh"]}]}}}})
    await eventually("phase Failed", lambda: status(api, "wc").get("phase") == "Failed")
    assert "podTemplate.workers.spec.containers[0].command: the operator sets the command" in \
        condition(api, "wc", "Ready")["message"]
    assert obj(api, STATEFULSETS, "wc-worker")["spec"]["template"]["spec"]["containers"][0]["command"] == \
        ["squall", "worker"]  # the running pods are left as they were


@pytest.mark.parametrize("doc, message", [
    ({"resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "1500m", "memory": "1024Mi"}}},
     "resources.requests.cpu: 2 is above its limit (1500m), which Kubernetes refuses; lower the request or raise "
     "the limit"),
    ({"podTemplate": {"ackers": {"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}}},
     "podTemplate.ackers.resources.requests.memory: 2Gi is above its limit (1Gi)"),
])
def test_a_request_above_its_limit_is_refused(doc, message):
    with pytest.raises(TopologyError) as info:
        check_spec("wc", {**BASE, **doc})
    assert message in str(info.value)
    assert str(info.value).count("is above its limit") == 1  # quantities compare by value: 1Gi is 1024Mi


def test_requests_within_their_limits_pass():
    check_spec("wc", {**BASE, "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                            "limits": {"cpu": 1, "memory": "1024Mi", "nvidia.com/gpu": 1}}})


@pytest.mark.parametrize("key", ["spark.kubernetes.executor.volumes.hostPath.root.options.path",
                                 "spark.kubernetes.driver.volumes.hostPath.root.mount.path",
                                 "spark.kubernetes.executor.podTemplateFile",
                                 "spark.kubernetes.authenticate.executor.serviceAccountName",
                                 "spark.kubernetes.executor.annotation.container.apparmor.security.beta.kubernetes.io/x"])
def test_spark_settings_that_would_make_pods_past_the_template_checks_are_refused(key):
    """spark.conf went to Spark as it was: a hostPath volume of the node's root filesystem, or another
    pod template, got past the restricted checks of podTemplate (found by the review)."""
    with pytest.raises(TopologyError, match=rf"spark\.conf: {re.escape(key)} is not allowed: .* "
                                            r"podTemplate\.sparkExecutors"):
        check_spec("wc", {**SPARK, "spark": {**SPARK["spark"], "conf": {key: "/"}}})
    check_spec("wc", {**SPARK, "spark": {**SPARK["spark"], "conf": {"spark.kubernetes.executor.request.cores": "1"}}})
