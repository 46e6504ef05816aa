"""Stateful bolts on Kubernetes: the state claim every worker pod mounts (rendered, made once, kept when
the Topology goes unless asked), the Redis URL from a Secret, and the refusal of a rebalance that would
change a stateful bolt's tasks (the operator, its admission webhook and ``squall run``'s live edits)."""

from __future__ import annotations

import copy
import logging
import types

import kopf
import kubernetes_validate
import pytest
import yaml
from operator_kit import (
    NAMESPACE,
    SPEC,
    STATEFULSETS,
    condition,
    create_topology,
    events,
    eventually,
    mark,
    obj,
    patch_spec,
    status,
    writes_since,
)

from squall import StatefulBolt
from squall.cli.run import SpecFile
from squall.errors import TopologyError
from squall.state.config import DIR_KEY, PROVIDER_KEY, REDIS_URL_KEY
from squall.topology.assignment import check_state_kept
from squall.topology.spec import TopologySpec
from squall_operator import admission
from squall_operator.render import render
from squall_operator.resource import check_spec

CLAIMS = "v1/persistentvolumeclaims"
STATEFUL = copy.deepcopy(SPEC)  # wordcount with its count bolt stateful (task ids: count 1, sentences 2, split 3-4)
STATEFUL["bolts"][1]["stateful"] = True
K8S_VERSION = "1.30.0"


def spec(doc: dict, name: str = "wc") -> TopologySpec:
    return TopologySpec.from_dict({**doc, "name": name})


def with_state(**state) -> dict:
    return {**STATEFUL, "state": state}


def with_config(config: dict, *, bolt: bool = False) -> dict:
    doc = copy.deepcopy(STATEFUL)
    if bolt:
        doc["bolts"][1]["config"] = config
    else:
        doc["config"] = config
    return doc


def rendered(doc: dict) -> dict[tuple[str, str], dict]:
    return {(m["kind"], m["metadata"]["name"]): m for m in render(spec(doc), namespace=NAMESPACE, image="squall:1")}


def pod(manifests: dict, role: str) -> dict:
    return manifests["StatefulSet", f"wc-{role}"]["spec"]["template"]["spec"]


def env(manifests: dict, role: str) -> dict[str, dict]:
    return {e["name"]: e for e in pod(manifests, role)["containers"][0]["env"]}


# ---- rendering ----------------------------------------------------------------------------------------------


def test_a_topology_with_stateful_bolts_gets_one_claim_that_every_worker_pod_mounts():
    manifests = rendered(STATEFUL)
    claim = manifests["PersistentVolumeClaim", "wc-state"]
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    assert claim["metadata"]["labels"]["app.kubernetes.io/instance"] == "wc"
    assert "ownerReferences" not in claim["metadata"]
    workers = pod(manifests, "worker")
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "wc-state"}} in workers["volumes"]
    assert {"name": "state", "mountPath": "/var/lib/squall/state"} in workers["containers"][0]["volumeMounts"]
    assert env(manifests, "worker")["SQUALL_STATE_DIR"] == {"name": "SQUALL_STATE_DIR",
                                                            "value": "/var/lib/squall/state"}
    # ackers run no bolt: no claim, no state directory
    assert "state" not in {v["name"] for v in pod(manifests, "acker")["volumes"]}
    assert "SQUALL_STATE_DIR" not in env(manifests, "acker")
    for manifest in manifests.values():
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_a_read_write_once_claim_puts_the_worker_pods_together_and_read_write_many_spreads_them():
    match = {"matchLabels": {"app.kubernetes.io/name": "squall", "app.kubernetes.io/instance": "wc",
                             "app.kubernetes.io/component": "worker"}}
    once = pod(rendered(STATEFUL), "worker")
    assert once["affinity"] == {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": match, "topologyKey": "kubernetes.io/hostname"}]}}
    assert "topologySpreadConstraints" not in once
    assert "podAntiAffinity" in pod(rendered(STATEFUL), "acker")["affinity"]  # ackers mount nothing: spread

    many = rendered(with_state(accessMode="ReadWriteMany", storageClassName="nfs", size="20Gi"))
    assert many["PersistentVolumeClaim", "wc-state"]["spec"] == {
        "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "20Gi"}}, "storageClassName": "nfs"}
    assert pod(many, "worker")["affinity"] == pod(rendered(SPEC), "worker")["affinity"]  # spread, as stateless ones


@pytest.mark.parametrize("doc", [
    SPEC,  # no stateful bolt
    with_config({PROVIDER_KEY: "memory"}),
    with_config({PROVIDER_KEY: "embedded", DIR_KEY: "/data/state"}),  # a directory of its own (a template's volume)
    with_config({PROVIDER_KEY: "redis", REDIS_URL_KEY: "redis://redis:6379/0"}, bolt=True),
], ids=["stateless", "memory", "own directory", "redis"])
def test_no_claim_where_no_stateful_bolt_keeps_its_state_in_the_pods_directory(doc):
    manifests = rendered(doc)
    assert not [key for key in manifests if key[0] == "PersistentVolumeClaim"]
    assert "state" not in {v["name"] for v in pod(manifests, "worker")["volumes"]}
    assert "SQUALL_STATE_DIR" not in env(manifests, "worker")


def test_the_redis_url_comes_from_a_secret():
    doc = {**with_config({PROVIDER_KEY: "redis"}), "state": {"redisSecret": {"name": "redis-auth"}}}
    manifests = rendered(doc)
    assert env(manifests, "worker")["SQUALL_STATE_REDIS_URL"] == {
        "name": "SQUALL_STATE_REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "url"}}}
    assert "SQUALL_STATE_REDIS_URL" not in env(manifests, "acker")
    assert not [key for key in manifests if key[0] == "PersistentVolumeClaim"]
    keyed = rendered({**doc, "state": {"redisSecret": {"name": "redis-auth", "key": "state-url"}}})
    assert env(keyed, "worker")["SQUALL_STATE_REDIS_URL"]["valueFrom"]["secretKeyRef"]["key"] == "state-url"
    # not kept in Redis: the Secret is not needed, and not named
    assert "SQUALL_STATE_REDIS_URL" not in env(rendered({**STATEFUL, "state": doc["state"]}), "worker")


def test_a_redis_store_without_a_url_is_refused():
    with pytest.raises(TopologyError, match="stateful bolt 'count' keeps its state in Redis .* and nothing gives "
                                            "its URL: set spec.state.redisSecret"):
        check_spec("wc", with_config({PROVIDER_KEY: "redis"}))
    check_spec("wc", {**with_config({PROVIDER_KEY: "redis"}), "state": {"redisSecret": {"name": "redis"}}})


@pytest.mark.parametrize("state, message", [
    ({"accessMode": "ReadWriteOncePod"}, "state.accessMode"),
    ({"size": "lots"}, "state.size"),
    ({"redisSecret": {"name": "Redis_Auth"}}, "state.redisSecret.name"),
    ({"deleteClaim": True}, "state.deleteClaim"),
])
def test_bad_state_fields_are_named(state, message):
    with pytest.raises(TopologyError, match=message.replace(".", r"\.")):
        check_spec("wc", with_state(**state))


# ---- task counts and ids kept --------------------------------------------------------------------------------


def changed(**changes) -> TopologySpec:
    doc = copy.deepcopy(STATEFUL)
    for where, value in changes.items():
        kind, index, key = where.split("__")
        doc[kind][int(index)][key] = value
    return spec(doc)


@pytest.mark.parametrize("new", [
    spec({**STATEFUL, "workers": 3}),
    spec({**STATEFUL, "workers": 1, "ackers": 2}),
    changed(bolts__0__parallelism=4),  # split: named after count, so count's task ids stay
    spec({**SPEC, "workers": 3}),  # no longer stateful: its state stays in the claim, unused
], ids=["workers", "ackers", "a later component", "not stateful any more"])
def test_a_rescale_that_keeps_the_stateful_tasks_passes(new):
    check_state_kept(spec(STATEFUL), new)


def test_a_bolt_made_stateful_may_have_any_task_count():
    check_state_kept(spec(SPEC), changed(bolts__1__parallelism=3))


def test_a_stateful_bolts_task_count_cannot_change():
    with pytest.raises(TopologyError, match=r"stateful bolt 'count' runs 1 task\(s\) and the new spec gives it 3: "
                                            r".* set its tasks to 1"):
        check_state_kept(spec(STATEFUL), changed(bolts__1__parallelism=3))
    # its executors may change, its tasks staying
    more = copy.deepcopy(STATEFUL)
    more["bolts"][1].update(tasks=4)
    check_state_kept(spec(more), spec({**more, "bolts": [more["bolts"][0], {**more["bolts"][1], "parallelism": 4}]}))


def test_nor_the_ids_of_its_tasks():
    doc = copy.deepcopy(STATEFUL)
    doc["bolts"][1]["name"] = "tally"  # after sentences and split in name order
    before = spec(doc)
    doc["bolts"][0]["parallelism"] = 3
    with pytest.raises(TopologyError, match="the tasks of stateful bolt 'tally' would be numbered 5-5 instead of "
                                            "4-4: .* the task count of 'split' changed"):
        check_state_kept(before, spec(doc))
    doc["bolts"][0]["parallelism"] = 2
    doc["spouts"].append({"name": "more", "className": "examples.wordcount:SentenceSpout"})
    with pytest.raises(TopologyError, match="'more' came or went"):
        check_state_kept(before, spec(doc))


def test_the_admission_webhook_refuses_it():
    old = {"spec": STATEFUL}
    bigger = with_config({})
    bigger["bolts"][1]["parallelism"] = 2
    with pytest.raises(kopf.AdmissionError, match="stateful bolt 'count' runs 1 task"):
        admission.check(name="wc", namespace=NAMESPACE, spec=bigger, old=old)
    admission.check(name="wc", namespace=NAMESPACE, spec={**STATEFUL, "workers": 3}, old=old)
    admission.check(name="wc", namespace=NAMESPACE, spec=bigger, old=None)  # a new Topology: anything goes
    admission.check(name="wc", namespace=NAMESPACE, spec=bigger, old={"spec": {"workers": 0}})  # old one invalid
    # the old spec was refused by the operator (no webhook then): the pods run another, and going back passes
    admission.check(name="wc", namespace=NAMESPACE, spec=STATEFUL, old={"spec": bigger, "status": {"phase": "Failed"}})


class Tally(StatefulBolt):
    outputs = ["word", "count"]

    def execute(self, tup):
        self.state.put(tup["word"], self.state.get(tup["word"], 0) + 1)


def test_squall_run_refuses_it_and_runs_on(tmp_path):
    path = tmp_path / "wc.yaml"
    doc = copy.deepcopy({**STATEFUL, "name": "wc"})
    doc["bolts"][1]["className"] = "test_state:Tally"
    running = spec(doc)
    doc["bolts"][1]["parallelism"] = 2
    path.write_text(yaml.safe_dump(doc))
    said: list[str] = []
    sup = types.SimpleNamespace(spec=running, rebalance=lambda *a, **k: pytest.fail("rebalanced"))
    progress = types.SimpleNamespace(say=said.append)
    watcher = SpecFile(path)
    watcher.stamp = None  # as if edited since the run began
    watcher.follow(sup, progress, lambda: False)
    assert len(said) == 1 and "changed but is not applied (the run goes on with its plan)" in said[0]
    assert "stateful bolt 'count' runs 1 task(s) and the new spec gives it 2" in said[0]


# ---- the operator, on kmock --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _operator_logs(caplog):
    caplog.set_level(logging.INFO, logger="kopf.objects")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_operator_makes_the_claim_and_keeps_it_when_the_topology_goes(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", STATEFUL)
    claim = await eventually("the state claim", lambda: obj(api, CLAIMS, "wc-state"))
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and "ownerReferences" not in claim["metadata"]
    workers = await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "wc-state"}} in \
        workers["spec"]["template"]["spec"]["volumes"]
    applied = await eventually("the Applied event", lambda: events(api, "Applied"))
    assert "created PersistentVolumeClaim wc-state, ConfigMap wc-spec" in applied[0]["message"]

    response = await api.delete(f"/apis/squall.dev/v1alpha1/namespaces/{NAMESPACE}/topologies/wc")
    assert response.status == 200
    assert "ownerReferences" not in obj(api, CLAIMS, "wc-state")["metadata"]  # the garbage collector leaves it

    # applied again under the same name: the claim is used as it is, not written
    before = mark(api)
    await create_topology(api, "wc", STATEFUL)
    await eventually("phase Pending", lambda: status(api, "wc").get("phase") == "Pending")
    assert writes_since(api, before, {"persistentvolumeclaims"}) == []

    # asked to delete it with the Topology: it is owned (and then disowned when no longer asked)
    topology = obj(api, "squall.dev/v1alpha1/topologies", "wc")
    await patch_spec(api, "wc", {"state": {"deleteClaimWithTopology": True}})
    await eventually("the claim owned", lambda: obj(api, CLAIMS, "wc-state")["metadata"].get("ownerReferences"))
    (owner,) = obj(api, CLAIMS, "wc-state")["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Topology", "wc", topology["metadata"]["uid"])
    await patch_spec(api, "wc", {"state": {"deleteClaimWithTopology": False}})
    await eventually("the claim disowned", lambda: not obj(api, CLAIMS, "wc-state")["metadata"].get("ownerReferences"))


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_operator_says_how_a_kept_claim_differs_from_the_spec(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", STATEFUL)
    await eventually("the state claim", lambda: obj(api, CLAIMS, "wc-state"))
    await patch_spec(api, "wc", {"state": {"accessMode": "ReadWriteMany", "size": "5Gi"}})
    warning = await eventually("the Warning event", lambda: events(api, "StateClaimDiffers"))
    assert warning[0]["type"] == "Warning"
    assert "PersistentVolumeClaim wc-state is used as it is: it has access modes ['ReadWriteOnce'] (the spec: " \
           "['ReadWriteMany']); size 1Gi (the spec: 5Gi; grow it with kubectl patch pvc wc-state" \
           in warning[0]["message"]
    assert obj(api, CLAIMS, "wc-state")["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_operator_refuses_to_change_a_stateful_bolts_tasks(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", STATEFUL)
    await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
    await eventually("generation 1 applied", lambda: status(api, "wc").get("observedGeneration") == 1)
    bolts = copy.deepcopy(STATEFUL["bolts"])
    bolts[1]["parallelism"] = 2
    before = mark(api)
    await patch_spec(api, "wc", {"bolts": bolts})
    await eventually("phase Failed", lambda: status(api, "wc").get("phase") == "Failed")
    ready = condition(api, "wc", "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "stateful bolt 'count' runs 1 task(s) and the new spec gives it 2" in ready["message"]
    assert writes_since(api, before) == []  # the pods go on with the spec they run

    bolts[1]["tasks"], bolts[1]["parallelism"] = None, 1
    await patch_spec(api, "wc", {"bolts": bolts, "workers": 3})  # a rescale that keeps the tasks
    await eventually("3 workers", lambda: obj(api, STATEFULSETS, "wc-worker")["spec"]["replicas"] == 3)
