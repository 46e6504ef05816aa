"""The validating admission webhook: ``kubectl apply`` of a broken Topology is refused with the
messages ``squall validate`` prints.

kopf serves it (``on.validate``) over HTTPS with a self-signed certificate it makes at start-up. The
chart creates the ValidatingWebhookConfiguration ``squall.dev``; the operator writes its webhook (CA
bundle, where to reach it, rules) whenever its server starts, and removes it when the operator stops
cleanly. So the operator needs only ``patch`` of that one configuration: kopf's own management of it
creates configurations, a permission that would let whoever holds the operator's token intercept any
object of the cluster. The certificate comes from :func:`squall.transport.tls.self_signed` (kopf's
own builder needs ``certbuilder``/``oscrypto``, which cannot load OpenSSL 3).

A host of the form ``<name>.<namespace>.svc`` is a Service of the cluster, and the configuration names
that Service rather than a URL: the API server then finds the Service's address itself. With a URL it
would ask its own resolver, which on most clusters (kind's, kubeadm's, k8s-local's) does not know
cluster names, and every ``kubectl apply`` would fail with "no such host".

Every replica of the operator serves the webhook, the one leading (:mod:`squall_operator.leader`) and
the ones waiting, from start to stop, apart from kopf (which runs in the leader alone): the Service
sends each review to a ready replica. So they present one certificate, which the first to start makes
and keeps in the Secret ``<service>.webhook-certificate`` beside the Service (a name no Topology's
Secret can take: those have no dot), and a replica that stops leaves the configuration as it is: the
others serve it on. A webhook reached at a URL (an operator run outside the cluster) has a certificate
of its own, and its operator empties the configuration when it stops cleanly.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from squall.backoff import Backoff
from squall.errors import TopologyError
from squall.topology.assignment import check_state_kept
from squall.topology.k8s import DNS_LABEL
from squall.topology.spec import TopologySpec
from squall.transport.tls import self_signed
from squall_operator import resource, status
from squall_operator.settings import Settings

CONFIGURATION = resource.GROUP  # the ValidatingWebhookConfiguration's name: the chart creates it
HANDLER = "topology"  # the on.validate handler's id: the webhook's path, and its name's first label
TIMEOUT_SECONDS = 10  # a check takes milliseconds; the API server waits no longer for an operator that hangs
REQUEST_TIMEOUT = 10.0  # seconds for a write of the configuration
RETRY_FIRST, RETRY_LAST = 1.0, 30.0  # seconds between tries of a write the API server refused for now
CERT_DAYS = 3650  # the certificate lives as long as the operator's pod; a restart makes a new one
SERVICE_HOST = re.compile(rf"^(?P<name>{DNS_LABEL})\.(?P<namespace>{DNS_LABEL})\.svc$")


class SelfSignedServer(kopf.WebhookServer):
    """kopf's HTTPS webhook server, with its self-signed certificate built by ``cryptography``, or the
    replicas' shared ``certificate`` (cert, key); reached through a Service when its host is a Service's
    name. ``publish`` is awaited with the webhook's client config whenever the server (re)starts, and,
    without a shared certificate, with None when it stops."""

    def __init__(self, *, publish: Callable[[kopf.WebhookClientConfig | None], Any],
                 certificate: tuple[bytes, bytes] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.publish = publish
        self.listening = False  # serving HTTPS: from before the configuration is written to the server's stop
        self.shared = certificate is not None
        if certificate is not None:
            self.build_certificate = lambda hostnames, password=None: certificate  # type: ignore[method-assign]

    @staticmethod
    def build_certificate(hostnames: Collection[str], password: str | None = None) -> tuple[bytes, bytes]:
        return self_signed(hostnames, days=CERT_DAYS, password=password)

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        try:
            async for config in super().__call__(fn):
                self.listening = True
                config = client_config(config, host=self.host, port=self.port)
                await self.publish(config)
                yield config
        finally:
            self.listening = False
            if not self.shared:  # a shared webhook is served on by the other replicas
                await self.publish(None)


def client_config(config: kopf.WebhookClientConfig, *, host: str | None,
                  port: int | None) -> kopf.WebhookClientConfig:
    """``config`` with its URL replaced by a reference to the Service ``host`` names, if it names one.
    The API server verifies the certificate against ``<name>.<namespace>.svc``, the host it was made for."""
    service = SERVICE_HOST.match(host or "")
    if service is None or port is None:
        return config
    reference = kopf.WebhookClientConfigService(namespace=service["namespace"], name=service["name"], port=port,
                                                path="")
    return kopf.WebhookClientConfig(**{k: v for k, v in config.items() if k != "url"}, service=reference)


def webhooks(config: kopf.WebhookClientConfig | None, settings: Settings) -> list[dict[str, Any]]:
    """The configuration's webhooks for a server reached at ``config`` (None: none serves)."""
    if config is None:
        return []
    reach = dict(config)
    if "url" in reach:
        reach["url"] = f"{reach['url'].rstrip('/')}/{HANDLER}"
    if "service" in reach:
        reach["service"] = {**reach["service"], "path": f"{reach['service'].get('path') or ''}/{HANDLER}"}
    return [{"name": f"{HANDLER}.{CONFIGURATION}", "clientConfig": reach,
             "rules": [{"apiGroups": [resource.GROUP], "apiVersions": [resource.VERSION],
                        "resources": [resource.PLURAL], "operations": ["CREATE", "UPDATE"], "scope": "*"}],
             "failurePolicy": settings.webhook_failure_policy, "matchPolicy": "Equivalent", "sideEffects": "None",
             "timeoutSeconds": TIMEOUT_SECONDS, "admissionReviewVersions": ["v1"]}]


class Configuration:
    """Writes the webhook into the ValidatingWebhookConfiguration the chart made."""

    def __init__(self, api: client.ApiClient, settings: Settings, logger: logging.Logger) -> None:
        self.api = api
        self.settings = settings
        self.logger = logger
        self._asked = 0  # publishes asked for: a later one supersedes the retries of an earlier one
        self._writing: asyncio.Lock | None = None  # made in the loop that publishes

    async def publish(self, config: kopf.WebhookClientConfig | None) -> None:
        """Point the configuration at ``config`` (None: empty it, so that a stopped operator refuses
        nothing). Writes go one at a time, in the order asked: a stop that cancels a start waits for its
        write in flight, which its thread finishes anyway. A write the API server refuses for now (it is
        busy, unreachable) is tried again until a later publish supersedes it; a missing configuration or
        a forbidden write is logged, not raised: reconciling Topologies goes on without admission checks."""
        hooks = webhooks(config, self.settings)
        self._asked += 1
        asked, retry = self._asked, Backoff(RETRY_FIRST, RETRY_LAST)
        self._writing = self._writing or asyncio.Lock()
        while True:
            async with self._writing:
                if asked != self._asked:
                    return
                write = asyncio.ensure_future(asyncio.to_thread(self._write, hooks))
                try:
                    error = await asyncio.shield(write)
                except asyncio.CancelledError:
                    await asyncio.wait([write])  # the lock goes once the write in flight has ended
                    raise
            if error is None or not hooks:  # a stopping operator tries once: the pod goes anyway
                return
            if retry.failed(time.monotonic()):
                self.logger.warning("pointing the ValidatingWebhookConfiguration %s at this operator failed: "
                                    "%s; trying again", CONFIGURATION, error)
            await asyncio.sleep(retry.delay)

    def _write(self, hooks: list[dict[str, Any]]) -> str | None:
        """Patch the configuration's webhooks; None when done or for good, else why it may work later."""
        try:
            client.AdmissionregistrationV1Api(self.api).patch_validating_webhook_configuration(
                CONFIGURATION, {"webhooks": hooks}, _content_type="application/merge-patch+json",
                _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status not in (403, 404):
                return f"{exc.status} {exc.reason}"
            if not hooks and exc.status == 404:
                self.logger.info("the ValidatingWebhookConfiguration %s is gone: nothing to empty", CONFIGURATION)
                return None
            why = ("it does not exist: install it with the chart (helm upgrade puts it back)" if exc.status == 404
                   else f"{exc.status} {exc.reason}: the operator may patch it alone (the chart's ClusterRole)")
            self.logger.error("the ValidatingWebhookConfiguration %s was not %s: %s; %s", CONFIGURATION,
                              "pointed at this operator" if hooks else "emptied", why,
                              "Topologies are not checked on admission (the operator still reports an invalid "
                              "spec as phase Failed)" if hooks else "it points at a server that is gone")
            return None
        except Exception as exc:  # noqa: BLE001 - urllib3 and the socket raise several types
            return f"{type(exc).__name__}: {exc}"
        self.logger.info("the ValidatingWebhookConfiguration %s %s", CONFIGURATION,
                         "points at this operator" if hooks else "is emptied: this operator stops")
        return None


CERTIFICATE_SUFFIX = ".webhook-certificate"  # the Secret of the replicas' shared certificate: <service><suffix>
HOST_ANNOTATION = f"{resource.GROUP}/webhook-host"  # the host the Secret's certificate was made for


class Webhook:
    """The validating webhook, served by every replica from its start (:meth:`run`) until it stops.
    ``on_review(allowed=...)`` hears of every review's outcome (the operator's metrics)."""

    def __init__(self, settings: Settings, api: client.ApiClient,
                 on_review: Callable[..., None] = lambda *, allowed: None) -> None:
        assert settings.webhook_host is not None
        self.settings = settings
        self.api = api
        self.on_review = on_review
        self.logger = logging.getLogger(__name__)
        self._server: SelfSignedServer | None = None

    @property
    def serving(self) -> bool:
        """Whether it serves HTTPS (the configuration may be being written still: any replica writes it)."""
        return self._server is not None and self._server.listening

    async def run(self) -> None:
        """Serve until cancelled; keep the configuration pointing at the webhook."""
        configuration = Configuration(self.api, self.settings, self.logger)
        self._server = SelfSignedServer(addr="0.0.0.0", port=self.settings.webhook_port,
                                        host=self.settings.webhook_host, publish=configuration.publish,
                                        certificate=await self._certificate())
        async for _ in self._server(functools.partial(review, on_review=self.on_review)):
            pass

    async def _certificate(self) -> tuple[bytes, bytes] | None:
        """The replicas' shared certificate for a Service host (None: a URL, with a certificate of its own),
        tried until the API server gives it."""
        service = SERVICE_HOST.match(self.settings.webhook_host or "")
        if service is None:
            return None
        retry = Backoff(RETRY_FIRST, RETRY_LAST)
        while True:
            try:
                return await asyncio.to_thread(shared_certificate, self.api, namespace=service["namespace"],
                                               name=service["name"] + CERTIFICATE_SUFFIX,
                                               host=self.settings.webhook_host or "")
            except Exception as exc:  # noqa: BLE001 - urllib3, the socket and the API raise several types
                if retry.failed(time.monotonic()):
                    self.logger.warning("reading the webhook's certificate (Secret %s/%s%s) failed: %s; trying "
                                        "again", service["namespace"], service["name"], CERTIFICATE_SUFFIX, exc)
            await asyncio.sleep(retry.delay)


def shared_certificate(api: client.ApiClient, *, namespace: str, name: str, host: str) -> tuple[bytes, bytes]:
    """The (cert, key) of the Secret ``namespace/name``, made for ``host`` by the first replica that found
    none (or one made for another host); of two that make it at once, the second reads the first's."""
    core = client.CoreV1Api(api)
    for _ in range(3):
        try:
            secret = core.read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise
            secret = None
        if secret is not None and (secret.metadata.annotations or {}).get(HOST_ANNOTATION) == host and \
                {"tls.crt", "tls.key"} <= set(secret.data or {}):
            return base64.b64decode(secret.data["tls.crt"]), base64.b64decode(secret.data["tls.key"])
        cert, key = self_signed([host], days=CERT_DAYS)
        body = {"metadata": {"name": name, "namespace": namespace, "annotations": {HOST_ANNOTATION: host}},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()}}
        try:
            if secret is None:
                core.create_namespaced_secret(namespace, body, _request_timeout=REQUEST_TIMEOUT)
            else:  # made for another host: replaced, unless another replica wrote it since (409)
                body["metadata"]["resourceVersion"] = secret.metadata.resource_version
                core.patch_namespaced_secret(name, namespace, body, _request_timeout=REQUEST_TIMEOUT,
                                             _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status != 409:
                raise
            continue  # another replica wrote it first: read theirs
        return cert, key
    raise RuntimeError(f"the Secret {namespace}/{name} changed under every write")


async def review(request: dict[str, Any], *, on_review: Callable[..., None], **_: Any) -> dict[str, Any]:
    """The AdmissionReview response to ``request``: :func:`check` of its Topology, in a thread (a spec
    with many components takes milliseconds, and the loop renews the Lease)."""
    payload = request.get("request") or {}
    new, old = payload.get("object"), payload.get("oldObject")
    meta = (new if new is not None else old or {}).get("metadata") or {}
    response: dict[str, Any] = {"uid": payload.get("uid", ""), "allowed": True}
    try:
        await asyncio.to_thread(check, name=meta.get("name") or payload.get("name"),
                                namespace=meta.get("namespace") or payload.get("namespace"),
                                spec=(new or {}).get("spec"), old=old)
    except kopf.AdmissionError as exc:
        response.update(allowed=False, status={"message": str(exc), "code": exc.code or 422})
    except Exception as exc:  # noqa: BLE001 - a bug refuses the write, as kopf's handlers did
        logging.getLogger(__name__).exception("reviewing a Topology failed")
        response.update(allowed=False, status={"message": f"{type(exc).__name__}: {exc}", "code": 500})
    on_review(allowed=response["allowed"])
    return {"apiVersion": request.get("apiVersion", "admission.k8s.io/v1"),
            "kind": request.get("kind", "AdmissionReview"), "response": response}


def check(*, name: str | None, namespace: str | None, spec: Any, old: Any) -> None:
    """Refuse (:class:`kopf.AdmissionError`, HTTP 422) a Topology whose new spec does not pass ``squall
    validate`` without imports, or that changes the tasks of a bolt that is stateful in the old spec and
    the new (``check_state_kept``). An update that leaves the spec as it was passes: kopf's and other
    controllers' metadata writes go through even on a Topology stored before the webhook existed."""
    if old is not None and (old.get("spec") or {}) == (dict(spec) if spec is not None else {}):
        return
    try:
        new = resource.check_spec(name or "topology", dict(spec) if spec is not None else None, namespace=namespace)
        # against the old spec, unless the operator refused it (Failed): the pods run another, which the
        # operator compares the new one with, and a change back to it must go through
        if old is not None and new.checkpointing and (old.get("status") or {}).get("phase") != status.FAILED:
            running = _valid(name or "topology", old.get("spec"), namespace=namespace)
            if running is not None:
                check_state_kept(running, new)
    except TopologyError as exc:
        raise kopf.AdmissionError(str(exc), code=422) from None


def _valid(name: str, spec: Any, *, namespace: str | None) -> TopologySpec | None:
    """The spec as the operator reads it, or None where it is not valid (stored before the webhook was)."""
    try:
        return resource.check_spec(name, spec, namespace=namespace)
    except TopologyError:
        return None
