"""Applying rendered manifests idempotently with the ``kubernetes`` client: create what is missing,
patch what differs, delete what is no longer rendered, and write nothing when nothing changed.

"Differs" means: what the operator renders changed since it last wrote the object (each write carries
a digest of it, ``squall.dev/applied-hash``), or some field it renders has another value in the live
object. Fields the API server or other controllers add (defaults, status) are not the operator's and
are ignored; so are list items they add where writes are server-side applies, which keep them.

Writes are server-side applies of the whole rendered object with ``fieldValidation=Strict`` (field
manager ``squall-operator``) where the API server supports them (:mod:`squall_operator.cluster`): an
unknown field is an error, never dropped. Elsewhere they are a create, or a JSON merge patch of the
whole rendered object: lists (containers, env, ports) are replaced as a whole, so an entry that is
no longer rendered disappears.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from squall_operator import resource
from squall_operator.pods import MERGE_KEYS
from squall_operator.render import digest

MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "squall-operator"
APPLIED_HASH = "squall.dev/applied-hash"  # the digest of the rendered object the operator last wrote
EVENT_MESSAGE_CHARS = 1024  # the API server refuses longer Event messages
Manifest = dict[str, Any]

# kind -> (API class, the snake_case name in its read_namespaced_<x> methods); other kinds are custom objects
_TYPED: dict[tuple[str, str], tuple[type, str]] = {
    ("v1", "ConfigMap"): (client.CoreV1Api, "config_map"),
    ("v1", "Secret"): (client.CoreV1Api, "secret"),
    ("networking.k8s.io/v1", "NetworkPolicy"): (client.NetworkingV1Api, "network_policy"),
    ("v1", "Service"): (client.CoreV1Api, "service"),
    ("v1", "ServiceAccount"): (client.CoreV1Api, "service_account"),
    ("v1", "Pod"): (client.CoreV1Api, "pod"),
    ("v1", "PersistentVolumeClaim"): (client.CoreV1Api, "persistent_volume_claim"),
    ("apps/v1", "StatefulSet"): (client.AppsV1Api, "stateful_set"),
    ("rbac.authorization.k8s.io/v1", "Role"): (client.RbacAuthorizationV1Api, "role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (client.RbacAuthorizationV1Api, "role_binding"),
}
# keys whose values are quantities, which the API server writes back in canonical form
_QUANTITY_KEYS = {"cpu", "memory", "ephemeral-storage", "storage", "sizeLimit"}
_PLURALS = {"PodMonitor": "podmonitors", "PodDisruptionBudget": "poddisruptionbudgets", resource.KIND: resource.PLURAL}


@dataclass(frozen=True)
class Ref:
    """One namespaced object."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, manifest: Manifest) -> Ref:
        meta = manifest["metadata"]
        return cls(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


# (connect, read) seconds of every request: without a bound, one whose connection went half-open (an API
# server or load balancer failing over) never returned, and the reconcile waiting for it held its Topology's
# lock for good. A request that times out raises, and the reconcile is tried again.
REQUEST_TIMEOUT = (5.0, 30.0)


class Kube:
    """Blocking get/create/patch/delete of namespaced objects as plain dicts (kopf runs the handlers
    that call it in threads); every request bounded by :data:`REQUEST_TIMEOUT`."""

    def __init__(self, api: client.ApiClient, *, strict_apply: bool = False) -> None:
        self.api = api
        self.strict_apply = strict_apply  # write with server-side apply, fieldValidation=Strict

    @staticmethod
    def load(response: Any) -> Manifest:
        """The JSON body of a raw (``_preload_content=False``) response."""
        return json.loads(response.data or b"{}")

    def _method(self, ref: Ref, verb: str, *, status: bool) -> tuple[Callable[..., Any], tuple[str, ...]]:
        """The client method for ``verb`` on ``ref``'s kind, and the arguments that locate the object."""
        typed = _TYPED.get((ref.api_version, ref.kind))
        if typed is not None:
            api_class, snake = typed
            where = (ref.namespace,) if verb == "create" else (ref.name, ref.namespace)
            return getattr(api_class(self.api), f"{verb}_namespaced_{snake}"), where
        group, _, version = ref.api_version.rpartition("/")
        names = (group, version, ref.namespace, _PLURALS[ref.kind])
        method = f"{'get' if verb == 'read' else verb}_namespaced_custom_object{'_status' if status else ''}"
        return getattr(client.CustomObjectsApi(self.api), method), names if verb == "create" else (*names, ref.name)

    def _call(self, ref: Ref, verb: str, *args: Any, status: bool = False, **kwargs: Any) -> Manifest:
        method, where = self._method(ref, verb, status=status)
        return self.load(method(*where, *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
                                **kwargs))  # raw JSON: plain dicts

    def get(self, ref: Ref) -> Manifest | None:
        """The live object, or None if it does not exist (or its kind is not installed)."""
        try:
            return self._call(ref, "read")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pods(self, namespace: str, labels: Mapping[str, str]) -> list[Manifest]:
        """The pods of ``namespace`` that carry ``labels``, in one LIST (not a GET per pod: a status refresh
        runs at every pod event, and a GET per pod made that the square of the pods in API calls)."""
        selector = ",".join(f"{key}={value}" for key, value in labels.items())
        response = client.CoreV1Api(self.api).list_namespaced_pod(namespace, label_selector=selector,
                                                                   _preload_content=False,
                                                                   _request_timeout=REQUEST_TIMEOUT)
        return list(self.load(response).get("items") or ())

    def create(self, manifest: Manifest) -> Manifest:
        return self._call(Ref.of(manifest), "create", manifest)

    def patch(self, ref: Ref, body: Manifest, *, status: bool = False) -> Manifest:
        """A JSON merge patch (of the status subresource with ``status``: custom objects only)."""
        return self._call(ref, "patch", body, status=status, _content_type=MERGE_PATCH)

    def server_side_apply(self, manifest: Manifest) -> Manifest:
        """Create or update the object with a server-side apply of ``manifest``, refusing unknown fields."""
        return self._call(Ref.of(manifest), "patch", manifest, _content_type=APPLY_PATCH,
                          field_manager=FIELD_MANAGER, force=True, field_validation="Strict")

    def delete(self, ref: Ref) -> bool:
        """Delete the object; False if it was already gone."""
        try:
            self._call(ref, "delete")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def event(self, owner: Manifest, *, type: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about ``owner`` (what ``kubectl describe`` shows), from any thread: kopf's own
        posting works only inside its handlers, and a resync or a rebalance step runs outside them."""
        meta = owner["metadata"]
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta.get("uid")},
                "type": type, "reason": reason, "message": message[:EVENT_MESSAGE_CHARS],
                "source": {"component": FIELD_MANAGER}, "reportingComponent": FIELD_MANAGER,
                "firstTimestamp": at, "lastTimestamp": at, "count": 1}
        client.CoreV1Api(self.api).create_namespaced_event(meta["namespace"], body, _preload_content=False,
                                                           _request_timeout=REQUEST_TIMEOUT)

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` (e.g. whether a CRD is installed), by discovery."""
        try:
            response = client.CustomObjectsApi(self.api).get_api_resources(group, version, _preload_content=False,
                                                                           _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.get("name") == plural for r in json.loads(response.data or b"{}").get("resources", ()))


def covers(live: Any, desired: Any, *, key: str = "", extra_items: bool = False) -> bool:
    """Whether ``live`` has every field of ``desired`` with the same value (extra live fields are fine).

    Lists match item by item; with ``extra_items``, a list that merges item by item (a pod's
    containers, env, volumes, ports...: :data:`squall_operator.pods.MERGE_KEYS`) is covered when each
    desired item is covered by some live item, whatever else it holds: a server-side apply keeps the
    items another field manager added there, so the operator's writes cannot remove them and they must
    not count as a difference. Any other list is replaced whole by a forced apply, so everything in it
    must match. Resource quantities compare by value (``1000m`` is ``1``), as the API server rewrites them.
    """
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            k in live and covers(live[k], v, key=k, extra_items=extra_items) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list):
            return False
        if extra_items and key in MERGE_KEYS and all(isinstance(item, dict) for item in desired):
            return all(any(covers(have, want, key=key, extra_items=True) for have in live) for want in desired)
        return len(live) == len(desired) and all(  # atomic: all of it is the operator's
            covers(a, b, key=key) for a, b in zip(live, desired, strict=True))
    if live == desired:
        return True
    return key in _QUANTITY_KEYS and _quantity(live) is not None and _quantity(live) == _quantity(desired)


def _quantity(value: Any) -> Decimal | None:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        return None


def stamped(manifest: Manifest) -> Manifest:
    """``manifest`` annotated with its own digest: once the rendered object changes, the live one (which
    carries the digest of the last write) no longer covers it, even where only list items were dropped,
    which a comparison that allows extra items cannot see."""
    out = copy.copy(manifest)
    out["metadata"] = {**manifest["metadata"],
                       "annotations": {**manifest["metadata"].get("annotations", {}), APPLIED_HASH: digest(manifest)}}
    return out


@dataclass
class Applied:
    """What one apply did, and the live objects it ended with (by kind and name)."""

    live: dict[tuple[str, str], Manifest] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.patched or self.deleted)

    def summary(self) -> str:
        parts = [f"{verb} {', '.join(what)}" for verb, what in
                 (("created", self.created), ("patched", self.patched), ("deleted", self.deleted)) if what]
        return "; ".join(parts) or "nothing to change"


class ApplyError(Exception):
    """One object could not be written: the API server refused to read or write it, or it is someone
    else's. The message names it and says why."""

    @classmethod
    def refused(cls, doing: str, ref: Ref, exc: ApiException) -> ApplyError:
        try:
            reason = json.loads(exc.body or "{}").get("message") or exc.reason
        except (ValueError, AttributeError):
            reason = exc.reason
        return cls(f"{doing} {ref} failed: {exc.status} {reason}")


def apply(kube: Kube, desired: list[Manifest], *, owned: Callable[[Manifest], bool],
          prune: Iterable[Ref] = ()) -> Applied:
    """Make the cluster hold ``desired``, then delete the objects of ``prune`` that are not desired,
    exist and are ``owned``. Writes only what differs, and never someone else's object of the same
    name: a live object that is not ``owned`` is neither patched nor adopted (deleted with its new owner).

    Raises :class:`ApplyError` at the first object the API server refuses, or that is someone else's
    (the earlier ones stay done).
    """
    done = Applied()
    wanted = set()
    for manifest in map(stamped, desired):
        ref = Ref.of(manifest)
        wanted.add(ref)
        doing = "reading"
        try:
            live = kube.get(ref)
            if live is None:
                doing = "creating"
                live = kube.server_side_apply(manifest) if kube.strict_apply else kube.create(manifest)
                done.created.append(str(ref))
            elif not owned(live):
                raise ApplyError(f"{ref} exists and is not this Topology's (no owner reference to it): the "
                                 "operator leaves it alone; delete or rename it, or give the Topology another name")
            elif not covers(live, manifest, extra_items=kube.strict_apply):
                doing = "patching"
                live = kube.server_side_apply(manifest) if kube.strict_apply else kube.patch(ref, manifest)
                done.patched.append(str(ref))
        except ApiException as exc:
            raise ApplyError.refused(doing, ref, exc) from exc
        done.live[(ref.kind, ref.name)] = live
    for ref in prune:
        if ref in wanted:
            continue
        try:
            live = kube.get(ref)
            if live is not None and owned(live) and kube.delete(ref):
                done.deleted.append(str(ref))
        except ApiException as exc:
            raise ApplyError.refused("deleting", ref, exc) from exc
    return done
