"""Mutual TLS between the processes of one topology: a CA of its own, and one certificate for all.

Every process of a topology presents the same certificate, signed by the topology's own CA, and
trusts only that CA: a peer is let in if, and only if, it holds a certificate of this topology. The
certificate names :data:`SERVER_NAME`, which clients check instead of the address they dial (pod
IPs and names change; the topology's CA is what identifies it). The operator keeps the three PEM
files in a Secret owned by the Topology; ``squall run`` issues them afresh for each run.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import grpc

from squall.errors import ConfigError

SERVER_NAME = "squall"  # the name every topology certificate carries, checked by clients
CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"  # a kubernetes.io/tls Secret's keys, and ca.crt
VALID_DAYS = 365


@dataclass(frozen=True)
class Credentials:
    """The PEM files of a topology: its CA certificate, and the certificate and key its processes present."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def load(cls, directory: str | Path) -> Credentials:
        """Read ``ca.crt``, ``tls.crt`` and ``tls.key`` from ``directory`` (a mounted Secret)."""
        directory = Path(directory)
        try:
            return cls(*((directory / name).read_bytes() for name in (CA_FILE, CERT_FILE, KEY_FILE)))
        except OSError as exc:
            raise ConfigError(f"cannot read the topology's TLS files from {directory}: {exc.strerror} "
                              f"({exc.filename}); it must hold {CA_FILE}, {CERT_FILE} and {KEY_FILE}") from None

    def write(self, directory: str | Path) -> Path:
        """Write the three files into ``directory`` (made readable by its owner only), each readable by its
        owner only: a new file renamed into place, so that a file or a link planted there before (a run
        directory in a shared /tmp) neither keeps its mode nor sends the key elsewhere."""
        directory = Path(directory)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)  # one made before, by this user or planted
        for name, data in ((CA_FILE, self.ca), (CERT_FILE, self.cert), (KEY_FILE, self.key)):
            fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.")  # 0600, and its own
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, directory / name)
        return directory

    def server(self) -> grpc.ServerCredentials:
        """A server that refuses any client without a certificate signed by the topology's CA."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel(self) -> grpc.ChannelCredentials:
        """A client that presents the topology certificate and trusts only the topology's CA."""
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    def fingerprint(self) -> str:
        """A short digest of the CA: pods carry it, so a new CA rolls them."""
        return hashlib.sha256(self.ca).hexdigest()[:16]

    def validity(self) -> tuple[datetime.datetime, datetime.datetime]:
        """(from, until): when both the CA and the certificate are valid."""
        from cryptography import x509

        both = [x509.load_pem_x509_certificate(pem) for pem in (self.ca, self.cert)]
        return max(c.not_valid_before_utc for c in both), min(c.not_valid_after_utc for c in both)


def issue(topology: str, *, days: int = VALID_DAYS, now: datetime.datetime | None = None) -> Credentials:
    """A new CA for ``topology`` and the one certificate its processes share (both servers and clients),
    valid for ``days`` from ``now`` (default: the present)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"squall topology {topology} CA")])
    ca = (_builder(ca_name, ca_name, ca_key.public_key(), now, days)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"squall topology {topology}")])
    cert = (_builder(subject, ca_name, key.public_key(), now, days)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return Credentials(ca=_pem(ca), cert=_pem(cert), key=_key_pem(key))


def self_signed(hostnames: Collection[str], *, days: int = VALID_DAYS,
                password: str | None = None) -> tuple[bytes, bytes]:
    """A self-signed server certificate for ``hostnames`` (DNS names or IP addresses; unspecified
    addresses such as 0.0.0.0 are left out): (cert, key) PEM, the key encrypted with ``password`` if given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hostnames):
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            names.append(x509.DNSName(host))
        else:
            if not address.is_unspecified:  # where a server listens, never whom a client asks
                names.append(x509.IPAddress(address))
    common = next((str(n.value) for n in names if isinstance(n, x509.DNSName)), str(names[0].value))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(subject, subject, key.public_key(), datetime.datetime.now(datetime.UTC), days)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    return _pem(cert), _key_pem(key, password)


def _builder(subject, issuer, public_key, now: datetime.datetime, days: int):
    from cryptography import x509

    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate clocks a little behind
            .not_valid_after(now + datetime.timedelta(days=days)))


def _pem(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, password: str | None = None) -> bytes:
    from cryptography.hazmat.primitives import serialization

    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
