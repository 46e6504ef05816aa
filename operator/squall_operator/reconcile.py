"""The Operator: brings a Topology's children in line with its spec (validate, render, apply), steps its
rebalances, repairs drift, and writes its status and Events; kopf's handlers (:mod:`squall_operator.handlers`)
and the resync (:mod:`squall_operator.resync`) call it.

Its methods are blocking, as the ``kubernetes`` client is; kopf runs them in threads. Both the reconcile
and the status refresh write a Topology's status; a lock per Topology makes each read-compute-write
atomic, so the last write always reflects the latest StatefulSets.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
import yaml
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from squall.contract import ACKER, GENERATION_FILE, SPEC_FILE, WORKER, process_count
from squall.errors import TopologyError
from squall.process import log_levels
from squall.topology.assignment import check_state_kept
from squall.topology.spec import TopologySpec
from squall.transport.tls import Credentials
from squall_operator import claims, processes, rebalance, resource, status
from squall_operator.apply import ApplyError, Kube, Manifest, Ref, apply
from squall_operator.certificates import Certificates, TopologyCredentials
from squall_operator.cluster import Features, install_cel
from squall_operator.metrics import OperatorMetrics
from squall_operator.render import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ROLES,
    Names,
    child_refs,
    credentials,
    instance,
    render,
    resolve_image,
    state_claim,
    state_claimed,
    template_hash,
)
from squall_operator.settings import Settings

log = logging.getLogger(__name__)
RETRY_DELAY = 10.0  # seconds before a reconcile the API server refused is tried again (by kopf, or the resync)
RECHECK = 0.5  # seconds before a rebalance under way is looked at again
COMPONENT = "app.kubernetes.io/component"


class Operator:
    """Reconciles Topologies: validates, renders, applies and reports status and Events."""

    def __init__(self, *, settings: Settings, kube: Kube, features: Features | None = None,
                 metrics: OperatorMetrics | None = None) -> None:
        self.settings = settings
        self.kube = kube
        self.metrics = metrics or OperatorMetrics()
        self.features = features or Features(version=(1, 20))  # until discover() has run
        self._locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()
        self.known: set[tuple[str, str]] = set()  # (namespace, name) of the Topologies seen, for the resync
        self._due: dict[tuple[str, str], float] = {}  # Topologies to reconcile again soon: monotonic deadline
        self._due_lock = threading.Lock()
        # (namespace, name) → (the target's fingerprint, when this operator first saw that rebalance under way)
        self._watched: dict[tuple[str, str], tuple[str, datetime]] = {}
        # (namespace, name) → the spec last applied and its generation: what the pods run, which drift repair
        # applies while the latest spec is invalid or refused (after a restart: read from the ConfigMap)
        self._applied: dict[tuple[str, str], tuple[TopologySpec, int]] = {}
        self.certificates = Certificates()
        # (namespace, name) → the log levels told to its processes (processes.relay_log_levels)
        self._relayed: defaultdict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)

    def later(self, namespace: str, name: str, delay: float) -> None:
        """Reconcile the Topology again in ``delay`` seconds (a rebalance step under way, a write refused): the
        resync does, when :meth:`due`; thread-safe."""
        with self._due_lock:
            at = time.monotonic() + delay
            self._due[(namespace, name)] = min(at, self._due.get((namespace, name), at))

    def due(self, now: float) -> list[tuple[str, str]]:
        """The Topologies to reconcile again by ``now`` (a monotonic time), taken off the list; thread-safe."""
        with self._due_lock:
            due = sorted(key for key, at in self._due.items() if at <= now)
            for key in due:
                del self._due[key]
        return due

    def discover(self, logger: logging.Logger | logging.LoggerAdapter) -> None:
        """Find what the cluster supports, write accordingly, and add the CEL rules to the CRD where
        they are supported (watching every namespace only: a namespaced operator has no cluster rights)."""
        try:
            self.features = Features.discover(self.kube)
        except (ApiException, HTTPError) as exc:
            logger.warning("discovery failed (%s): assuming the oldest supported cluster, %s",
                           f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else exc,
                           self.features.describe())
            return
        self.kube.strict_apply = self.features.strict_apply
        logger.info("%s", self.features.describe())
        if self.settings.clusterwide:
            install_cel(self.kube, self.features, logger)

    def _watching(self, namespace: str, name: str, ongoing: Mapping[str, Any] | None, now: datetime) -> datetime | None:
        """When this operator first saw the rebalance ``ongoing`` of a Topology (None: none under way)."""
        key = (namespace, name)
        if not ongoing:
            self._watched.pop(key, None)
            return None
        seen = self._watched.get(key)
        if seen is None or seen[0] != ongoing.get("target"):
            seen = self._watched[key] = (str(ongoing.get("target")), now)
        return seen[1]

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks[(namespace, name)]

    def _podmonitor(self) -> bool:
        if self.settings.podmonitor == "auto":
            return self.kube.serves("monitoring.coreos.com", "v1", "podmonitors")
        return self.settings.podmonitor == "true"

    def _secret(self, topology: Manifest) -> tuple[Credentials | None, TopologyCredentials | None]:
        """What the topology's Secret holds, and with TLS on, its credentials (see :meth:`_credentials`)."""
        meta = topology["metadata"]
        secret = credentials(self.kube.get(Ref("v1", "Secret", meta["namespace"], Names(meta["name"]).tls)))
        return secret, self._credentials(topology, secret) if self.settings.tls else None

    def _credentials(self, topology: Manifest, secret: Credentials | None) -> TopologyCredentials:
        """The topology's TLS credentials, its Secret holding ``secret``: those its pods hold, and those to
        render (new ones if the Secret is missing or due for renewal: the new CA then replaces the pods)."""
        meta = topology["metadata"]
        tls = self.certificates.of(_key(topology), secret, datetime.now(UTC))
        if tls.issued is not None:
            log.info("%s/%s: %s", meta["namespace"], meta["name"], tls.issued)
            self._event(topology, "Normal", "CertificateRenewed", tls.issued)
        return tls

    def _pods(self, namespace: str, topology: str, counts: Mapping[str, int]) -> list[tuple[str, int, Manifest]]:
        """(role, ordinal, pod) of the topology's worker and acker pods that exist, up to ``counts`` of each
        role (StatefulSet pods are named ``<set>-<ordinal>``)."""
        names = Names(topology)
        wanted = [(role, i, f"{getattr(names, role)}-{i}") for role in ROLES for i in range(counts.get(role, 0))]
        live = {pod["metadata"]["name"]: pod
                for pod in self.kube.pods(namespace, {**instance(topology), MANAGED_BY_LABEL: MANAGED_BY})}
        return [(role, i, live[name]) for role, i, name in wanted if name in live]

    def _status(self, spec: TopologySpec, namespace: str, *, workers: Manifest | None, ackers: Manifest | None,
                previous: dict[str, Any], generation: int | None, read_errors: bool,
                rebalancing: dict[str, Any] | None = status.KEEP) -> dict[str, Any]:
        counts = {role: process_count(spec, role) for role in ROLES}
        pods = [pod for _, _, pod in self._pods(namespace, spec.name, counts)]
        return status.compute(spec, workers=workers, ackers=ackers, previous=previous, generation=generation,
                              at=(at := status.now()), problems=status.pod_problems(pods, at=at),
                              reported=processes.reported_errors(pods) if read_errors else None,
                              rebalance=rebalancing)

    def reconcile(self, namespace: str, name: str, logger: logging.Logger | logging.LoggerAdapter, *,
                  read_errors: bool = False) -> None:
        """Bring the Topology's children in line with its spec (the latest one: it is read again);
        ``read_errors`` also asks each pod for its components' recent errors."""
        with self.metrics.reconciling():
            self._reconcile(namespace, name, logger, read_errors=read_errors)

    def _reconcile(self, namespace: str, name: str, logger: logging.Logger | logging.LoggerAdapter, *,
                   read_errors: bool) -> None:
        with self._lock(namespace, name):
            topology = self.kube.get(Ref(resource.API_VERSION, resource.KIND, namespace, name))
            if topology is None:
                self.known.discard((namespace, name))
                self._applied.pop((namespace, name), None)
                self.metrics.forget(namespace, name)
                self.certificates.forget(namespace, name)
                return  # deleted meanwhile
            if topology["metadata"].get("deletionTimestamp"):
                # Being deleted (foreground, or held by a finalizer): the garbage collector removes its
                # children, and a reconcile must not make them again under it.
                logger.info("being deleted: nothing applied")
                return
            self.known.add((namespace, name))
            previous = topology.get("status") or {}
            generation = topology["metadata"].get("generation")
            try:
                spec = resource.check_spec(name, topology.get("spec"), namespace=namespace)
                image = resolve_image(spec, self.settings.image)
                self._check_state_kept(namespace, name, spec)
            except TopologyError as exc:
                logger.warning("invalid spec, nothing of it applied: %s", exc)
                self._write(topology, previous, status.failed(previous, str(exc), generation=generation,
                                                              at=status.now()))
                self._repair(topology, lambda: self._secret(topology)[1], logger)
                return
            secret, certificates = self._secret(topology)
            # the pods' own: what commands to them present (TLS turned off: pods made before hold the Secret's
            # until they are replaced, and the Secret goes only then)
            tls = certificates.held if certificates else secret
            manifests = self._render(topology, spec, image=image, certificates=certificates, generation=generation)
            names = Names(name)
            live = {role: self.kube.get(Ref("apps/v1", "StatefulSet", namespace, getattr(names, role)))
                    for role in ROLES}
            replicas = {role: ((sts or {}).get("spec") or {}).get("replicas") or 0 for role, sts in live.items()}
            pods = self._pods(namespace, name, {role: max(process_count(spec, role), replicas[role]) for role in ROLES})
            found = processes.states(pods, tls)
            now = datetime.now(UTC)
            decision = rebalance.decide(
                spec=spec, pods=found, previous=previous.get("rebalance"), now=now,
                watched_since=self._watching(namespace, name, previous.get("rebalance"), now),
                templates={m["metadata"]["labels"][COMPONENT]: template_hash(m) for m in manifests
                           if m["kind"] == "StatefulSet"})
            processes.carry_out(decision, pods, spec=spec, tls=tls, logger=logger, commands=("deactivate",))
            if decision.apply and decision.switch and decision.rebalance is not None:
                stopped = processes.check(decision, pods, spec=spec, tls=tls, logger=logger)
                if stopped is not None:  # nothing of the new spec is applied; the spouts go again at the next step
                    decision = dataclasses.replace(decision, rebalance=stopped, apply=False, switch=(), delete=())
            if decision.apply:
                try:
                    claimed = claims.ensure(self.kube, state_claim(spec, namespace=namespace), spec=spec,
                                            topology=topology) if state_claimed(spec) else claims.Claimed()
                    prune = [Ref(v, k, namespace, n) for v, k, n in child_refs(name, pdb_api=self.features.pdb_api)]
                    applied = apply(self.kube, manifests, prune=prune, owned=lambda live: _owned(live, topology))
                except ApplyError as exc:  # the Warning Event ApplyFailed comes with the Degraded condition
                    self._write(topology, previous, status.apply_failed(previous, str(exc), generation=generation,
                                                                        at=status.now()))
                    raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
                self.metrics.applied(applied)
                self._ran(namespace, name, spec, generation or 0)
                if certificates is not None:
                    self.certificates.written(_key(topology), certificates.rendered)
                applied.created[:0] = [claimed.created] if claimed.created else []
                applied.patched[:0] = [claimed.patched] if claimed.patched else []
                logger.info("reconciled: %s", applied.summary())
                if applied.changed:
                    self._event(topology, "Normal", "Applied", applied.summary())
                    if claimed.differs:  # said when the spec changes, not at every resync
                        self._event(topology, "Warning", "StateClaimDiffers", claimed.differs)
                live = {role: applied.live.get(("StatefulSet", getattr(names, role))) for role in ROLES}
                # Only now that their StatefulSets carry the new template: deleted before, a pod was made
                # again from the old one, and was deleted for nothing when the check or the write was refused.
                for pod in decision.delete:
                    self.kube.delete(Ref("v1", "Pod", namespace, pod))
                stopped = processes.carry_out(decision, pods, spec=spec, tls=tls, logger=logger,
                                              commands=("switch", "activate"))
                if stopped is not None:  # the status's Degraded condition and its Warning Event say why
                    decision = dataclasses.replace(decision, rebalance=stopped)  # again: the spouts go again soon
            else:  # a refused rebalance applies nothing, and lets the held spouts go
                processes.carry_out(decision, pods, spec=spec, tls=tls, logger=logger, commands=("activate",))
                if decision.rebalance is not None and decision.rebalance.get("refused"):
                    self._repair(topology, lambda: certificates, logger)
            processes.suspend(found, pods, spec=spec, generation=generation or 0, tls=tls, logger=logger)
            overrides = log_levels.active(log_levels.parse(
                (topology["metadata"].get("annotations") or {}).get(log_levels.ANNOTATION)), now)
            processes.relay_log_levels(found, pods, overrides=overrides, tls=tls, logger=logger,
                                       relayed=self._relayed[(namespace, name)])
            for kind, reason, message in decision.events:
                logger.info("rebalance: %s: %s", reason, message)
                self._event(topology, kind, reason, message)
            if decision.again:
                self.later(namespace, name, RECHECK)
            if (held := self.certificates.held(_key(topology))) is not None:
                self.metrics.certificate(namespace, name, held.validity()[1])
            current = self._status(spec, namespace, workers=live[WORKER], ackers=live[ACKER] if spec.num_ackers
                                   else None, previous=previous, generation=generation, read_errors=read_errors,
                                   rebalancing=decision.rebalance)
            self._write(topology, previous, current)

    def _check_state_kept(self, namespace: str, name: str, spec: TopologySpec) -> None:
        """:class:`TopologyError` if ``spec`` changes the tasks of a bolt stateful in the spec the pods run
        (``check_state_kept``): the admission webhook refuses it, but not where it is not installed."""
        if not spec.checkpointing:
            return
        running = self._applied.get((namespace, name)) or self._applied_before(namespace, name)
        if running is not None:
            check_state_kept(running[0], spec)

    def _render(self, topology: Manifest, spec: TopologySpec, *, image: str,
                certificates: TopologyCredentials | None, generation: int | None) -> list[Manifest]:
        """The children of ``topology`` for ``spec``, owned by it: all but the state claim (claims.ensure)."""
        own = (self.settings.own_namespace,) if self.settings.own_namespace else ()
        manifests = render(spec, namespace=topology["metadata"]["namespace"], image=image,
                           podmonitor=self._podmonitor(), monitor_labels=dict(self.settings.podmonitor_labels),
                           pdb_api=self.features.pdb_api, tls=certificates.rendered if certificates else None,
                           metrics_from=self.settings.metrics_from, control_from=own, generation=generation or 0,
                           evict_unhealthy=self.features.unhealthy_eviction)
        manifests = [m for m in manifests if m["kind"] != "PersistentVolumeClaim"]
        kopf.adopt(manifests, owner=topology)
        return manifests

    def _repair(self, topology: Manifest, read_certificates: Callable[[], TopologyCredentials | None],
                logger: logging.Logger | logging.LoggerAdapter) -> None:
        """Drift repair, and certificate renewal, while the latest spec is not applied (invalid, or its
        switch refused): the children of the spec the pods run are put back as it rendered them, nothing
        pruned. Without it, a deleted headless Service broke the peers' names, a deleted ConfigMap left
        restarted pods unable to start, and the certificates expired."""
        namespace, name = topology["metadata"]["namespace"], topology["metadata"]["name"]
        applied = self._applied.get((namespace, name)) or self._applied_before(namespace, name)
        if applied is None:
            logger.warning("the spec the pods run is not known (its ConfigMap is gone too): nothing repaired")
            return
        spec, generation = applied
        certificates = read_certificates()  # only now: none are issued for a Topology nothing was ever applied of
        try:
            manifests = self._render(topology, spec, image=resolve_image(spec, self.settings.image),
                                     certificates=certificates, generation=generation)
            done = apply(self.kube, manifests, prune=[], owned=lambda live: _owned(live, topology))
        except (TopologyError, ApplyError) as exc:
            logger.warning("repairing the children of the spec the pods run failed: %s", exc)
            return
        self._ran(namespace, name, *applied)
        if certificates is not None:
            self.certificates.written(_key(topology), certificates.rendered)
        if done.changed:
            logger.info("repaired the children of the spec the pods run: %s", done.summary())

    def _ran(self, namespace: str, name: str, spec: TopologySpec, generation: int) -> None:
        """``spec`` (of ``generation``) is what the Topology's pods run now."""
        self._applied[(namespace, name)] = (spec, generation)
        self.metrics.processes(namespace, name, workers=spec.workers, ackers=spec.num_ackers)

    def _applied_before(self, namespace: str, name: str) -> tuple[TopologySpec, int] | None:
        """The spec and generation in the Topology's ConfigMap (what the pods run), if it is there and valid."""
        data = (self.kube.get(Ref("v1", "ConfigMap", namespace, Names(name).config_map)) or {}).get("data") or {}
        try:
            spec = TopologySpec.from_dict(yaml.safe_load(data.get(SPEC_FILE) or ""), strict=False)
            return spec, int(data.get(GENERATION_FILE) or 0)
        except (TopologyError, ValueError, yaml.YAMLError):
            return None

    def refresh(self, namespace: str, name: str) -> None:
        """Recompute the status of a Topology whose latest spec is applied from its StatefulSets and
        pods as they are now (no child is written); a StatefulSet found missing is put back instead,
        so the status never describes a rollout of something that is gone."""
        if not self._refresh(namespace, name):
            self.reconcile(namespace, name, log)

    def _refresh(self, namespace: str, name: str) -> bool:
        """:meth:`refresh` under the Topology's lock; False if a StatefulSet it wants is missing."""
        with self._lock(namespace, name):
            topology = self.kube.get(Ref(resource.API_VERSION, resource.KIND, namespace, name))
            if topology is None:
                return True  # the Topology is gone; Kubernetes collects its StatefulSets
            previous = topology.get("status") or {}
            generation = topology["metadata"].get("generation")
            if previous.get("phase") == status.FAILED or previous.get("observedGeneration") != generation or \
                    status.apply_failing(previous):
                return True  # the spec is invalid, or not (all) applied yet: the reconcile writes the status
            spec = resource.check_spec(name, topology.get("spec"), namespace=namespace)
            names = Names(name)
            workers = self.kube.get(Ref("apps/v1", "StatefulSet", namespace, names.worker))
            ackers = self.kube.get(Ref("apps/v1", "StatefulSet", namespace, names.acker)) if spec.num_ackers else None
            if workers is None or (spec.num_ackers and ackers is None):
                return False
            self._write(topology, previous, self._status(spec, namespace, workers=workers, ackers=ackers,
                                                         previous=previous, generation=generation, read_errors=False))
            return True

    def _event(self, topology: Manifest, kind: str, reason: str, message: str) -> None:
        try:
            self.kube.event(topology, type=kind, reason=reason, message=message)
        except ApiException as exc:  # an Event lost is no reason to stop a reconcile
            log.warning("posting the %s Event %s failed: %s %s", kind, reason, exc.status, exc.reason)
        except HTTPError as exc:  # unanswered within REQUEST_TIMEOUT
            log.warning("posting the %s Event %s failed: %s", kind, reason, exc)

    def _write(self, topology: Manifest, previous: dict[str, Any], current: dict[str, Any]) -> None:
        """Write the status if it changed, and post an Event if the phase did."""
        meta = topology["metadata"]
        self.metrics.topology_status(meta["namespace"], meta["name"], current)
        if current == previous:
            return
        try:
            self.kube.patch(Ref(resource.API_VERSION, resource.KIND, meta["namespace"], meta["name"]),
                            {"status": status.merge_patch(previous, current)}, status=True)
        except ApiException as exc:
            if exc.status == 404:
                return  # deleted since it was read
            raise
        event = status.transition(previous, current)
        if event is not None:
            kind, reason, message = event
            self._event(topology, kind, reason, message)


def _key(topology: Manifest) -> tuple[str, str, str]:
    meta = topology["metadata"]
    return meta["namespace"], meta["name"], meta.get("uid", "")


def _owned(live: Manifest, topology: Mapping[str, Any]) -> bool:
    """Whether ``live`` is this Topology's child (so it may be deleted when no longer rendered)."""
    meta = live.get("metadata") or {}
    uid = topology["metadata"].get("uid")
    if any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or ()):
        return True
    labels = meta.get("labels") or {}
    return (labels.get(MANAGED_BY_LABEL) == MANAGED_BY
            and labels.get("app.kubernetes.io/instance") == topology["metadata"]["name"])
