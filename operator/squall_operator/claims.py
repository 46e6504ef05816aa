"""The state claim of a topology with stateful bolts: made once, then left as it is.

Unlike the other children (:mod:`squall_operator.apply`), the claim outlives its Topology unless the
spec says ``state.deleteClaimWithTopology: true``: without an owner reference, ``kubectl delete
topology X`` leaves it, and X applied again under the same name mounts it and resumes its state. A
claim's access modes and class cannot change once it is made, and its size only grows where its class
allows; so an existing claim is used as it is (one made by hand, bound to a volume of one's choosing,
too), never patched but for that owner reference, and what differs from the spec is reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from squall.topology.spec import TopologySpec
from squall_operator.apply import ApplyError, Kube, Ref

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Claimed:
    """What :func:`ensure` did (the claim it ``created`` or ``patched``, as ``apply.Applied`` names objects),
    and how the live claim differs from the spec (empty when it does not)."""

    created: str | None = None
    patched: str | None = None
    differs: str = ""


def ensure(kube: Kube, claim: Manifest, *, spec: TopologySpec, topology: Manifest) -> Claimed:
    """Create ``claim`` (the rendered :func:`squall_operator.render.state_claim`) if it is missing, owned by
    ``topology`` only with ``state.deleteClaimWithTopology``; otherwise add or remove that owner reference
    as the spec now says, and nothing else. Raises :class:`ApplyError` when the API server refuses."""
    ref = Ref.of(claim)
    delete_with = spec.state.delete_claim_with_topology
    uid = topology["metadata"].get("uid")
    doing = "reading"
    try:
        live = kube.get(ref)
        if live is None:
            doing = "creating"
            if delete_with:
                kopf.append_owner_reference(claim, owner=topology)
            kube.create(claim)
            return Claimed(created=str(ref))
        owners = list(live["metadata"].get("ownerReferences") or ())
        if delete_with != any(owner.get("uid") == uid for owner in owners):
            doing = "patching"
            if delete_with:
                owners.append(dict(kopf.build_owner_reference(topology)))
            else:
                owners = [owner for owner in owners if owner.get("uid") != uid]
            kube.patch(ref, {"metadata": {"ownerReferences": owners or None}})
            return Claimed(patched=f"{ref} ({'now' if delete_with else 'no longer'} deleted with the Topology)",
                           differs=differences(live, claim))
    except ApiException as exc:
        raise ApplyError.refused(doing, ref, exc) from exc
    return Claimed(differs=differences(live, claim))


def differences(live: Manifest, claim: Manifest) -> str:
    """How the live claim differs from the rendered one, and what to do about it (empty: it does not)."""
    have, want = live.get("spec") or {}, claim["spec"]
    name = claim["metadata"]["name"]
    found = []
    if have.get("accessModes") != want["accessModes"]:
        found.append(f"access modes {have.get('accessModes')} (the spec: {want['accessModes']})")
    if "storageClassName" in want and have.get("storageClassName") != want["storageClassName"]:
        found.append(f"class {have.get('storageClassName')!r} (the spec: {want['storageClassName']!r})")
    size, asked = ((have.get("resources") or {}).get("requests") or {}).get("storage"), \
        want["resources"]["requests"]["storage"]
    if _bytes(size) < _bytes(asked):
        found.append(f"size {size} (the spec: {asked}; grow it with kubectl patch pvc {name} --patch "
                     f"'{{\"spec\":{{\"resources\":{{\"requests\":{{\"storage\":\"{asked}\"}}}}}}}}' where its class "
                     "allows expansion)")
    if not found:
        return ""
    return (f"PersistentVolumeClaim {name} is used as it is: it has {'; '.join(found)}. A claim's access modes and "
            f"class cannot change once made; to make it again from the spec, delete the Topology and then the claim "
            f"(kubectl delete pvc {name}: its state goes with it), and apply the Topology again")


def _bytes(quantity: Any) -> Decimal:
    try:
        return parse_quantity(quantity)
    except (ValueError, TypeError):
        return Decimal(0)  # none or unreadable: less than any size asked
