"""Leader election: two operators against one API server, one reconciles and the other serves the webhook
and waits; the Lease's algorithm against kmock's Lease objects (a candidate waits for a leader that
renews, takes over from one that stopped renewing only once its lease has run out by the candidate's
clock, and a leader that cannot renew stops before a candidate may take over)."""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.error

import pytest
from operator_kit import (
    DEADLINE,
    LEASES,
    NAMESPACE,
    SPEC,
    STATEFULSETS,
    create_topology,
    eventually,
    free_port,
    logged,
    obj,
    patch_spec,
)
from test_admission import BROKEN, WEBHOOKS, install_webhook_configuration, review, webhooks
from test_operator_metrics import scrape, value

from squall.errors import ConfigError
from squall.metrics.scrape import fetch
from squall_operator import admission, leader
from squall_operator.settings import Settings

pytestmark = [pytest.mark.timeout(60)]
LEASE = "squall-operator"
HOST = f"squall-webhook.{NAMESPACE}.svc"
TIMES = leader.LeaseTimes(duration=2.0, renew_deadline=1.2, retry=0.3)  # the chart's 8, 5 and 2 s, shorter


@pytest.fixture(autouse=True)
def _operator_logs(caplog):
    caplog.set_level(logging.INFO)


def holder(api) -> str | None:
    return ((obj(api, LEASES, LEASE) or {}).get("spec") or {}).get("holderIdentity")


def review_at(config: dict, port: int) -> dict:
    """The configuration with its Service's port replaced: the review goes to one replica."""
    hook = config["webhooks"][0]
    return {**config, "webhooks": [{**hook, "clientConfig": {
        **hook["clientConfig"], "service": {**hook["clientConfig"]["service"], "port": port}}}]}


@pytest.mark.asyncio
async def test_one_replica_reconciles_both_serve_the_webhook_and_the_second_leads_once_the_first_stops(
        api, start_operator, caplog):
    await install_webhook_configuration(api)
    replica = dict(lease=LEASE, own_namespace=NAMESPACE, webhook_host=HOST)
    first = await start_operator(webhook_port=free_port(), **replica)
    assert holder(api) is not None
    second = await start_operator(ready=False, webhook_port=free_port(), **replica)
    await eventually("the second waiting", lambda: logged(caplog.records, f"not leading: the Lease {NAMESPACE}/"
                                                          f"{LEASE} is held by {holder(api)}"))
    assert value(scrape(first.settings.metrics_port), "squall_operator_leader") == 1
    assert value(scrape(second.settings.metrics_port), "squall_operator_leader") == 0
    # the probes: both alive, and ready for the webhook's Service once it serves, leading or not
    for op in (first, second):
        for path in ("/healthz", "/readyz"):
            await eventually(f"{path} of {op.settings.liveness}", lambda op=op, path=path: probed(op, path))

    await create_topology(api, "wc", SPEC)
    await eventually("the Topology reconciled", lambda: obj(api, STATEFULSETS, "wc-worker"))
    assert not second.ready_flag.is_set()  # kopf does not run in the second: none of its handlers can

    # both serve the webhook, with one certificate: the configuration's CA bundle is good for either
    config = await eventually("the webhook in the configuration", lambda: webhooks(api) and
                              obj(api, WEBHOOKS, "squall.dev", namespace=None))
    for op in (first, second):
        at = review_at(config, op.settings.webhook_port)
        assert (await review(at, "CREATE", BROKEN))["allowed"] is False
        assert (await review(at, "CREATE", SPEC))["allowed"] is True
    assert value(scrape(second.settings.metrics_port), "squall_operator_webhook_admissions_total",
                 result="rejected") == 1

    leading = holder(api)
    await first.stop()  # hands the Lease back: the second takes it at its next try, not 8 s later
    assert webhooks(api), "a replica that stops leaves the webhook to the others"
    assert await asyncio.to_thread(second.ready_flag.wait, DEADLINE), "the second did not take over"
    assert holder(api) not in (None, leading)
    assert value(scrape(second.settings.metrics_port), "squall_operator_leader") == 1
    await patch_spec(api, "wc", {"workers": 3})
    await eventually("the second reconciles", lambda: obj(api, STATEFULSETS, "wc-worker")["spec"]["replicas"] == 3)
    assert (await review(review_at(config, second.settings.webhook_port), "CREATE", BROKEN))["allowed"] is False


def probed(op, path: str) -> bool:
    """Whether ``path`` of the operator's probes' endpoint answers 200 (503: not alive, or not ready)."""
    try:
        return bool(fetch(op.settings.liveness.replace("/healthz", path)))
    except urllib.error.HTTPError:
        return False


def election(api, name: str, clock=time.monotonic) -> leader.Election:
    from kubernetes import client

    return leader.Election(api=client.ApiClient(client.Configuration(host=str(api.url))), namespace=NAMESPACE,
                           name=LEASE, holder=name, times=TIMES, clock=clock)


@pytest.mark.asyncio
async def test_a_candidate_waits_while_the_leader_renews_and_takes_over_once_its_lease_runs_out(api):
    a, b = election(api, "a"), election(api, "b")
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    taking = asyncio.create_task(b.acquire())
    await asyncio.sleep(3 * TIMES.duration)  # a renews meanwhile: b waits, however long
    assert not taking.done() and holder(api) == "a" and a.leading and not b.leading

    holding.cancel()  # a dies without a word (kill -9): its last renewal stands
    renewed = time.monotonic()
    await asyncio.wait_for(taking, TIMES.duration + 3 * TIMES.retry + 1)
    took = time.monotonic() - renewed
    # not before the lease ran out, by b's clock, and within duration + 2 retries (a little slack for the threads)
    assert TIMES.duration - TIMES.retry <= took <= TIMES.duration + 2 * TIMES.retry + 0.5, took
    spec = obj(api, LEASES, LEASE)["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == ("b", 1, 2)


@pytest.mark.asyncio
async def test_a_leader_that_cannot_renew_stops_before_a_candidate_may_take_over(api, caplog):
    a, b = election(api, "a"), election(api, "b")
    await a.acquire()
    cut_at = time.monotonic()

    def refused(*_, **__):
        raise ConnectionRefusedError("the API server is out of reach")

    a._write = refused  # type: ignore[method-assign]  # a's renewals fail; b still reaches the API server
    holding = asyncio.create_task(a.hold())
    taking = asyncio.create_task(b.acquire())
    await asyncio.wait_for(holding, TIMES.renew_deadline + TIMES.retry + 1)
    lost = time.monotonic()
    assert not a.leading and not taking.done(), "a gave up leading before b may lead"
    await asyncio.wait_for(taking, TIMES.duration + 3 * TIMES.retry)
    assert lost - cut_at <= TIMES.renew_deadline + TIMES.retry
    assert b.leading and holder(api) == "b"
    assert logged(caplog.records, f"lost the Lease {NAMESPACE}/{LEASE}: not renewed for")


@pytest.mark.asyncio
async def test_a_leader_sees_another_holder_and_stops_leading_at_once(api):
    a = election(api, "a")
    await a.acquire()
    response = await api.patch(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}",
                               json={"spec": {"holderIdentity": "c"}},
                               headers={"Content-Type": "application/merge-patch+json"})
    assert response.status == 200, await response.text()
    await asyncio.wait_for(a.hold(), 2 * TIMES.retry + 1)
    assert not a.leading


@pytest.mark.asyncio
async def test_two_candidates_at_once_make_one_leader(api):
    candidates = [election(api, name) for name in "abcd"]
    tasks = [asyncio.create_task(c.acquire()) for c in candidates]
    done, pending = await asyncio.wait(tasks, timeout=3 * TIMES.retry, return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(2 * TIMES.retry)  # the others try again meanwhile, and keep failing
    assert len(done) == 1 and sum(c.leading for c in candidates) == 1
    assert holder(api) == next(c.holder for c in candidates if c.leading)
    for task in pending:
        task.cancel()


@pytest.mark.asyncio
async def test_the_replicas_share_one_webhook_certificate_made_for_the_host(api):
    from kubernetes import client

    kube = client.ApiClient(client.Configuration(host=str(api.url)))
    name = "squall-webhook" + admission.CERTIFICATE_SUFFIX

    def shared(host: str):
        return asyncio.to_thread(admission.shared_certificate, kube, namespace=NAMESPACE, name=name, host=host)

    first, second = await asyncio.gather(shared(HOST), shared(HOST))  # two replicas starting at once
    assert first == second == await shared(HOST)
    other = await shared("other.default.svc")
    assert other != first  # made again for the new host
    assert await shared("other.default.svc") == other


def test_a_lease_needs_the_pod_namespace():
    assert Settings.from_env({"SQUALL_OPERATOR_LEASE": "squall", "SQUALL_OPERATOR_POD_NAMESPACE": "ops"}).lease == \
        "squall"
    assert Settings.from_env({}).lease is None
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_LEASE='squall' needs SQUALL_OPERATOR_POD_NAMESPACE"):
        Settings.from_env({"SQUALL_OPERATOR_LEASE": "squall"})
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_LIVENESS='http://0.0.0.0:8080/live': the path is /healthz"):
        Settings.from_env({"SQUALL_OPERATOR_LIVENESS": "http://0.0.0.0:8080/live"})
    with pytest.raises(ValueError, match="0 < retry < renew_deadline < duration"):
        leader.LeaseTimes(duration=5, renew_deadline=5, retry=1)


@pytest.mark.asyncio
async def test_an_operator_that_loses_its_lease_ends_its_process(api, start_operator, caplog):
    op = await start_operator(lease=LEASE, own_namespace=NAMESPACE)
    response = await api.patch(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}",
                               json={"spec": {"holderIdentity": "another"}},
                               headers={"Content-Type": "application/merge-patch+json"})
    assert response.status == 200, await response.text()
    # at its next renewal (2 s): its handlers in flight must not run on beside the new leader's
    assert await asyncio.to_thread(op.left.wait, DEADLINE), "it went on leading"
    assert logged(caplog.records, f"lost the Lease {NAMESPACE}/{LEASE}")
