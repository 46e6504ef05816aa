"""Each Topology's own CA in a Secret its pods mount (mutual TLS), and a NetworkPolicy that lets in
only its own pods, and its metrics port only from named namespaces: kopf against kmock."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from operator_kit import (
    NETWORK_POLICIES,
    SECRETS,
    SPEC,
    STATEFULSETS,
    create_topology,
    events,
    eventually,
    obj,
    patch,
    roll_out,
    status,
)

from squall.contract import TLS_DIR, TLS_MOUNT
from squall.transport.tls import CA_FILE, CERT_FILE, KEY_FILE, Credentials, issue
from squall_operator.render import TLS_CA, credentials

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def secret_data(tls: Credentials) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in
            ((CA_FILE, tls.ca), (CERT_FILE, tls.cert), (KEY_FILE, tls.key))}


def ca_annotation(sts: dict) -> str | None:
    return sts["spec"]["template"]["metadata"]["annotations"].get(TLS_CA)


async def test_each_topology_has_its_own_ca_which_its_pods_mount(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await create_topology(api, "other", SPEC)
    await eventually("both Secrets", lambda: obj(api, SECRETS, "wc-tls") and obj(api, SECRETS, "other-tls"))
    secret = obj(api, SECRETS, "wc-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["ownerReferences"][0]["name"] == "wc"
    tls, others = credentials(secret), credentials(obj(api, SECRETS, "other-tls"))
    assert tls is not None and others is not None and tls.ca != others.ca
    await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    for sts in (obj(api, STATEFULSETS, "wc-worker"), obj(api, STATEFULSETS, "wc-acker")):
        pod = sts["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert {"name": TLS_DIR, "value": TLS_MOUNT} in container["env"]
        assert {"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True} in container["volumeMounts"]
        assert {"name": "tls", "secret": {"secretName": "wc-tls", "defaultMode": 0o440}} in pod["volumes"]
        assert ca_annotation(sts) == tls.fingerprint()


async def test_a_deleted_secret_is_issued_again_and_the_new_ca_rolls_the_pods(api, start_operator):
    from test_drift import delete

    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("the Secret and the acker StatefulSet",
                     lambda: obj(api, SECRETS, "wc-tls") and obj(api, STATEFULSETS, "wc-acker"))
    old = credentials(obj(api, SECRETS, "wc-tls"))
    for sts in ("wc-worker", "wc-acker"):
        await roll_out(api, sts)
    await eventually("Running", lambda: status(api, "wc").get("phase") == "Running")
    await delete(api, SECRETS, "wc-tls")  # how the CA is rotated (docs/operations.md)
    new = await eventually("a new CA", lambda: (s := obj(api, SECRETS, "wc-tls")) and
                           (c := credentials(s)) and c.ca != old.ca and c)
    for name in ("wc-worker", "wc-acker"):
        await eventually(f"{name} trusts the new CA",
                         lambda name=name: ca_annotation(obj(api, STATEFULSETS, name)) == new.fingerprint())


async def test_a_certificate_due_for_renewal_is_replaced_the_new_ca_rolls_the_pods_and_an_event_says_why(
        api, start_operator):
    """Before, the certificate lived a year, and then every process of the topology failed its TLS handshakes."""
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("the Secret and the acker StatefulSet",
                     lambda: obj(api, SECRETS, "wc-tls") and obj(api, STATEFULSETS, "wc-acker"))
    for sts in ("wc-worker", "wc-acker"):
        await roll_out(api, sts)
    await eventually("Running", lambda: status(api, "wc").get("phase") == "Running")
    old = issue("wc", now=datetime.now(UTC) - timedelta(days=300))  # 65 days left
    await patch(api, SECRETS, "wc-tls", {"data": secret_data(old)})
    new = await eventually("new credentials", lambda: (c := credentials(obj(api, SECRETS, "wc-tls"))) and
                           c.ca != old.ca and c)
    assert new.validity()[1] > datetime.now(UTC) + timedelta(days=364)
    for name in ("wc-worker", "wc-acker"):
        await eventually(f"{name} trusts the new CA",
                         lambda name=name: ca_annotation(obj(api, STATEFULSETS, name)) == new.fingerprint())
    [renewed] = events(api, "CertificateRenewed")
    assert renewed["type"] == "Normal" and f"expires at {old.validity()[1]:%Y-%m-%d %H:%M} UTC" in renewed["message"]


async def test_a_renewal_drains_the_processes_with_the_credentials_they_hold(api, start_operator, tmp_path,
                                                                              monkeypatch):
    """Real processes behind the emulated pods, holding credentials the Secret is then found to hold with 65
    days left. The operator commanded the pods with the credentials it rendered: processes of the old CA
    refused its DEACTIVATE and STATUS, so the drain never held their spouts nor waited for their trees."""
    from test_operator import REPO, processes_behind_pods

    monkeypatch.chdir(REPO)  # the processes import examples.wordcount from the working directory
    old = issue("wc", now=datetime.now(UTC) - timedelta(days=300))
    async with processes_behind_pods(api, start_operator, tmp_path, tls=old) as (_, sup, states):
        await patch(api, SECRETS, "wc-tls", {"data": secret_data(old)})
        await eventually("the rebalance's drain to end", lambda: events(api, "Drained") or events(api, "DrainTimedOut"),
                         timeout=40)
        assert not events(api, "DrainTimedOut")
        held = states()
        assert held and all(x.held and x.idle for x in held), held  # deactivated, and nothing left in flight
        assert credentials(obj(api, SECRETS, "wc-tls")).ca != old.ca
        assert events(api, "CertificateRenewed")


async def test_turning_tls_off_drains_the_pods_made_with_it_over_tls(api, start_operator, tmp_path, monkeypatch):
    """An operator started with TLS off commanded every pod in plaintext: the pods made while TLS was on
    refused, so the rebalance that replaces them neither held their spouts nor waited for their trees.
    A pod made with TLS is commanded with its Secret's credentials, which stay until it is replaced."""
    from test_operator import REPO, processes_behind_pods

    from squall_operator import certificates

    monkeypatch.chdir(REPO)
    tls = issue("wc")
    monkeypatch.setattr(certificates, "issue", lambda topology: tls)  # the Secret holds what the processes do
    operators = []

    async def start(**settings):
        operators.append(await start_operator(**settings))
        return operators[-1]

    async with processes_behind_pods(api, start, tmp_path, tls=tls) as (_, sup, states):
        await eventually("the processes' spouts active", lambda: (s := states()) and any(x.active for x in s))
        await operators[0].stop()
        await start_operator(tls=False)
        await eventually("the rebalance's drain to end", lambda: events(api, "Drained") or events(api, "DrainTimedOut"),
                         timeout=40)
        assert not events(api, "DrainTimedOut")
        held = states()
        assert held and all(x.held and x.idle for x in held), held  # deactivated, and nothing left in flight


async def test_the_network_policy_lets_in_the_topologys_pods_named_namespaces_on_metrics_and_the_operator(
        api, start_operator):
    await start_operator(metrics_namespaces=("monitoring",), own_namespace="squall-system")
    await create_topology(api, "wc", SPEC)
    policy = await eventually("the NetworkPolicy", lambda: obj(api, NETWORK_POLICIES, "wc"))
    own = {"matchLabels": {"app.kubernetes.io/name": "squall", "app.kubernetes.io/instance": "wc"},
           "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                 "values": ["worker", "acker", "spark-executor"]}]}
    assert policy["spec"] == {"podSelector": own, "policyTypes": ["Ingress"], "ingress": [
        {"from": [{"podSelector": own}]},
        {"from": [{"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                                "values": ["monitoring", "squall-system"]}]}}],
         "ports": [{"port": 9090, "protocol": "TCP"}]},
        # the operator's namespace on the gRPC port too: a rebalance's commands
        {"from": [{"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                                "values": ["squall-system"]}]}}],
         "ports": [{"port": 7070, "protocol": "TCP"}]}]}


async def test_tls_and_the_network_policy_can_be_turned_off(api, start_operator):
    await start_operator(tls=False, network_policy=False)
    await create_topology(api, "wc", SPEC)
    sts = await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
    assert ca_annotation(sts) is None
    assert TLS_DIR not in {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert obj(api, SECRETS, "wc-tls") is None and obj(api, NETWORK_POLICIES, "wc") is None


async def test_the_operator_watches_only_its_own_children_of_each_kind(api, start_operator):
    """The API server filters the watches of Secrets, ConfigMaps, Services, Pods and StatefulSets by the
    managed-by label: the cluster's other Secrets never reach the operator."""
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("the worker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-worker"))
    plurals = {"secrets", "configmaps", "services", "pods", "statefulsets"}
    watches = await eventually("a watch of each child kind", lambda: (found := {
        r.url.path.rsplit("/", 1)[-1]: r.url.query.get("labelSelector") for r in list(api)
        if r.url.query.get("watch") == "true" and r.url.path.rsplit("/", 1)[-1] in plurals}) and set(found) == plurals
        and found)
    assert watches == dict.fromkeys(plurals, "app.kubernetes.io/managed-by=squall-operator")
