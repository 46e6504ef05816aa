"""The validating admission webhook: ``kubectl apply`` of a broken Topology is refused with the
messages ``squall validate`` prints.

kopf serves it (``on.validate``) over HTTPS with a self-signed certificate it makes at start-up, and
keeps a ValidatingWebhookConfiguration named ``squall.dev`` pointing at it, CA bundle included. The
certificate is built with ``cryptography`` here (kopf's own builder needs ``certbuilder``/``oscrypto``,
which cannot load OpenSSL 3).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Callable, Collection
from typing import Any

import kopf

from squall.errors import TopologyError
from squall_operator import resource
from squall_operator.settings import Settings

CONFIGURATION = resource.GROUP  # the ValidatingWebhookConfiguration's name
CERT_DAYS = 3650  # the certificate lives as long as the operator's pod; a restart makes a new one


class SelfSignedServer(kopf.WebhookServer):
    """kopf's HTTPS webhook server, with its self-signed certificate built by ``cryptography``."""

    @staticmethod
    def build_certificate(hostnames: Collection[str], password: str | None = None) -> tuple[bytes, bytes]:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        names: list[x509.GeneralName] = []
        for host in dict.fromkeys(hostnames):
            try:
                address = ipaddress.ip_address(host)
            except ValueError:
                names.append(x509.DNSName(host))
            else:
                if not address.is_unspecified:  # 0.0.0.0 is where it listens, never whom one asks
                    names.append(x509.IPAddress(address))
        common = next((str(n.value) for n in names if isinstance(n, x509.DNSName)), str(names[0].value))
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(key, hashes.SHA256()))
        encryption: Any = (serialization.BestAvailableEncryption(password.encode()) if password
                           else serialization.NoEncryption())
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                  encryption))


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
