"""Drift repair: what someone deletes or edits comes back, at once for a watched child and on the
periodic resync for everything; the resync also reads the components' own errors (``GET /errors``) into the
status. kopf runs Squall's handlers against kmock (no garbage collector or kubelet: see operator_kit)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp.web
import kmock
import pytest
from kubernetes import client
from operator_kit import (
    CONFIGMAPS,
    NAMESPACE,
    SERVICES,
    SPEC,
    STATEFULSETS,
    TOPOLOGIES,
    ApiServer,
    OperatorThread,
    condition,
    create_topology,
    events,
    eventually,
    logged,
    mark,
    obj,
    patch,
    put_pod,
    roll_out,
    status,
)

from squall_operator import apply as apply_module
from squall_operator import processes
from squall_operator.apply import Kube
from squall_operator.reconcile import Operator
from squall_operator.settings import Settings

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


async def delete(api, res: str, name: str) -> None:
    group_version, plural = res.rsplit("/", 1)
    prefix = "/api" if group_version == "v1" else "/apis"
    response = await api.delete(f"{prefix}/{group_version}/namespaces/{NAMESPACE}/{plural}/{name}")
    assert response.status == 200, await response.text()


async def test_deleted_and_edited_children_come_back(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    for sts in ("wc-worker", "wc-acker"):
        await roll_out(api, sts)
    await eventually("Running", lambda: status(api, "wc").get("phase") == "Running")
    rendered = {res: obj(api, res, name) for res, name in ((STATEFULSETS, "wc-worker"), (SERVICES, "wc-acker"),
                                                          (CONFIGMAPS, "wc-spec"))}

    for res, name in ((STATEFULSETS, "wc-worker"), (SERVICES, "wc-acker"), (CONFIGMAPS, "wc-spec")):
        uid = obj(api, res, name)["metadata"]["uid"]
        await delete(api, res, name)
        back = await eventually(f"{name} back", lambda res=res, name=name, uid=uid:
                                (o := obj(api, res, name)) is not None and o["metadata"]["uid"] != uid and o)
        assert back["spec" if "spec" in back else "data"] == rendered[res]["spec" if "spec" in back else "data"]
    # the recreated StatefulSet is rolling out again, as it is: not a rollout of something gone
    assert condition(api, "wc", "Progressing")["reason"] == "RollingOut"
    await roll_out(api, "wc-worker")
    await eventually("Running and ready", lambda: condition(api, "wc", "Ready").get("status") == "True")

    # someone edits the pod template by hand: put back
    await patch(api, STATEFULSETS, "wc-worker", {"spec": {"template": {"spec": {"containers": [
        {"name": "worker", "image": "evil:1"}]}}}})
    await eventually("the image put back", lambda: obj(api, STATEFULSETS, "wc-worker")["spec"]["template"]["spec"]
                     ["containers"][0]["image"] == "squall:test")
    await patch(api, SERVICES, "wc-worker", {"spec": {"publishNotReadyAddresses": False}})
    await eventually("the Service put back", lambda: obj(api, SERVICES, "wc-worker")["spec"]
                     ["publishNotReadyAddresses"] is True)


async def test_a_request_the_api_server_never_answers_times_out_and_the_topology_is_reconciled_again(
        api, start_operator, monkeypatch):
    """A request whose connection went half-open (an API server or load balancer failing over) never returned:
    the reconcile waiting for it held the Topology's lock, so that no later change, resync or repair of it was
    ever carried out, and the operator's liveness stayed green (found by the operator audit)."""
    monkeypatch.setattr(apply_module, "REQUEST_TIMEOUT", (1.0, 1.0))
    hung: list[float] = []
    real = ApiServer._handle

    async def handle(self: ApiServer, request: kmock.Request):
        if len(hung) == 1 and request.method == kmock.method.GET and request.url.path.endswith("/roles/wc-spark"):
            hung.append(time.monotonic())
            await asyncio.sleep(3600)  # no answer, and no reset either
        return await real(self, request)

    monkeypatch.setattr(ApiServer, "_handle", handle)
    await start_operator(resync_seconds=2)
    await create_topology(api, "wc", SPEC)
    await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    hung.append(0.0)  # armed: the next reconcile's read of a child hangs
    await eventually("a request left unanswered", lambda: len(hung) == 2)
    await patch(api, TOPOLOGIES, "wc", {"spec": {"workers": 3}})
    await eventually("the change carried out", lambda: obj(api, STATEFULSETS, "wc-worker")["spec"]["replicas"] == 3)


@pytest.mark.parametrize("restarted", [False, True], ids=["kept", "operator-restarted"])
async def test_the_children_of_the_spec_the_pods_run_are_repaired_while_the_latest_spec_is_invalid(
        api, start_operator, restarted):
    """The pods run on with the last valid spec while the Topology is Failed; its deleted children were never
    put back (found by the operator audit): without its headless Service the peers' names no longer resolve,
    without its ConfigMap a restarted pod cannot start. An operator restarted meanwhile reads that spec from
    the ConfigMap; what it puts back is what was there, the spec that failed left out."""
    op = await start_operator(resync_seconds=1)
    await create_topology(api, "wc", SPEC)
    await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    for sts in ("wc-worker", "wc-acker"):
        await roll_out(api, sts)
    await eventually("Running", lambda: status(api, "wc").get("phase") == "Running")
    before = {(res, name): obj(api, res, name) for res, name in ((SERVICES, "wc-worker"), (CONFIGMAPS, "wc-spec"),
                                                                  (STATEFULSETS, "wc-worker"))}
    if restarted:
        await op.stop()
    await patch(api, TOPOLOGIES, "wc", {"spec": {"workers": 0, "ackers": 1}})  # past a webhook that was down
    if restarted:
        await start_operator(resync_seconds=1)
    await eventually("Failed", lambda: status(api, "wc").get("phase") == "Failed")
    await delete(api, SERVICES, "wc-worker")
    await delete(api, STATEFULSETS, "wc-worker")
    for (res, name), was in before.items():
        back = await eventually(f"{name} back", lambda res=res, name=name: obj(api, res, name))
        key = "data" if res == CONFIGMAPS else "spec"
        assert back[key] == was[key], name
    await delete(api, CONFIGMAPS, "wc-spec")  # known since: put back again, whatever the operator's restarts
    back = await eventually("the ConfigMap back", lambda: obj(api, CONFIGMAPS, "wc-spec"))
    assert back["data"] == before[(CONFIGMAPS, "wc-spec")]["data"]
    assert status(api, "wc")["phase"] == "Failed"


async def test_the_children_of_a_topology_being_deleted_are_not_made_again(api, start_operator, caplog):
    """``kubectl delete --cascade=foreground`` (Argo CD's default): the Topology stays, with a
    deletionTimestamp, while the garbage collector deletes its children. The operator leaves them gone
    (before, it made each again, and the collector deleted it again, a new CA every time)."""
    caplog.set_level(logging.INFO, logger="kopf.objects")
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("the children made", lambda: logged(caplog.records, "reconciled: created"))
    await patch(api, TOPOLOGIES, "wc", {"metadata": {"deletionTimestamp": "2030-01-01T00:00:00Z",
                                                      "finalizers": ["foregroundDeletion"]}})
    logs = len(caplog.records)
    await delete(api, STATEFULSETS, "wc-worker")  # the garbage collector's work
    await eventually("the reconcile it sets off", lambda: logged(caplog.records, "being deleted: nothing applied", logs)
                     or obj(api, STATEFULSETS, "wc-worker"))
    assert obj(api, STATEFULSETS, "wc-worker") is None


@contextlib.asynccontextmanager
async def errors_served(errors: Callable[[aiohttp.web.Request], Awaitable[aiohttp.web.Response]]
                        ) -> AsyncIterator[int]:
    """A server of ``GET /errors`` on loopback, as a pod's metrics port serves it: its port."""
    app = aiohttp.web.Application()
    app.router.add_get("/errors", errors)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


async def test_the_resync_repairs_unwatched_drift_and_reads_component_errors(api, start_operator, caplog):
    reported = [{"component": "split", "task": 2, "time": time.time(), "error": "ValueError: bad line\n  at x"}]

    async def errors(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response(reported)

    async with errors_served(errors) as port:
        await start_operator(resync_seconds=0.3)
        await create_topology(api, "wc", SPEC)
        await eventually("the ServiceAccount", lambda: obj(api, "v1/serviceaccounts", "wc"))
        await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
        # a pod that serves /errors (the real pods serve it on their metrics port)
        await put_pod(api, "wc-worker-0", "wc", {"phase": "Running", "podIP": "127.0.0.1"}, metrics_port=port)
        rows = await eventually("the component errors", lambda: status(api, "wc").get("componentErrors"))
        assert [(r["pod"], r["component"], r["task"], r["error"]) for r in rows] == [
            ("wc-worker-0", "split", 2, "ValueError: bad line at x")]

        # ServiceAccounts are not watched: the resync brings one back
        response = await api.delete(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/wc")
        assert response.status == 200
        await eventually("the ServiceAccount back", lambda: obj(api, "v1/serviceaccounts", "wc"))
        # no finalizer: a deleted Topology goes at once, even while the operator is down
        assert "finalizers" not in obj(api, TOPOLOGIES, "wc")["metadata"]


async def test_the_resync_asks_a_topologys_pods_for_their_errors_at_once(api, start_operator, monkeypatch):
    """Two pods whose ``/errors`` does not answer (a wedged process) are asked side by side: a pass
    waits one timeout for them, not one per pod (before: 12 such pods held every resync 24 s)."""
    monkeypatch.setattr(processes, "ERRORS_TIMEOUT", 30.0)  # the pods answer only once released
    waiting: list[object] = []
    most, release = [0], asyncio.Event()

    async def errors(_: aiohttp.web.Request) -> aiohttp.web.Response:
        waiting.append(object())
        most[0] = max(most[0], len(waiting))
        try:
            await release.wait()
        finally:
            waiting.pop()
        return aiohttp.web.json_response([])

    async with errors_served(errors) as port:
        try:
            await start_operator(resync_seconds=0.3)
            await create_topology(api, "wc", SPEC)
            await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
            for pod in ("wc-worker-0", "wc-worker-1"):
                await put_pod(api, pod, "wc", {"phase": "Running", "podIP": "127.0.0.1"}, metrics_port=port)
            await eventually("both pods asked at once", lambda: most[0] >= 2)
        finally:
            release.set()


async def test_a_topology_whose_pods_are_slow_to_answer_does_not_hold_up_the_others(api, start_operator,
                                                                                     monkeypatch):
    """Topologies were reconciled one after another: one whose pods took their timeout to answer (a busy
    process: 7 s a command) held up every other Topology's resync and rebalance steps (found by the
    review). They are reconciled side by side now."""
    monkeypatch.setattr(processes, "ERRORS_TIMEOUT", 60.0)  # the slow pod answers only once released
    release = asyncio.Event()
    reported = [{"component": "split", "task": 2, "time": time.time(), "error": "ValueError: bad line"}]

    async def slow(_: aiohttp.web.Request) -> aiohttp.web.Response:
        await release.wait()
        return aiohttp.web.json_response([])

    async def quick(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response(reported)

    async with errors_served(slow) as slow_port, errors_served(quick) as quick_port:
        try:
            await start_operator(resync_seconds=0.3)
            for name in ("aa", "bb"):  # the resync takes them in this order
                await create_topology(api, name, SPEC)
                await eventually(f"{name}'s StatefulSet", lambda name=name: obj(api, STATEFULSETS, f"{name}-worker"))
            await put_pod(api, "aa-worker-0", "aa", {"phase": "Running", "podIP": "127.0.0.1"}, metrics_port=slow_port)
            await put_pod(api, "bb-worker-0", "bb", {"phase": "Running", "podIP": "127.0.0.1"},
                          metrics_port=quick_port)
            rows = await eventually("bb's errors while aa's pod is still asked",
                                    lambda: status(api, "bb").get("componentErrors"), timeout=20)
            assert rows[0]["pod"] == "bb-worker-0" and not release.is_set()
        finally:
            release.set()


async def test_a_pod_whose_errors_never_end_does_not_hold_the_resync_and_only_the_newest_are_asked_for(
        api, start_operator, monkeypatch):
    """A pod runs its user's code, and its ``/errors`` answer was read for as long as bytes kept coming
    (one a second, in its headers or its body, held every Topology's resync for good) and whatever its
    size (a 3 MB answer of empty entries took the operator past its memory limit). Found by the security
    audit and the review. A process older than ``?last=`` (a pinned image) is asked for ``/errors``."""
    monkeypatch.setattr(processes, "ERRORS_TIMEOUT", 1.0)
    asked: list[str] = []
    reported = [{"component": "split", "task": 2, "time": time.time(), "error": "ValueError: bad line"}]

    async def errors(request: aiohttp.web.Request) -> aiohttp.web.Response:
        asked.append(request.query_string)
        if request.query_string:  # an older process: only /errors itself
            return aiohttp.web.Response(status=404)
        return aiohttp.web.json_response(reported)

    async def drip(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            for byte in b"HTTP/1.0 200 OK\r\nX-Slow: " + b"x" * 10_000:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.2)

    dripping = await asyncio.start_server(drip, "127.0.0.1", 0)
    try:
        async with errors_served(errors) as port:
            await start_operator(resync_seconds=0.3)
            await create_topology(api, "wc", SPEC)
            await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
            await put_pod(api, "wc-worker-0", "wc", {"phase": "Running", "podIP": "127.0.0.1"},
                          metrics_port=dripping.sockets[0].getsockname()[1])
            await put_pod(api, "wc-worker-1", "wc", {"phase": "Running", "podIP": "127.0.0.1"}, metrics_port=port)
            rows = await eventually("the other pod's errors", lambda: status(api, "wc").get("componentErrors"))
            assert [r["pod"] for r in rows] == ["wc-worker-1"] and asked[:2] == ["last=5", ""]
    finally:
        dripping.close()


async def test_a_status_refresh_reads_the_pods_in_one_list_not_one_get_each(api, start_operator, caplog):
    """Every pod event refreshes the status, which read each pod by name: during a rollout of n pods,
    about n events of n GETs each (found by the operator audit)."""
    caplog.set_level(logging.INFO, logger="kopf.objects")
    await start_operator()
    await create_topology(api, "wc", {**SPEC, "workers": 3})
    await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
    for i in range(3):
        await put_pod(api, f"wc-worker-{i}", "wc", {"phase": "Pending"})

    def handled() -> int:
        return sum("Handler 'pods' succeeded" in r.getMessage() for r in caplog.records)

    await eventually("the pods' events handled", lambda: handled() >= 3)
    position, before = mark(api), handled()
    await put_pod(api, "wc-worker-1", "wc", {"phase": "Running", "podIP": "127.0.0.1"})
    await eventually("its event handled", lambda: handled() > before)
    reads = [(r.method.value, r.url.path) for r in list(api)[position:] if "/pods" in r.url.path]
    assert not [r for r in reads if r[0] == "GET" and r[1].rsplit("/", 1)[-1].startswith("wc-")], reads
    assert ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods") in reads


@pytest.mark.parametrize("served, expected, version", [
    (("v1", "v1beta1"), "policy/v1", (1, 20)), (("v1", "v1beta1"), "policy/v1", (1, 27)),
    (("v1beta1",), "policy/v1beta1", (1, 20)), ((), None, (1, 20))])
async def test_disruption_budgets_use_the_policy_version_the_cluster_serves(api, start_operator, caplog, served,
                                                                            expected, version):
    """From 1.27 on, a budget lets a pod that is not ready be evicted: one pod that cannot start makes its
    whole role unready (readiness waits for every peer), and would block a node's drain for good."""
    caplog.set_level(logging.INFO)
    api.server_version = version
    for served_version in served:
        api.resources[f"policy/{served_version}/poddisruptionbudgets"] = kmock.ResourceInfo(
            kind="PodDisruptionBudget", singular="poddisruptionbudget", namespaced=True,
            verbs={"get", "list", "watch", "create", "patch", "delete"})
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    assert logged(caplog.records, f"PodDisruptionBudgets {expected or 'not served'}")
    if expected:
        budget = await eventually("the ackers' budget", lambda: obj(api, f"{expected}/poddisruptionbudgets",
                                                                    "wc-acker"))
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"].get("unhealthyPodEvictionPolicy") == ("AlwaysAllow" if version >= (1, 27) else None)
        assert obj(api, f"{expected}/poddisruptionbudgets", "wc-worker") is not None
    else:
        await eventually("the status", lambda: status(api, "wc").get("phase") == "Pending")
    for other in ("v1", "v1beta1"):
        if f"policy/{other}" != expected:
            assert obj(api, f"policy/{other}/poddisruptionbudgets", "wc-worker") is None


@pytest.mark.parametrize("gone", ["wc-worker", "wc-acker"])
async def test_a_status_refresh_that_finds_a_statefulset_gone_puts_it_back(api, gone):
    """Without an operator watching (no event for the deletion), a refresh (what a pod event starts)
    recreates the StatefulSet instead of reporting a rollout of nothing. The refresh runs outside
    kopf here: the operator posts its Events itself all the same."""
    op = OperatorThread(str(api.url), Settings(image="squall:test"))
    await op.start()
    await create_topology(api, "wc", SPEC)
    await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    for sts in ("wc-worker", "wc-acker"):
        await roll_out(api, sts)
    await eventually("Running", lambda: status(api, "wc").get("phase") == "Running")
    await op.stop()

    await delete(api, STATEFULSETS, gone)
    applied = len(events(api, "Applied"))
    operator = Operator(settings=Settings(image="squall:test"),
                        kube=Kube(client.ApiClient(client.Configuration(host=str(api.url)))))
    await asyncio.to_thread(operator.refresh, NAMESPACE, "wc")
    assert obj(api, STATEFULSETS, gone) is not None
    assert condition(api, "wc", "Progressing")["reason"] == "RollingOut"  # the new one, rolling out
    assert len(events(api, "Applied")) == applied + 1
