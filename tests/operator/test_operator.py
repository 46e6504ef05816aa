"""The operator, end to end: kopf runs Squall's handlers for real against kmock's emulated API server.

kmock has no StatefulSet controller and no garbage collector (see operator_kit): tests write the
StatefulSet status the controller would, and check the ownerReferences the collector follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml
from operator_kit import (
    CONFIGMAPS,
    NAMESPACE,
    PODMONITORS,
    SERVICES,
    SPEC,
    STATEFULSETS,
    TOPOLOGIES,
    condition,
    create_topology,
    declare_podmonitors,
    env,
    events,
    eventually,
    free_port,
    logged,
    mark,
    obj,
    patch,
    patch_spec,
    put_pod,
    roll_out,
    spec_in_config_map,
    status,
    writes_since,
)

from squall.errors import CommandError
from squall.process import supervisor
from squall.process.control import ControlClient, ProcessState
from squall.process.supervisor import Supervisor
from squall.transport.tls import Credentials
from squall_operator.resource import check_spec

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
REPO = Path(__file__).resolve().parents[2]

CHILDREN = [(CONFIGMAPS, "wc-spec"), ("v1/serviceaccounts", "wc"), (SERVICES, "wc-worker"),
            (STATEFULSETS, "wc-worker"), (SERVICES, "wc-acker"), (STATEFULSETS, "wc-acker")]


@pytest.fixture(autouse=True)
def _operator_logs(caplog):
    caplog.set_level(logging.INFO, logger="kopf.objects")


async def running(api, name: str = "wc") -> None:
    """Once the latest spec is applied, let the emulated StatefulSet controller finish the rollouts,
    and wait for phase Running."""
    await eventually("the latest spec applied", lambda: status(api, name).get("observedGeneration")
                     == obj(api, TOPOLOGIES, name)["metadata"]["generation"])
    for sts in (f"{name}-worker", f"{name}-acker"):
        if obj(api, STATEFULSETS, sts) is not None:
            await roll_out(api, sts)
    await eventually("phase Running and ready", lambda: status(api, name).get("phase") == "Running"
                     and condition(api, name, "Ready").get("status") == "True")


async def test_create_renders_owned_children_and_reports_readiness(api, start_operator):
    op = await start_operator()
    topology = await create_topology(api, "wc", SPEC)

    await eventually("every child", lambda: all(obj(api, res, name) for res, name in CHILDREN))
    owner = {"apiVersion": "squall.dev/v1alpha1", "kind": "Topology", "name": "wc",
             "uid": topology["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    for res, name in CHILDREN:
        assert obj(api, res, name)["metadata"]["ownerReferences"] == [owner], name
        assert obj(api, res, name)["metadata"]["labels"]["app.kubernetes.io/instance"] == "wc"
    workers, ackers = obj(api, STATEFULSETS, "wc-worker"), obj(api, STATEFULSETS, "wc-acker")
    assert workers["spec"]["replicas"] == 2 and ackers["spec"]["replicas"] == 2  # ackers: null = one per worker
    assert env(ackers) == env(workers) | {"OPENBLAS_NUM_THREADS": "1"}  # ackers: one BLAS thread (contract.role_env)
    assert env(workers)["SQUALL_WORKER_PEERS"] == f"wc-worker-{{i}}.wc-worker.{NAMESPACE}.svc:7070"
    # the mounted spec is the only carrier of spec values
    assert not {"SQUALL_WORKERS", "SQUALL_ACKERS", "SQUALL_MESSAGE_TIMEOUT_SECONDS"} & set(env(workers))
    assert spec_in_config_map(api, "wc")["messageTimeoutSeconds"] == 20
    assert spec_in_config_map(api, "wc")["name"] == "wc"
    assert spec_in_config_map(api, "wc")["bolts"][1]["inputs"][0]["grouping"] == {
        "type": "fields", "fields": ["word"], "customClass": None}
    assert obj(api, PODMONITORS, "wc") is None  # no PodMonitor CRD in this cluster

    await eventually("status Pending", lambda: status(api, "wc").get("phase") == "Pending")
    assert status(api, "wc")["observedGeneration"] == 1
    assert condition(api, "wc", "Progressing")["status"] == "True"
    assert condition(api, "wc", "Ready") | {"lastTransitionTime": None} == {
        "type": "Ready", "status": "False", "reason": "PodsNotReady", "message": "0/2 workers and 0/2 ackers ready",
        "lastTransitionTime": None, "observedGeneration": 1}
    await eventually("the Applied event", lambda: events(api, "Applied"))
    assert "created ConfigMap wc-spec" in events(api, "Applied")[0]["message"]
    assert events(api, "Applied")[0]["involvedObject"]["uid"] == topology["metadata"]["uid"]

    await roll_out(api, "wc-worker")
    await eventually("2 ready workers", lambda: status(api, "wc").get("readyWorkers") == 2)
    assert status(api, "wc")["phase"] == "Pending"  # the ackers are not ready yet
    await roll_out(api, "wc-acker")
    await eventually("phase Running", lambda: status(api, "wc").get("phase") == "Running")
    assert status(api, "wc")["ready"] == "4/4"
    assert condition(api, "wc", "Ready")["status"] == "True"
    assert condition(api, "wc", "Progressing")["reason"] == "RolloutComplete"
    await eventually("the Running event", lambda: events(api, "Running"))

    await roll_out(api, "wc-worker", ready=1)  # a worker pod dies
    await eventually("Degraded", lambda: condition(api, "wc", "Degraded").get("status") == "True")
    assert status(api, "wc")["phase"] == "Running"
    assert condition(api, "wc", "Degraded")["message"] == "1/2 workers and 2/2 ackers ready"

    async with aiohttp.ClientSession() as session, session.get(op.settings.liveness) as response:
        assert response.status == 200


async def test_scaling_keeps_the_pod_templates_and_an_unchanged_reconcile_writes_nothing(api, start_operator, caplog):
    """Scaling or changing the topology rewrites the spec's ConfigMap and the replicas, never the pod
    templates: running pods are switched to the new spec in place (squall_operator.rebalance), not rolled."""
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await running(api)
    templates = {sts: obj(api, STATEFULSETS, sts)["spec"]["template"] for sts in ("wc-worker", "wc-acker")}

    await patch_spec(api, "wc", {"workers": 3})
    await eventually("3 workers", lambda: obj(api, STATEFULSETS, "wc-worker")["spec"]["replicas"] == 3)
    await eventually("3 ackers", lambda: obj(api, STATEFULSETS, "wc-acker")["spec"]["replicas"] == 3)
    assert spec_in_config_map(api, "wc")["workers"] == 3
    await eventually("observedGeneration 2", lambda: status(api, "wc").get("observedGeneration") == 2)
    assert condition(api, "wc", "Progressing")["reason"] == "RollingOut"  # 3 pods wanted, the controller at 2
    assert status(api, "wc")["phase"] == "Running"
    await running(api)
    assert status(api, "wc")["ready"] == "6/6"

    bolts = copy.deepcopy(SPEC["bolts"])
    bolts[0]["parallelism"] = 3
    await patch_spec(api, "wc", {"bolts": bolts})
    await eventually("the new spec", lambda: spec_in_config_map(api, "wc")["bolts"][0]["parallelism"] == 3)
    assert {sts: obj(api, STATEFULSETS, sts)["spec"]["template"] for sts in templates} == templates
    assert obj(api, STATEFULSETS, "wc-worker")["spec"]["updateStrategy"] == {"type": "OnDelete"}
    await eventually("observedGeneration 3", lambda: status(api, "wc").get("observedGeneration") == 3)

    # a change kopf reacts to, but that changes nothing rendered: reads only
    before, logs = mark(api), len(caplog.records)
    await patch(api, TOPOLOGIES, "wc", {"metadata": {"annotations": {"example.com/note": "hello"}}})
    await eventually("a reconcile", lambda: logged(caplog.records, "reconciled: nothing to change", logs))
    assert writes_since(api, before) == []
    assert [w for w in writes_since(api, before, {"topologies"}) if w.endswith("/status")] == []


async def test_a_stopping_operator_ends_its_own_tasks_before_kopf_has_to(api, start_operator, caplog):
    """At shutdown kopf waits 5 s for every task it did not start, then cancels it: the resync loop is
    ended by a cleanup handler first, so kopf finds nothing left (every stop, a rolling update's
    included, took 5 s longer)."""
    caplog.set_level(logging.DEBUG, logger="kopf")
    op = await start_operator()
    # kopf's own discovery of the API's resources must be over too: a stop in the middle of it leaves
    # kopf's observer retrying a request, and kopf waits for that task of its own
    await eventually("kopf's watch streams", lambda: logged(caplog.records, "Starting the watch-stream for topologies"))
    await op.stop()
    assert logged(caplog.records, "Activity 'resync' succeeded")  # the cleanup handler ran
    assert logged(caplog.records, "Hung tasks stopping is skipped: no tasks given")


async def test_a_restarted_operator_resumes_without_writing(api, start_operator, caplog):
    op = await start_operator()
    await create_topology(api, "wc", SPEC)
    await running(api)
    await op.stop()

    before, logs = mark(api), len(caplog.records)
    await start_operator()
    await eventually("the resumed reconcile", lambda: logged(caplog.records, "reconciled: nothing to change", logs))
    assert writes_since(api, before) == []
    assert writes_since(api, before, {"topologies"}) == []  # not even the status: nothing changed


async def test_an_invalid_spec_fails_and_touches_no_child(api, start_operator):
    await start_operator()
    broken = copy.deepcopy(SPEC)
    broken["bolts"][0]["inputs"][0]["component"] = "sentencess"
    before = mark(api)
    await create_topology(api, "wc", broken)

    await eventually("phase Failed", lambda: status(api, "wc").get("phase") == "Failed")
    ready = condition(api, "wc", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "bolt 'split' inputs[0]: unknown component 'sentencess'" in ready["message"]
    assert "unknown component 'sentencess'" in status(api, "wc")["errors"][-1]["message"]
    warning = await eventually("the Warning event", lambda: events(api, "Failed"))
    assert warning[0]["type"] == "Warning" and "unknown component 'sentencess'" in warning[0]["message"]
    assert writes_since(api, before) == []
    assert all(obj(api, res, name) is None for res, name in CHILDREN)

    await patch_spec(api, "wc", {"bolts": SPEC["bolts"]})  # fixed
    await eventually("the children", lambda: obj(api, STATEFULSETS, "wc-worker"))
    await running(api)
    assert condition(api, "wc", "Ready")["status"] == "True"

    # broken again, with a bad field this time: the running pods are left as they are
    before = mark(api)
    await patch_spec(api, "wc", {"workers": 0})
    await eventually("phase Failed", lambda: status(api, "wc").get("phase") == "Failed")
    assert "workers: must be at least 1" in condition(api, "wc", "Ready")["message"]
    assert status(api, "wc")["readyWorkers"] == 2  # the last known pods, still running the old spec
    assert writes_since(api, before) == []
    assert obj(api, STATEFULSETS, "wc-worker")["spec"]["replicas"] == 2
    await eventually("a second Failed event", lambda: len(events(api, "Failed")) == 2)


async def test_suspend_rewrites_only_the_config_map(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await running(api)
    template = obj(api, STATEFULSETS, "wc-worker")["spec"]["template"]

    before = mark(api)
    await patch_spec(api, "wc", {"suspended": True})
    await eventually("phase Suspended", lambda: status(api, "wc").get("phase") == "Suspended")
    assert spec_in_config_map(api, "wc")["suspended"] is True  # the workers deactivate their spouts
    assert writes_since(api, before) == [f"PATCH /api/v1/namespaces/{NAMESPACE}/configmaps/wc-spec"]
    assert obj(api, STATEFULSETS, "wc-worker")["spec"]["template"] == template  # no pod restarts
    suspended = await eventually("the Suspended event", lambda: events(api, "Suspended"))
    assert suspended[0]["type"] == "Normal"

    await patch_spec(api, "wc", {"suspended": False})
    await eventually("phase Running", lambda: status(api, "wc").get("phase") == "Running")
    assert spec_in_config_map(api, "wc")["suspended"] is False
    assert obj(api, STATEFULSETS, "wc-worker")["spec"]["template"] == template
    await eventually("a second Running event", lambda: len(events(api, "Running")) == 2)


@contextlib.asynccontextmanager
async def processes_behind_pods(api, start_operator, tmp_path, *, tls: Credentials | None = None, **settings):
    """The worker and acker processes of SPEC started as ``squall run`` starts them (on loopback, real
    gRPC), the operator, and Topology ``wc`` whose emulated pods are those processes: yields the spec
    file the processes read (the kubelet's mount, untouched unless a test writes it), the supervisor,
    and a function that says how each worker process is (None: not answering yet). ``tls``: the
    credentials the processes hold (None: plaintext, and the operator's TLS off). ``settings``: the
    operator's."""
    spec = check_spec("wc", SPEC, namespace=NAMESPACE)  # what the operator runs: the processes' plan is its plan
    path = tmp_path / "wc.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict()))
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(supervisor, "issue", lambda topology: tls)
        sup = Supervisor(spec_path=path, spec=spec, run_dir=tmp_path / "run", insecure=tls is None)
    sup.start()
    clients = {c.name: ControlClient(f"127.0.0.1:{c.grpc_port}", tls=tls) for c in sup.children}
    try:
        workers = [clients[f"worker-{i}"] for i in range(spec.workers)]

        def states() -> list[ProcessState] | None:
            try:
                return [w.status() for w in workers]
            except CommandError:
                return None  # still starting

        # the spout's task runs in one of the workers: that one's spouts are active
        await eventually("the spout's worker process active", lambda: (s := states()) and any(x.active for x in s),
                         timeout=30)
        await start_operator(tls=tls is not None, **settings)
        await create_topology(api, "wc", SPEC)
        await eventually("the StatefulSets", lambda: obj(api, STATEFULSETS, "wc-worker") and obj(api, STATEFULSETS,
                                                                                                  "wc-acker"))
        for child in sup.children:
            await put_pod(api, f"wc-{child.name}", "wc", {"phase": "Running", "podIP": "127.0.0.1"},
                          grpc_port=child.grpc_port)
        yield path, sup, states
    finally:
        for client in clients.values():
            client.close()
        sup.stop()


async def test_suspend_reaches_the_running_processes_at_once_not_only_through_their_spec_file(
        api, start_operator, tmp_path, monkeypatch):
    """The worker processes behind the emulated pods are real (``squall run``'s, on loopback): the
    operator tells them ``suspended`` over their control channel, so their spouts stop and start
    again while their mounted spec file (here: untouched) still says otherwise, as it would until
    the kubelet updates it, up to a minute later."""
    monkeypatch.chdir(REPO)  # the processes import examples.wordcount from the working directory
    async with processes_behind_pods(api, start_operator, tmp_path) as (path, sup, states):
        spec = sup.spec
        await patch_spec(api, "wc", {"suspended": True})
        await eventually("every worker process suspended, its spouts stopped",
                         lambda: (s := states()) and all(x.suspended and not x.active for x in s), timeout=20)
        assert not yaml.safe_load(path.read_text()).get("suspended")  # the file did not say so
        await patch_spec(api, "wc", {"suspended": False})
        await eventually("every worker process resumed, the spout's emitting again",
                         lambda: (s := states()) and all(not x.suspended for x in s) and any(x.active for x in s),
                         timeout=20)
        # The commands carried the Topology's generation (3: created, suspended, resumed): the spec file of
        # the suspend's generation, written by a kubelet after the resume, does not undo it.
        (tmp_path / "generation").write_text("2")
        path.write_text(yaml.safe_dump({**spec.to_dict(), "suspended": True}))
        logs = [sup.child(f"worker-{i}").log_path for i in range(spec.workers)]
        await eventually("every worker to read the older file", lambda: all(
            "as of generation 2; generation 3 is followed" in log.read_text() for log in logs), timeout=20)
        assert (s := states()) and all(not x.suspended for x in s)


async def test_a_switch_the_processes_refuse_stops_the_rebalance_says_why_and_lets_their_spouts_go_again(
        api, start_operator, tmp_path, monkeypatch, caplog):
    """A class the image lacks passes validation (nothing is imported there), so the processes refuse
    the SWITCH. It was sent again about once a second for ever, the spouts held, the status saying
    nothing (found by the operator audit); and the new children were applied first, so a scale-down
    removed pods the old plan needed (found by the review). Now a process is asked first whether it
    could run the spec: nothing of it is applied, the Topology is Degraded with the process's reason
    and a Warning Event, and the processes go on with the plan they run."""
    monkeypatch.chdir(REPO)
    async with processes_behind_pods(api, start_operator, tmp_path) as (_, sup, states):
        old = sup.spec.fingerprint()
        bolts = copy.deepcopy(SPEC["bolts"])
        bolts[1]["className"] = "examples.no_such_module:WordCount"
        await patch_spec(api, "wc", {"bolts": bolts})
        degraded = await eventually("Degraded: SwitchRefused", lambda: (c := condition(api, "wc", "Degraded"))
                                    .get("reason") == "SwitchRefused" and c, timeout=40)
        assert "refused to switch" in degraded["message"] and "no_such_module" in degraded["message"]
        assert condition(api, "wc", "Progressing")["status"] == "False"
        # ready pods, not of the current spec: Ready said True with AllPodsReady (found by the operator audit)
        assert (condition(api, "wc", "Ready")["status"], condition(api, "wc", "Ready")["reason"]) == (
            "False", "SwitchRefused")
        await eventually("a Warning Event SwitchRefused", lambda: events(api, "SwitchRefused"))  # after the status
        await eventually("the spouts going again on the old plan", lambda: (s := states()) and all(
            x.fingerprint == old and not x.held for x in s) and any(x.active for x in s), timeout=20)
        checks = [r for r in caplog.records if "cannot run the new spec, nothing of it is applied" in r.getMessage()]
        assert len(checks) == 1 and not [r for r in caplog.records if "refused the switch" in r.getMessage()]
        assert spec_in_config_map(api, "wc")["bolts"][1]["className"] == SPEC["bolts"][1]["className"]
        # the pods' spec is repaired meanwhile: deleted, its headless Service was never put back (the operator
        # audit), and the peers' names no longer resolved
        running = obj(api, SERVICES, "wc-worker")
        response = await api.delete(f"/api/v1/namespaces/{NAMESPACE}/services/wc-worker")
        assert response.status == 200
        back = await eventually("the Service back", lambda: obj(api, SERVICES, "wc-worker"), timeout=30)
        assert back["spec"] == running["spec"]
        assert condition(api, "wc", "Degraded")["reason"] == "SwitchRefused"


async def test_a_write_refused_mid_rebalance_is_tried_again_soon_and_stays_reported_through_pod_events(
        api, start_operator, tmp_path, monkeypatch, caplog):
    """The API server refuses the new StatefulSet in a rebalance's switch. Such a write was tried again only
    at the next resync (the step runs outside kopf, which retried nothing), the spouts held meanwhile;
    and the next pod event rewrote the status from the pods, erasing Degraded ApplyFailed (found by the
    operator audit). Nor is a pod to replace deleted while its StatefulSet cannot be given the new
    template: deleted before the write, each pod was made again from the old template, again at every
    retry (found by the operator audit). The emulator stores what it is sent, whatever a stub answers, so
    the refusal is made in the operator's client here, where the real API server's would come back."""
    from kubernetes.client.exceptions import ApiException

    from squall_operator.apply import Kube

    refused: list[str] = []
    deleted: list[str] = []
    real, real_delete = Kube.patch, Kube.delete

    def delete(self, ref):
        if ref.kind == "Pod":
            deleted.append(ref.name)
        return real_delete(self, ref)

    def patch(self, ref, body, *, status=False):
        if ref.kind == "StatefulSet" and ref.name == "wc-worker" and not status:
            refused.append(ref.name)
            error = ApiException(status=422, reason="Unprocessable Entity")
            error.body = json.dumps({"kind": "Status", "code": 422, "reason": "Invalid",
                                     "message": 'StatefulSet.apps "wc-worker" is invalid: spec.template'})
            raise error
        return real(self, ref, body, status=status)

    monkeypatch.chdir(REPO)
    async with processes_behind_pods(api, start_operator, tmp_path, resync_seconds=600) as (_, sup, _states):
        monkeypatch.setattr(Kube, "patch", patch)
        monkeypatch.setattr(Kube, "delete", delete)
        await patch_spec(api, "wc", {"resources": {"requests": {"cpu": "200m"}}})  # a new template: a rebalance
        await eventually("Degraded: ApplyFailed", lambda: condition(api, "wc", "Degraded").get("reason")
                         == "ApplyFailed", timeout=40)
        tried = len(refused)

        def handled() -> int:
            return sum("Handler 'pods' succeeded" in r.getMessage() for r in caplog.records)

        before = handled()
        await put_pod(api, "wc-worker-0", "wc", {"phase": "Running", "podIP": "127.0.0.1", "conditions": [
            {"type": "Ready", "status": "False"}]}, grpc_port=sup.child("worker-0").grpc_port)
        await eventually("the pod event handled", lambda: handled() > before)
        assert condition(api, "wc", "Degraded")["reason"] == "ApplyFailed"
        await eventually("the write tried again within its retry delay, not at the resync",
                         lambda: len(refused) > tried, timeout=30)
        assert not deleted  # every pod runs on, as made from the template its StatefulSet still has


async def test_optional_children_come_and_go(api, start_operator):
    declare_podmonitors(api)  # auto: the PodMonitor CRD is installed
    await start_operator()
    spec = {**SPEC, "ackers": 1, "spark": {"executors": 3}}
    await create_topology(api, "wc", spec)

    await eventually("the PodMonitor", lambda: obj(api, PODMONITORS, "wc"))
    role = obj(api, "rbac.authorization.k8s.io/v1/roles", "wc-spark")
    assert role is not None and obj(api, "rbac.authorization.k8s.io/v1/rolebindings", "wc-spark") is not None
    assert obj(api, STATEFULSETS, "wc-acker")["spec"]["replicas"] == 1
    assert {p["port"] for p in obj(api, SERVICES, "wc-worker")["spec"]["ports"]} == {7070, 9090, 7078, 7079}
    assert '"spark.executor.instances": "3"' in env(obj(api, STATEFULSETS, "wc-worker"))["SQUALL_SPARK_CONF"]

    await patch(api, TOPOLOGIES, "wc", {"spec": {"ackers": 0, "spark": None}})
    await eventually("no acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker") is None)
    assert obj(api, SERVICES, "wc-acker") is None
    assert obj(api, "rbac.authorization.k8s.io/v1/roles", "wc-spark") is None
    assert obj(api, "rbac.authorization.k8s.io/v1/rolebindings", "wc-spark") is None
    assert "SQUALL_SPARK_CONF" not in env(obj(api, STATEFULSETS, "wc-worker"))
    assert obj(api, PODMONITORS, "wc") is not None
    await roll_out(api, "wc-worker")
    await eventually("phase Running without ackers", lambda: status(api, "wc").get("phase") == "Running")
    assert status(api, "wc")["ready"] == "2/2"


async def test_delete_leaves_the_children_to_the_garbage_collector(api, start_operator, caplog):
    await start_operator()
    topology = await create_topology(api, "wc", SPEC)
    await running(api)

    response = await api.delete(f"/apis/squall.dev/v1alpha1/namespaces/{NAMESPACE}/topologies/wc")
    assert response.status == 200
    assert obj(api, TOPOLOGIES, "wc") is None  # no finalizer held it back
    assert all(not (v or {}).get("metadata", {}).get("finalizers")
               for v in api.objects[TOPOLOGIES, NAMESPACE, "wc"].history)

    # kmock has no garbage collector: what would make Kubernetes delete the children is their owner
    for res, name in CHILDREN:
        refs = obj(api, res, name)["metadata"]["ownerReferences"]
        assert [(r["uid"], r["blockOwnerDeletion"]) for r in refs] == [(topology["metadata"]["uid"], True)]
    # a StatefulSet changing after its Topology is gone: handled, and no child is written
    before, logs = mark(api), len(caplog.records)
    await roll_out(api, "wc-worker", ready=0)
    await eventually("the StatefulSet event handled",
                     lambda: logged(caplog.records, "Handler 'status' succeeded", logs))
    assert writes_since(api, before) == [
        f"PATCH /apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/wc-worker/status"]  # the test's own write
    assert obj(api, TOPOLOGIES, "wc") is None


async def test_a_namespaced_operator_leaves_other_namespaces_alone(api, start_operator):
    await start_operator(namespaces=(NAMESPACE,))
    await create_topology(api, "other", SPEC, namespace="elsewhere")
    await create_topology(api, "wc", SPEC)

    await eventually("phase Pending", lambda: status(api, "wc").get("phase") == "Pending")
    assert obj(api, TOPOLOGIES, "other", namespace="elsewhere").get("status") is None
    assert obj(api, STATEFULSETS, "other-worker", namespace="elsewhere") is None


async def test_a_refused_write_is_reported(api, start_operator):
    forbidden = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                 "message": "statefulsets.apps is forbidden: User cannot create resource"}
    api[f"post /apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"] << 403 << forbidden
    await start_operator()
    await create_topology(api, "wc", SPEC)

    errors = await eventually("a recorded error", lambda: status(api, "wc").get("errors"))
    assert errors[-1]["message"] == ("creating StatefulSet wc-worker failed: 403 statefulsets.apps is forbidden: "
                                     "User cannot create resource")
    warning = await eventually("the Warning event", lambda: events(api, "ApplyFailed"))
    assert warning[0]["type"] == "Warning" and warning[0]["message"] == errors[-1]["message"]
    # the conditions say so too (kubectl wait, the REASON column), not only the errors
    degraded, progressing = condition(api, "wc", "Degraded"), condition(api, "wc", "Progressing")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == ("True", "ApplyFailed",
                                                                             errors[-1]["message"])
    assert (progressing["status"], progressing["reason"]) == ("False", "ApplyFailed")


async def test_an_object_of_a_childs_name_that_is_someone_elses_is_left_alone_and_reported(api, start_operator):
    """Another app's ServiceAccount ``wc``: not patched, not adopted (it would go with the Topology)."""
    theirs = {"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "wc", "namespace": NAMESPACE, "annotations": {"example.com/role": "billing"}}}
    response = await api.post(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", json=theirs)
    assert response.status == 200, await response.text()
    await start_operator()
    await create_topology(api, "wc", SPEC)

    degraded = await eventually("Degraded", lambda: condition(api, "wc", "Degraded").get("reason") == "ApplyFailed"
                                and condition(api, "wc", "Degraded"))
    assert degraded["message"] == ("ServiceAccount wc exists and is not this Topology's (no owner reference to it): "
                                   "the operator leaves it alone; delete or rename it, or give the Topology another "
                                   "name")
    account = obj(api, "v1/serviceaccounts", "wc")
    assert "ownerReferences" not in account["metadata"]
    assert account["metadata"]["annotations"] == {"example.com/role": "billing"}


async def test_python_m_squall_operator_runs_with_a_kubeconfig(api, tmp_path):
    """The entrypoint of the operator's pod: settings from the environment, kopf's login through the
    kubernetes client's config, the liveness endpoint, and a clean stop on SIGTERM."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": str(api.url)}}],
        "users": [{"name": "test", "user": {"token": "secret"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "test"}}]}))
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    metrics_port = free_port()
    env = os.environ | {"KUBECONFIG": str(kubeconfig), "SQUALL_OPERATOR_IMAGE": "squall:entry",
                        "SQUALL_OPERATOR_LIVENESS": liveness, "SQUALL_OPERATOR_LOG_LEVEL": "INFO",
                        "SQUALL_OPERATOR_METRICS_PORT": str(metrics_port)}
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "squall_operator", env=env,
                                                       stdout=out, stderr=out)
    try:
        await create_topology(api, "wc", SPEC)
        # a new process: its imports, its election and kopf's start took 14 s of the 15 under a loaded full suite
        await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"), timeout=60)
        assert obj(api, STATEFULSETS, "wc-worker")["spec"]["template"]["spec"]["containers"][0]["image"] == \
            "squall:entry"
        async with aiohttp.ClientSession() as session, session.get(liveness) as response:
            assert response.status == 200
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
            assert response.status == 200 and "squall_operator_reconciles_total" in await response.text()
        assert any(r.headers.get("Authorization") == "Bearer secret" for r in list(api))
    finally:
        process.terminate()
        code = await asyncio.wait_for(process.wait(), 30)
    assert code == 0, log.read_text()
