"""Each Topology's TLS credentials: those its pods hold, and new ones when they are missing or due.

A Topology's pods mount its Secret: a CA of its own and the one certificate all its processes present
(:mod:`squall.transport.tls`), read when a process starts. The operator commands the pods with the
credentials they hold, and renders new ones when the Secret is missing (the first reconcile, or someone
deleted it to rotate them) or when less than a third of their validity is left, as cert-manager renews
by default. New credentials mean a new CA (its key is not kept), so they replace the pods through a
rebalance, drained first. Until the Secret holds them, the same new ones are rendered at every
reconcile, so the pods' template does not change under a drain; once they are written, they are the
ones held.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from squall.transport.tls import Credentials, issue

RENEW_FRACTION = 1 / 3  # of the validity left when new credentials are issued

Key = tuple[str, str]  # (namespace, name) of a Topology


@dataclass(frozen=True)
class TopologyCredentials:
    """What the operator holds for one Topology at one reconcile."""

    held: Credentials | None  # what its pods hold (the operator's commands present these); None: unknown
    rendered: Credentials  # what its Secret and pod template are to hold
    issued: str | None = None  # why new credentials were issued just now (an Event's message); None: none were


def renewal_due(tls: Credentials, now: datetime) -> bool:
    """Whether less than :data:`RENEW_FRACTION` of ``tls``'s validity is left at ``now``."""
    since, until = tls.validity()
    return now >= until - (until - since) * RENEW_FRACTION


def _readable(tls: Credentials) -> bool:
    try:
        tls.validity()
    except ValueError:  # not PEM certificates
        return False
    return True


class Certificates:
    """The credentials of every Topology: those last read from its Secret, and those issued to replace them."""

    def __init__(self) -> None:
        self._held: dict[Key, Credentials] = {}
        self._issued: dict[Key, Credentials] = {}

    def of(self, key: Key, secret: Credentials | None, now: datetime) -> TopologyCredentials:
        """The credentials of Topology ``key`` whose Secret holds ``secret`` (None: no Secret, or not one
        of ours) at ``now``."""
        if secret is not None and not _readable(secret):
            secret = None  # as good as none: new ones replace it
        if secret is not None:
            self._held[key] = secret
            if not renewal_due(secret, now):
                self._issued.pop(key, None)  # written, or someone put valid ones there meanwhile
                return TopologyCredentials(held=secret, rendered=secret)
        held = self._held.get(key)
        issued = self._issued.get(key)
        if issued is not None:
            return TopologyCredentials(held=held, rendered=issued)
        issued = self._issued[key] = issue(key[1])
        if secret is not None:
            why = (f"the topology's certificate expires at {secret.validity()[1]:%Y-%m-%d %H:%M} UTC: a new CA "
                   "and certificate were issued; a rebalance replaces the pods with them (drained first)")
        elif held is not None:
            why = ("the topology's TLS Secret is gone: a new CA and certificate were issued; a rebalance "
                   "replaces the pods with them (drained first)")
        else:
            why = None  # a new Topology's first credentials
        return TopologyCredentials(held=held, rendered=issued, issued=why)

    def held(self, key: Key) -> Credentials | None:
        """The credentials Topology ``key``'s pods hold (None: unknown)."""
        return self._held.get(key)

    def written(self, key: Key, tls: Credentials) -> None:
        """Topology ``key``'s Secret and pod template now hold ``tls``: its pods are, or are being, replaced
        by pods that hold them."""
        self._held[key] = tls
        self._issued.pop(key, None)

    def forget(self, key: Key) -> None:
        """Topology ``key`` is gone."""
        self._held.pop(key, None)
        self._issued.pop(key, None)
