"""What the cluster supports, found by discovery when the operator starts, and the fallbacks it takes.

- server-side apply with ``fieldValidation=Strict`` (1.25+); before: create and JSON merge patch (the
  model and the pod-template check refuse unknown fields before anything is written);
- CEL ``x-kubernetes-validations`` in the CRD (1.25+); before: the admission webhook and the
  operator check the same rules;
- ``policy/v1`` PodDisruptionBudgets (1.21+); before: ``policy/v1beta1``; neither: no budgets.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from squall_operator import crd, resource
from squall_operator.apply import REQUEST_TIMEOUT, Kube, covers

STRICT_APPLY_SINCE = (1, 25)
CEL_SINCE = (1, 25)
# PodDisruptionBudget's unhealthyPodEvictionPolicy: beta, and on by default, since 1.27 (older servers drop it)
UNHEALTHY_EVICTION_SINCE = (1, 27)
CRD_NAME = f"{resource.PLURAL}.{resource.GROUP}"


@dataclass(frozen=True)
class Features:
    """The Kubernetes version and what it offers the operator."""

    version: tuple[int, int]
    pdb_api: str | None = "policy/v1beta1"  # the PodDisruptionBudget apiVersion served; None: none

    @property
    def strict_apply(self) -> bool:
        return self.version >= STRICT_APPLY_SINCE

    @property
    def cel(self) -> bool:
        return self.version >= CEL_SINCE

    @property
    def unhealthy_eviction(self) -> bool:
        return self.version >= UNHEALTHY_EVICTION_SINCE

    @classmethod
    def discover(cls, kube: Kube) -> Features:
        info = kube.load(client.VersionApi(kube.api).get_code(_preload_content=False, _request_timeout=REQUEST_TIMEOUT))
        version = (_digits(info.get("major", "")), _digits(info.get("minor", "")))  # some distributions say "20+"
        pdb = next((f"policy/{v}" for v in ("v1", "v1beta1") if kube.serves("policy", v, "poddisruptionbudgets")),
                   None)
        return cls(version=version, pdb_api=pdb)

    def describe(self) -> str:
        return (f"Kubernetes {self.version[0]}.{self.version[1]}: "
                f"{'server-side apply with strict field validation' if self.strict_apply else 'merge patches'}, "
                f"{'CEL validation rules' if self.cel else 'no CEL validation rules'}, "
                f"PodDisruptionBudgets {self.pdb_api or 'not served'}")


def _digits(text: str) -> int:
    match = re.match(r"\d+", text or "")
    return int(match.group()) if match else 0


def install_cel(kube: Kube, features: Features, logger: logging.Logger | logging.LoggerAdapter) -> bool:
    """Add the CEL rules of :func:`squall_operator.crd.crd` to the installed Topology CRD when the
    cluster supports them and they are missing; True if it patched. Without the permission to patch
    the CRD, log why and go on: the admission webhook and the operator check the same rules."""
    if not features.cel:
        logger.info("Kubernetes %d.%d has no CEL validation rules (1.25+): the admission webhook and the "
                    "operator check Topologies", *features.version)
        return False
    api = client.ApiextensionsV1Api(kube.api)
    wanted = crd.crd(cel=True)["spec"]["versions"]
    try:
        live: dict[str, Any] = kube.load(api.read_custom_resource_definition(CRD_NAME, _preload_content=False,
                                                                             _request_timeout=REQUEST_TIMEOUT))
        if covers(live["spec"]["versions"], wanted):
            return False
        api.patch_custom_resource_definition(CRD_NAME, {"spec": {"versions": wanted}}, _preload_content=False,
                                             _content_type="application/merge-patch+json",
                                             _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        logger.warning("could not add the CEL validation rules to the CRD %s (%s %s): the admission webhook and "
                       "the operator still check Topologies; install crds/topology-cel.yaml to have them",
                       CRD_NAME, exc.status, exc.reason)
        return False
    logger.info("added the CEL validation rules to the CRD %s", CRD_NAME)
    return True
