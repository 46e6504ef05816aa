"""The validating admission webhook: ``kubectl apply`` of a broken Topology is refused with the
messages ``squall validate`` prints.

kopf serves it (``on.validate``) over HTTPS with a self-signed certificate it makes at start-up, and
keeps a ValidatingWebhookConfiguration named ``squall.dev`` pointing at it, CA bundle included. The
certificate comes from :func:`squall.transport.tls.self_signed` (kopf's own builder needs
``certbuilder``/``oscrypto``, which cannot load OpenSSL 3).

A host of the form ``<name>.<namespace>.svc`` is a Service of the cluster, and the configuration names
that Service rather than a URL: the API server then finds the Service's address itself. With a URL it
would ask its own resolver, which on most clusters (kind's, kubeadm's, k8s-local's) does not know
cluster names, and every ``kubectl apply`` would fail with "no such host".
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import kopf

from squall.errors import TopologyError
from squall.transport.tls import self_signed
from squall_operator import resource
from squall_operator.settings import Settings

CONFIGURATION = resource.GROUP  # the ValidatingWebhookConfiguration's name
CERT_DAYS = 3650  # the certificate lives as long as the operator's pod; a restart makes a new one
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"  # a DNS-1123 label: a Service's or a namespace's name
SERVICE_HOST = re.compile(rf"^(?P<name>{_LABEL})\.(?P<namespace>{_LABEL})\.svc$")


class SelfSignedServer(kopf.WebhookServer):
    """kopf's HTTPS webhook server, with its self-signed certificate built by ``cryptography``; reached
    through a Service when its host is a Service's name."""

    @staticmethod
    def build_certificate(hostnames: Collection[str], password: str | None = None) -> tuple[bytes, bytes]:
        return self_signed(hostnames, days=CERT_DAYS, password=password)

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for config in super().__call__(fn):
            yield client_config(config, host=self.host, port=self.port)


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


def configure(kopf_settings: kopf.OperatorSettings, settings: Settings) -> None:
    """Serve the webhook on ``settings.webhook_port``, reachable as ``settings.webhook_host`` (off without one)."""
    if settings.webhook_host is None:
        return
    kopf_settings.admission.server = SelfSignedServer(addr="0.0.0.0", port=settings.webhook_port,
                                                      host=settings.webhook_host)
    kopf_settings.admission.managed = CONFIGURATION


def check(*, name: str | None, namespace: str | None, spec: Any, old: Any) -> None:
    """Refuse (:class:`kopf.AdmissionError`, HTTP 422) a Topology whose new spec does not pass ``squall
    validate`` without imports. An update that leaves the spec as it was passes: kopf's and other
    controllers' metadata writes go through even on a Topology stored before the webhook existed."""
    if old is not None and (old.get("spec") or {}) == (dict(spec) if spec is not None else {}):
        return
    try:
        resource.check_spec(name or "topology", dict(spec) if spec is not None else None, namespace=namespace)
    except TopologyError as exc:
        raise kopf.AdmissionError(str(exc), code=422) from None


def register(registry: kopf.OperatorRegistry, settings: Settings,
             on_review: Callable[..., None] = lambda *, allowed: None) -> None:
    """The ``on.validate`` handler for Topologies; its failurePolicy is ``settings.webhook_failure_policy``.
    ``on_review(allowed=...)`` hears of every review's outcome (the operator's metrics)."""
    @kopf.on.validate(resource.GROUP, resource.VERSION, resource.PLURAL, registry=registry, id="topology",
                      operations=["CREATE", "UPDATE"],
                      ignore_failures=settings.webhook_failure_policy == "Ignore")
    def validate(name: str | None, namespace: str | None, spec: Any, old: Any, **_: Any) -> None:
        try:
            check(name=name, namespace=namespace, spec=spec, old=old)
        except kopf.AdmissionError:
            on_review(allowed=False)
            raise
        on_review(allowed=True)
