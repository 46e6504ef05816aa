"""Admission checks and what the operator adapts to the cluster's version: kopf serves the validating
webhook for real (HTTPS, its self-signed certificate) and manages its configuration in kmock; writes
are server-side applies with strict field validation from 1.25, merge patches before; the CEL rules
go into the installed CRD where the cluster supports them."""

from __future__ import annotations

import base64
import copy
import logging
import ssl
import uuid

import aiohttp
import kmock
import kubernetes
import pytest
import yaml
from operator_kit import (
    EMULATED,
    NAMESPACE,
    SPEC,
    STATEFULSETS,
    create_topology,
    eventually,
    free_port,
    logged,
    obj,
    status,
)
from tests.chart.chart_support import render

from squall.cli import main
from squall_operator import admission, crd, resource
from squall_operator.admission import SelfSignedServer
from squall_operator.settings import Settings

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def _operator_logs(caplog):
    caplog.set_level(logging.INFO)

WEBHOOKS = "admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
MUTATING = "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
BROKEN = copy.deepcopy(SPEC)
BROKEN["bolts"][1]["inputs"][0]["component"] = "splitt"
BROKEN["podTemplate"] = {"workers": {"spec": {"containers": [{"name": "worker", "command": ["sh"]}]}}}


def declare_cluster_scoped(api: kmock.KubernetesEmulator, res: str, kind: str) -> None:
    api.resources[res] = kmock.ResourceInfo(kind=kind, singular=kind.lower(), namespaced=False,
                                            verbs={"get", "list", "watch", "create", "patch", "update"})


async def install_webhook_configuration(api: kmock.KubernetesEmulator) -> None:
    """What the chart installs for the webhook: the ValidatingWebhookConfiguration squall.dev, empty."""
    declare_cluster_scoped(api, WEBHOOKS, "ValidatingWebhookConfiguration")
    (configuration,) = render().of_kind("ValidatingWebhookConfiguration")
    response = await api.post(f"/apis/{WEBHOOKS}", json=configuration)
    assert response.status == 200, await response.text()


def webhooks(api: kmock.KubernetesEmulator) -> list[dict] | None:
    return (obj(api, WEBHOOKS, "squall.dev", namespace=None) or {}).get("webhooks")


def address(client_config: dict) -> tuple[str, str | None]:
    """Where the API server would POST: the URL, or the Service's path on loopback with the Service's host
    name for the certificate check (the operator runs here, not behind a Service)."""
    if "url" in client_config:
        return client_config["url"], None
    service = client_config["service"]
    return (f"https://127.0.0.1:{service['port']}{service['path']}",
            f"{service['name']}.{service['namespace']}.svc")


async def review(config: dict, operation: str, spec: dict, *, old: dict | None = None) -> dict:
    """POST an AdmissionReview to the webhook the configuration points at, trusting only its CA bundle."""
    hook = config["webhooks"][0]
    url, server_hostname = address(hook["clientConfig"])
    context = ssl.create_default_context(cadata=base64.b64decode(hook["clientConfig"]["caBundle"]).decode())
    body = {"apiVersion": resource.API_VERSION, "kind": resource.KIND,
            "metadata": {"name": "wc", "namespace": NAMESPACE}, "spec": spec}
    request = {"uid": str(uuid.uuid4()), "operation": operation, "namespace": NAMESPACE, "name": "wc",
               "kind": {"group": resource.GROUP, "version": resource.VERSION, "kind": resource.KIND},
               "resource": {"group": resource.GROUP, "version": resource.VERSION, "resource": resource.PLURAL},
               "userInfo": {"username": "alice"}, "object": body,
               "oldObject": None if old is None else {**body, "spec": old}}
    async with aiohttp.ClientSession() as session, session.post(
            url, ssl=context, server_hostname=server_hostname,
            json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}) as response:
        assert response.status == 200, await response.text()
        return (await response.json())["response"]


@pytest.mark.asyncio
async def test_the_webhook_refuses_what_squall_validate_refuses_with_the_same_message(api, start_operator, tmp_path,
                                                                                      capsys):
    await install_webhook_configuration(api)
    op = await start_operator(webhook_host="127.0.0.1", webhook_port=free_port())
    await eventually("the webhook in the configuration", lambda: webhooks(api))
    config = obj(api, WEBHOOKS, "squall.dev", namespace=None)
    (hook,) = config["webhooks"]
    assert hook["name"] == "topology.squall.dev" and hook["clientConfig"]["url"] == \
        f"https://127.0.0.1:{op.settings.webhook_port}/topology"
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None" and hook["timeoutSeconds"] == 10
    assert hook["rules"] == [{"apiGroups": ["squall.dev"], "apiVersions": ["v1alpha1"], "resources": ["topologies"],
                              "operations": ["CREATE", "UPDATE"], "scope": "*"}]

    refused = await review(config, "CREATE", BROKEN)
    assert refused["allowed"] is False and refused["status"]["code"] == 422
    manifest = tmp_path / "wc.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": resource.API_VERSION, "kind": resource.KIND,
                                        "metadata": {"name": "wc", "namespace": NAMESPACE}, "spec": BROKEN}))
    assert main(["validate", str(manifest), "--no-imports"]) == 2
    printed = capsys.readouterr().err.removeprefix("squall validate: ").rstrip("\n")
    assert refused["status"]["message"] == printed
    assert "unknown component 'splitt'" in printed

    bad_pod_template = copy.deepcopy(SPEC)
    bad_pod_template["podTemplate"] = BROKEN["podTemplate"]
    refused = await review(config, "UPDATE", bad_pod_template, old=SPEC)
    assert "podTemplate.workers.spec.containers[0].command: the operator sets the command" in \
        refused["status"]["message"]
    # a null that would remove the operator's security context arrives as JSON null, and is refused too
    refused = await review(config, "UPDATE", {**SPEC, "podTemplate": {"workers": {"spec": {"securityContext": None}}}},
                           old=SPEC)
    assert "podTemplate.workers.spec.securityContext: null would remove the pods' non-root security context" in \
        refused["status"]["message"]

    assert (await review(config, "CREATE", SPEC))["allowed"] is True
    # a Topology stored before the webhook existed: metadata writes (kopf's own) still pass
    assert (await review(config, "UPDATE", BROKEN, old=BROKEN))["allowed"] is True

    await op.stop()  # with failurePolicy Fail, a webhook left behind would refuse every Topology change
    assert webhooks(api) == []
    assert obj(api, MUTATING, "squall.dev", namespace=None) is None  # kopf manages no configuration


@pytest.mark.asyncio
async def test_without_the_configuration_the_operator_runs_on_and_says_why_topologies_go_unchecked(
        api, start_operator, caplog):
    """The operator may not create webhook configurations (whoever may can intercept any object): the chart
    makes the one it writes. Without it (deleted by hand), Topologies are still reconciled."""
    declare_cluster_scoped(api, WEBHOOKS, "ValidatingWebhookConfiguration")
    await start_operator(webhook_host="127.0.0.1", webhook_port=free_port())
    await eventually("the error", lambda: logged(caplog.records, "the ValidatingWebhookConfiguration squall.dev was "
                                                 "not pointed at this operator: it does not exist: install it with "
                                                 "the chart"))
    await create_topology(api, "wc", SPEC)
    await eventually("the Topology reconciled", lambda: obj(api, STATEFULSETS, "wc-worker"))


@pytest.mark.asyncio
async def test_a_webhook_on_a_service_is_reached_through_the_service_not_a_url(api, start_operator):
    # the API server resolves a URL's host with its own resolver, which knows no cluster names
    await install_webhook_configuration(api)
    port = free_port()
    await start_operator(webhook_host="squall-webhook.squall-system.svc", webhook_port=port)
    await eventually("the webhook in the configuration", lambda: webhooks(api))
    config = obj(api, WEBHOOKS, "squall.dev", namespace=None)
    client_config = config["webhooks"][0]["clientConfig"]
    assert "url" not in client_config
    assert client_config["service"] == {"namespace": "squall-system", "name": "squall-webhook", "port": port,
                                        "path": "/topology"}
    # its certificate is good for the name the API server checks, and the path is the handler's
    assert (await review(config, "CREATE", BROKEN))["allowed"] is False
    assert (await review(config, "CREATE", SPEC))["allowed"] is True


@pytest.mark.asyncio
async def test_a_webhook_may_be_told_to_ignore_its_failures(api, start_operator):
    await install_webhook_configuration(api)
    await start_operator(webhook_host="127.0.0.1", webhook_port=free_port(), webhook_failure_policy="Ignore")
    hooks = await eventually("the webhook in the configuration", lambda: webhooks(api))
    assert hooks[0]["failurePolicy"] == "Ignore"


class ApiServerWrites:
    """The webhook configuration's writes as the API server takes them, with faults the test injects: a
    stand-in at the client's call, since kmock cannot answer 500 or hang without applying the write."""

    def __init__(self, monkeypatch, *, failures: int = 0, hold_first: bool = False) -> None:
        import threading

        self.written: list[list] = []
        self.failures = failures
        self.started, self.release = threading.Event(), threading.Event()
        if not hold_first:
            self.release.set()
        monkeypatch.setattr(kubernetes.client.AdmissionregistrationV1Api, "patch_validating_webhook_configuration",
                            lambda _, name, body, **__: self.patch(name, body))

    def patch(self, name: str, body: dict) -> None:
        assert name == "squall.dev"
        if not self.started.is_set():  # the first write only
            self.started.set()
            self.release.wait(10)
        if self.failures:
            self.failures -= 1
            raise kubernetes.client.exceptions.ApiException(status=503, reason="Service Unavailable")
        self.written.append(body["webhooks"])


def configuration(monkeypatch) -> admission.Configuration:
    monkeypatch.setattr(admission, "RETRY_FIRST", 0.01)
    return admission.Configuration(kubernetes.client.ApiClient(), Settings(), logging.getLogger("test"))


CONFIG = {"caBundle": "Y2E=", "url": "https://127.0.0.1:9443"}


@pytest.mark.asyncio
async def test_a_write_the_api_server_refuses_for_now_is_tried_again(monkeypatch, caplog):
    """kopf's management wrote again whenever something changed; the operator writes once per start, so a
    503 left the webhook empty, or pointing at the last pod's certificate (found by the review)."""
    writes = ApiServerWrites(monkeypatch, failures=2)
    await configuration(monkeypatch).publish(CONFIG)
    [[hook]] = writes.written
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/topology"
    assert logged(caplog.records, "pointing the ValidatingWebhookConfiguration squall.dev at this operator failed: "
                                  "503 Service Unavailable; trying again")


@pytest.mark.asyncio
async def test_a_stop_that_cancels_a_start_empties_the_configuration_after_the_starts_write(monkeypatch):
    """The start's write runs on in its thread when the start is cancelled: the stop's, sent beside it, could
    land first, leaving the configuration pointing at a server that is gone, which with failurePolicy Fail
    refuses every Topology change (found by the review)."""
    import asyncio

    writes = ApiServerWrites(monkeypatch, hold_first=True)
    config = configuration(monkeypatch)
    start = asyncio.ensure_future(config.publish(CONFIG))
    await asyncio.to_thread(writes.started.wait, 10)
    start.cancel()
    stop = asyncio.ensure_future(config.publish(None))
    await asyncio.sleep(0.05)
    assert writes.written == []  # the stop waits for the start's write
    writes.release.set()
    await stop
    assert [len(hooks) for hooks in writes.written] == [1, 0]
    with pytest.raises(asyncio.CancelledError):
        await start


def test_the_self_signed_certificate_names_the_host_and_its_addresses():
    from cryptography import x509

    cert_pem, key_pem = SelfSignedServer.build_certificate(["squall.squall-system.svc", "0.0.0.0", "10.0.0.7"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["squall.squall-system.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert b"PRIVATE KEY" in key_pem


@pytest.mark.asyncio
@pytest.mark.parametrize("version, server_side", [((1, 20), False), ((1, 27), True)])
async def test_writes_are_strict_server_side_applies_where_the_server_supports_them(api, start_operator, caplog,
                                                                                     version, server_side):
    api.server_version = version
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("the acker StatefulSet", lambda: obj(api, STATEFULSETS, "wc-acker"))
    writes = [r for r in list(api) if r.resource is not None and r.resource.plural == "statefulsets"
              and r.method in (kmock.method.POST, kmock.method.PATCH) and EMULATED not in r.headers]
    assert writes
    for request in writes:
        if server_side:
            assert request.method == kmock.method.PATCH
            assert request.headers["Content-Type"] == "application/apply-patch+yaml"
            assert dict(request.url.query) == {"fieldManager": "squall-operator", "force": "true",
                                               "fieldValidation": "Strict"}
        else:
            assert request.method == kmock.method.POST and "fieldValidation" not in request.url.query
    assert logged(caplog.records, f"Kubernetes {version[0]}.{version[1]}: " +
                  ("server-side apply with strict field validation" if server_side else "merge patches"))


@pytest.mark.asyncio
async def test_a_field_the_server_refuses_is_reported_not_dropped(api, start_operator):
    api.server_version = (1, 27)
    strict = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "BadRequest", "code": 400,
              "message": 'StatefulSet in version "v1" cannot be handled as a StatefulSet: strict decoding error: '
                         'unknown field "spec.template.spec.containers[0].resources.request"'}
    # the emulator creates what an apply creates with a POST to itself: the refusal goes there
    api[f"post /apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"] << 400 << strict
    await start_operator()
    await create_topology(api, "wc", SPEC)
    errors = await eventually("a recorded error", lambda: status(api, "wc").get("errors"))
    assert errors[-1]["message"] == f"creating StatefulSet wc-worker failed: 400 {strict['message']}"


@pytest.mark.asyncio
@pytest.mark.parametrize("version", [(1, 20), (1, 27)])
async def test_the_cel_rules_go_into_the_crd_where_the_server_supports_them(api, start_operator, caplog, version):
    api.server_version = version
    declare_cluster_scoped(api, CRDS, "CustomResourceDefinition")
    response = await api.post(f"/apis/{CRDS}", json=crd.crd())
    assert response.status == 200, await response.text()
    await start_operator()
    name = "topologies.squall.dev"
    if version >= (1, 25):
        await eventually("the CEL rules", lambda: obj(api, CRDS, name, namespace=None)["spec"]["versions"]
                         == crd.crd(cel=True)["spec"]["versions"])
    else:
        await eventually("the log line", lambda: logged(caplog.records, "Kubernetes 1.20 has no CEL validation rules"))
        assert obj(api, CRDS, name, namespace=None)["spec"] == crd.crd()["spec"]
