"""Each Topology's TLS credentials: those its pods hold, and new ones when they are missing or due.

A Topology's pods mount its Secret: a CA of its own and the one certificate all its processes present
(:mod:`squall.transport.tls`), read when a process starts. The operator commands the pods with the
credentials they hold, and renders new ones when the Secret is missing (the first reconcile, or
someone deleted it to rotate them) or when a third to a quarter of their validity is left (a third is
cert-manager's default; each Topology draws its point, so that those made together renew apart). New
credentials mean a new CA (its key is not kept), so they replace the pods through a rebalance. Until
the Secret holds them, the same new ones are rendered at every reconcile, so the pods' template does
not change under a drain; once they are written, they are the ones held.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from squall.transport.tls import Credentials, issue

# Of the validity left when new credentials are issued: a third, as cert-manager renews by default, down
# to a quarter, a point each Topology draws from its uid, so that Topologies made together (or found due
# by an operator just upgraded) are not all replaced at once
RENEW_LEFT = (1 / 3, 1 / 4)
REPLACED = "a rebalance replaces the pods with them, as the Topology's upgradeStrategy says (Drain: drained first)"

Key = tuple[str, str, str]  # (namespace, name, uid) of a Topology: one deleted and made again is another


@dataclass(frozen=True)
class TopologyCredentials:
    """What the operator holds for one Topology at one reconcile."""

    held: Credentials | None  # what its pods hold (the operator's commands present these); None: unknown
    rendered: Credentials  # what its Secret and pod template are to hold
    issued: str | None = None  # why new credentials were issued just now (an Event's message); None: none were


def renewal_due(tls: Credentials, now: datetime, draw: float = 0.0) -> bool:
    """Whether, at ``now``, less of ``tls``'s validity is left than the share between :data:`RENEW_LEFT`'s
    bounds that ``draw`` (0 … 1) picks."""
    since, until = tls.validity()
    most, least = RENEW_LEFT
    return now >= until - (until - since) * (most - draw * (most - least))


def draw(uid: str) -> float:
    """A Topology's own point in [0, 1), the same at every reconcile and in every operator."""
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big") / 2**32


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
        unreadable = secret is not None and not _readable(secret)
        if unreadable:
            secret = None  # as good as none: new ones replace it
        if secret is not None:
            self._held[key] = secret
            if not renewal_due(secret, now, draw(key[2])):
                self._issued.pop(key, None)  # written, or someone put valid ones there meanwhile
                return TopologyCredentials(held=secret, rendered=secret)
        held = self._held.get(key)
        issued = self._issued.get(key)
        if issued is not None:
            return TopologyCredentials(held=held, rendered=issued)
        issued = self._issued[key] = issue(key[1])
        if secret is not None:
            why = f"the topology's certificate expires at {secret.validity()[1]:%Y-%m-%d %H:%M} UTC"
        elif unreadable:
            why = "the topology's TLS Secret holds no certificate that can be read"
        elif held is not None:
            why = "the topology's TLS Secret is gone"
        else:
            return TopologyCredentials(held=held, rendered=issued)  # a new Topology's first credentials
        return TopologyCredentials(held=held, rendered=issued,
                                   issued=f"{why}: a new CA and certificate were issued; {REPLACED}")

    def held(self, key: Key) -> Credentials | None:
        """The credentials Topology ``key``'s pods hold (None: unknown)."""
        return self._held.get(key)

    def written(self, key: Key, tls: Credentials) -> None:
        """Topology ``key``'s Secret and pod template now hold ``tls``: its pods are, or are being, replaced
        by pods that hold them."""
        self._held[key] = tls
        self._issued.pop(key, None)

    def forget(self, namespace: str, name: str) -> None:
        """The Topology ``namespace/name`` is gone (whatever its uid)."""
        for kept in (self._held, self._issued):
            for key in [k for k in kept if k[:2] == (namespace, name)]:
                del kept[key]
