"""The kopf handlers: reconcile a Topology on create, update and resume, every ``resync_seconds``
(drift repair), and when one of its StatefulSets, Services or ConfigMaps is deleted or changed by
someone; follow its StatefulSets and pods for the status.

There is no delete handler, hence no finalizer: a deleted Topology goes at once (even while the
operator is down), and Kubernetes' garbage collector deletes its children through their
ownerReferences.

Handlers are plain functions, so kopf runs them in threads, where the blocking ``kubernetes``
client is at home. Both kinds of handler write a Topology's status; a lock per Topology makes each
read-compute-write atomic, so the last write always reflects the latest StatefulSets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from squall.contract import (
    ACKER,
    ERRORS_PATH,
    GENERATION_FILE,
    GRPC_PORT_NAME,
    METRICS_PORT_NAME,
    SPEC_FILE,
    WORKER,
    process_count,
)
from squall.errors import CommandError, TopologyError
from squall.metrics.http import MetricsServer
from squall.process.control import COMMAND_WAIT, ControlClient, ProcessState
from squall.topology.spec import TopologySpec
from squall.transport.tls import Credentials
from squall_operator import admission, rebalance, resource, status
from squall_operator.apply import ApplyError, Kube, Manifest, Ref, apply
from squall_operator.certificates import Certificates, TopologyCredentials
from squall_operator.cluster import Features, install_cel
from squall_operator.metrics import OperatorMetrics
from squall_operator.render import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ROLES,
    TEMPLATE_HASH,
    TLS_CA,
    Names,
    child_refs,
    credentials,
    instance,
    render,
    resolve_image,
    template_hash,
)
from squall_operator.settings import Settings

log = logging.getLogger(__name__)
_T = TypeVar("_T")
RETRY_DELAY = 10.0  # seconds before kopf retries a reconcile the API server refused
ERRORS_TIMEOUT = 2.0  # seconds to wait for a pod's GET /errors, in all
ERRORS_MAX_BYTES = 256 << 10  # of a pod's GET /errors?last=5, far more than five errors take
# seconds to wait for a process's answer to a rebalance's command: longer than a busy process waits for its
# loop, so that it answers (and is not taken for one that cannot, whose trees a drain would not wait for)
ANSWER_TIMEOUT = COMMAND_WAIT + 2.0
ASKING = 8  # pods asked at once
RECHECK = 0.5  # seconds before a rebalance under way is looked at again
COMPONENT = "app.kubernetes.io/component"
# the (group or core version, plural) of the children the operator watches, all labelled as managed by it
CHILD_WATCHES = (("apps", "statefulsets"), ("v1", "configmaps"), ("v1", "secrets"), ("v1", "services"), ("v1", "pods"))


def _each_pod(ask: Callable[[Manifest], _T], pods: list[Manifest]) -> list[_T]:
    """``ask`` of every pod, ASKING pods at a time (a pod that does not answer costs its timeout)."""
    with ThreadPoolExecutor(max_workers=ASKING) as pool:
        return list(pool.map(ask, pods))


def kopf_settings(operator: Settings, api: client.ApiClient) -> kopf.OperatorSettings:
    """kopf's settings for this operator: one replica without peering, state kept in annotations; ``api``
    writes the admission webhook's configuration."""
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    # Watching named namespaces needs no cluster-wide permission to list namespaces (and CRDs):
    # kopf watches exactly those. Watching all namespaces, kopf also notices CRDs installed later.
    settings.scanning.disabled = not operator.clusterwide
    # handler progress and the last handled spec go to squall.dev/* annotations, so the status
    # holds only what the CRD's status schema describes
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=resource.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=resource.GROUP)
    # kopf's own "handler succeeded" messages stay in the log; Squall posts its own Events
    settings.posting.level = logging.WARNING
    # The API server filters the children's watches: without it, every Secret, ConfigMap and Pod of the
    # cluster streamed to the operator only to be dropped by the handlers' own label filters.
    for children in CHILD_WATCHES:
        settings.watching.label_selectors[children] = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    admission.configure(settings, operator, api)
    return settings


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
        self.known: set[tuple[str, str]] = set()  # (namespace, name) of the Topologies seen, for resync()
        self._due: dict[tuple[str, str], float] = {}  # Topologies to reconcile again soon: monotonic deadline
        self._due_lock = threading.Lock()
        # (namespace, name) → (target plan, when this operator first saw that rebalance under way)
        self._watched: dict[tuple[str, str], tuple[str, datetime]] = {}
        self._reconciling: set[tuple[str, str]] = set()  # Topologies a resync or a due step reconciles now
        # (namespace, name) → the spec last applied and its generation: what the pods run, which drift repair
        # applies while the latest spec is invalid or refused (after a restart: read from the ConfigMap)
        self._applied: dict[tuple[str, str], tuple[TopologySpec, int]] = {}
        self.certificates = Certificates()
        self.resync_task: asyncio.Task[None] | None = None

    def later(self, namespace: str, name: str, delay: float) -> None:
        """Reconcile the Topology again in ``delay`` seconds (a rebalance step under way); thread-safe."""
        with self._due_lock:
            at = time.monotonic() + delay
            self._due[(namespace, name)] = min(at, self._due.get((namespace, name), at))

    async def resync(self) -> None:
        """Reconcile every known Topology each ``settings.resync_seconds``, for ever: drift repair whatever
        happened meanwhile, and the components' own errors for the status; and, beside that pass, each
        Topology that asked for it with :meth:`later` when its time comes (a pass held up by one slow
        Topology does not hold up the steps of another's rebalance).

        Not a kopf timer: kopf puts a finalizer on every resource with a timer, and a Topology must
        go at once when deleted, even while the operator is down."""
        await asyncio.gather(self._resync_every(), self._resync_due())

    async def _resync_every(self) -> None:
        # A pass is not waited for by the next: a Topology whose pods are slow to answer holds up its own
        # pass, and the next one goes on without it (see _reconcile_all), not every Topology's.
        passes: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(self.settings.resync_seconds)
                task = asyncio.create_task(self._resync_pass(), name="resync pass")
                passes.add(task)
                task.add_done_callback(passes.discard)
        finally:
            for task in passes:
                task.cancel()

    async def _resync_pass(self) -> None:
        if await self._reconcile_all(sorted(self.known), read_errors=True):
            self.metrics.resynced()

    async def _resync_due(self) -> None:
        while True:
            await asyncio.sleep(RECHECK)
            now = time.monotonic()
            with self._due_lock:
                due = sorted(key for key, at in self._due.items() if at <= now)
                for key in due:
                    del self._due[key]
            await self._reconcile_all(due, read_errors=False)

    async def _reconcile_all(self, topologies: list[tuple[str, str]], *, read_errors: bool) -> bool:
        """Reconcile each of ``topologies``, :data:`ASKING` at a time (one whose pods are slow to answer, a
        busy process costs ANSWER_TIMEOUT, does not hold up the others' steps); whether each was reconciled
        without error (one an earlier pass still reconciles was not)."""
        room = asyncio.Semaphore(ASKING)

        async def one(namespace: str, name: str) -> bool:
            if (namespace, name) in self._reconciling:  # an earlier pass's, slow: this one goes on without it
                if not read_errors:
                    self.later(namespace, name, RECHECK)  # a step due: it comes once that one is done
                return False  # not reconciled by this pass (that one says how it went)
            self._reconciling.add((namespace, name))
            async with room:
                try:
                    await asyncio.to_thread(self.reconcile, namespace, name, log, read_errors=read_errors)
                except kopf.TemporaryError as exc:  # refused by the API server: in the status and an Event
                    self.later(namespace, name, exc.delay or RETRY_DELAY)
                    return False
                except Exception:  # one Topology's trouble must not stop the others' repair
                    log.exception("reconcile of Topology %s/%s failed", namespace, name)
                    return False
                finally:
                    self._reconciling.discard((namespace, name))
                return True

        return all(await asyncio.gather(*(one(namespace, name) for namespace, name in topologies)))

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

    @staticmethod
    def _address(pod: Manifest, port_name: str) -> str | None:
        """``ip:port`` of a running pod's named container port (None: not running, or no such port)."""
        ip = (pod.get("status") or {}).get("podIP")
        port = next((p.get("containerPort") for c in pod.get("spec", {}).get("containers", ())
                     for p in c.get("ports") or () if p.get("name") == port_name), None)
        if not ip or not port or (pod.get("status") or {}).get("phase") != "Running":
            return None
        return f"{ip}:{port}"

    def _command(self, pod: Manifest, tls: Credentials | None, send: Callable[[ControlClient], _T]) -> _T | None:
        """``send`` a command to a pod's process, with ``tls`` if the pod was made with the topology's TLS
        (else in plaintext: made before TLS was turned on); None if the pod is not running. Raises
        :class:`CommandError` if the process did not answer within :data:`ANSWER_TIMEOUT`."""
        address = self._address(pod, GRPC_PORT_NAME)
        if address is None:
            return None
        made_with_tls = TLS_CA in (pod["metadata"].get("annotations") or {})
        with ControlClient(address, tls=tls if made_with_tls else None, timeout=ANSWER_TIMEOUT) as process:
            return send(process)

    def _found(self, pods: list[tuple[str, int, Manifest]], tls: Credentials | None) -> list[rebalance.Pod]:
        """The pods with what each one's process says of itself (asked all at once: a silent one costs
        :data:`ANSWER_TIMEOUT` at most)."""
        def ask(pod: Manifest) -> ProcessState | None:
            try:
                return self._command(pod, tls, ControlClient.status)
            except CommandError:
                return None  # starting, stopping or unreachable: its readiness tells the rest

        states = _each_pod(ask, [pod for _, _, pod in pods])
        return [rebalance.Pod(name=pod["metadata"]["name"], role=role, ordinal=i, state=state,
                              template=(pod["metadata"].get("annotations") or {}).get(TEMPLATE_HASH),
                              running=_running(pod, role))
                for (role, i, pod), state in zip(pods, states, strict=True)]

    def _carry_out(self, decision: rebalance.Decision, pods: list[tuple[str, int, Manifest]], *,
                   spec: TopologySpec, tls: Credentials | None, logger: logging.Logger | logging.LoggerAdapter,
                   commands: tuple[str, ...]) -> dict[str, Any] | None:
        """Send a rebalance's commands (``commands``: which of deactivate, switch, activate). A command that
        went unanswered is retried at the next reconcile; a SWITCH that a process refused stops the
        rebalance: the rebalance to report instead (None: none refused)."""
        by_name = {pod["metadata"]["name"]: pod for _, _, pod in pods}
        stopped = None
        for command in commands:
            for name in getattr(decision, command):
                try:
                    self._command(by_name[name], tls, lambda process, command=command:
                                  process.switch(spec) if command == "switch" else getattr(process, command)())
                except CommandError as exc:
                    if command == "switch" and exc.refused and decision.rebalance is not None:
                        logger.warning("rebalance: %s refused the switch, not sent again: %s", name, exc)
                        stopped = stopped or rebalance.refused(decision.rebalance, name, str(exc))
                    else:
                        logger.warning("rebalance: %s %s failed (retried): %s", command, name, exc)
        return stopped

    def _checked(self, decision: rebalance.Decision, pods: list[tuple[str, int, Manifest]], *, spec: TopologySpec,
                 tls: Credentials | None, logger: logging.Logger | logging.LoggerAdapter) -> dict[str, Any] | None:
        """Ask a process to be switched whether it could run ``spec`` before its children are applied: the
        rebalance stopped if it could not (None: it could, or did not answer, and the switch will tell)."""
        assert decision.rebalance is not None
        name = decision.switch[0]
        pod = next(pod for _, _, pod in pods if pod["metadata"]["name"] == name)
        try:
            self._command(pod, tls, lambda process: process.check(spec))
        except CommandError as exc:
            if exc.refused:
                logger.warning("rebalance: %s cannot run the new spec, nothing of it is applied: %s", name, exc)
                return rebalance.refused(decision.rebalance, name, str(exc))
        return None

    def _suspend(self, found: list[rebalance.Pod], pods: list[tuple[str, int, Manifest]], *, spec: TopologySpec,
                 generation: int, tls: Credentials | None, logger: logging.Logger | logging.LoggerAdapter) -> None:
        """Tell each running worker process whose ``suspended`` is not the spec's: at once, where the
        kubelet would bring its mounted spec file up to date up to a minute later. A command that fails
        is retried at the next reconcile; the file follows anyway. The command carries the Topology's
        generation, so that a process ignores an older version of the file that the kubelet writes after it."""
        by_name = {pod["metadata"]["name"]: pod for _, _, pod in pods}
        for pod in found:
            if pod.role != WORKER or pod.state is None or pod.state.suspended == spec.suspended:
                continue
            try:
                self._command(by_name[pod.name], tls,
                              lambda process: process.suspend(spec.suspended, generation=generation))
            except CommandError as exc:
                logger.warning("%s %s failed (retried; its spec file follows): %s",
                               "suspend" if spec.suspended else "resume", pod.name, exc)

    def _reported(self, pods: list[Manifest]) -> list[dict[str, Any]]:
        """The components' recent errors, from ``GET /errors`` on the metrics port of each running pod,
        :data:`ASKING` pods at a time (one pod that does not answer costs its timeout once, not per pod)."""

        def read(pod: Manifest) -> list[dict[str, Any]] | None:
            address = self._address(pod, METRICS_PORT_NAME)
            if address is None:
                return None
            errors = _errors_of(address)
            if not isinstance(errors, list):
                return None
            return [e for e in errors[-status.KEEP_ERRORS:] if isinstance(e, dict)]

        found = _each_pod(read, pods)
        return status.component_errors({pod["metadata"]["name"]: errors for pod, errors in zip(pods, found, strict=True)
                                        if errors is not None})

    def _status(self, spec: TopologySpec, namespace: str, *, workers: Manifest | None, ackers: Manifest | None,
                previous: dict[str, Any], generation: int | None, read_errors: bool,
                rebalancing: dict[str, Any] | None = status.KEEP) -> dict[str, Any]:
        counts = {role: process_count(spec, role) for role in ROLES}
        pods = [pod for _, _, pod in self._pods(namespace, spec.name, counts)]
        return status.compute(spec, workers=workers, ackers=ackers, previous=previous, generation=generation,
                              at=(at := status.now()), problems=status.pod_problems(pods, at=at),
                              reported=self._reported(pods) if read_errors else None, rebalance=rebalancing)

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
            found = self._found(pods, tls)
            now = datetime.now(UTC)
            decision = rebalance.decide(
                spec=spec, pods=found, previous=previous.get("rebalance"), now=now,
                watched_since=self._watching(namespace, name, previous.get("rebalance"), now),
                templates={m["metadata"]["labels"][COMPONENT]: template_hash(m) for m in manifests
                           if m["kind"] == "StatefulSet"})
            self._carry_out(decision, pods, spec=spec, tls=tls, logger=logger,
                            commands=("deactivate",))
            if decision.apply and decision.switch and decision.rebalance is not None:
                stopped = self._checked(decision, pods, spec=spec, tls=tls, logger=logger)
                if stopped is not None:  # nothing of the new spec is applied; the spouts go again at the next step
                    decision = dataclasses.replace(decision, rebalance=stopped, apply=False, switch=(), delete=())
            if decision.apply:
                try:
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
                logger.info("reconciled: %s", applied.summary())
                if applied.changed:
                    self._event(topology, "Normal", "Applied", applied.summary())
                live = {role: applied.live.get(("StatefulSet", getattr(names, role))) for role in ROLES}
                # Only now that their StatefulSets carry the new template: deleted before, a pod was made
                # again from the old one, and was deleted for nothing when the check or the write was refused.
                for pod in decision.delete:
                    self.kube.delete(Ref("v1", "Pod", namespace, pod))
                stopped = self._carry_out(decision, pods, spec=spec, tls=tls, logger=logger,
                                          commands=("switch", "activate"))
                if stopped is not None:  # the status's Degraded condition and its Warning Event say why
                    decision = dataclasses.replace(decision, rebalance=stopped)  # again: the spouts go again soon
            else:  # a refused rebalance applies nothing, and lets the held spouts go
                self._carry_out(decision, pods, spec=spec, tls=tls, logger=logger,
                                commands=("activate",))
                if decision.rebalance is not None and decision.rebalance.get("refused"):
                    self._repair(topology, lambda: certificates, logger)
            self._suspend(found, pods, spec=spec, generation=generation or 0, tls=tls, logger=logger)
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

    def _render(self, topology: Manifest, spec: TopologySpec, *, image: str,
                certificates: TopologyCredentials | None, generation: int | None) -> list[Manifest]:
        """The children of ``topology`` for ``spec``, owned by it."""
        own = (self.settings.own_namespace,) if self.settings.own_namespace else ()
        manifests = render(spec, namespace=topology["metadata"]["namespace"], image=image,
                           podmonitor=self._podmonitor(), monitor_labels=dict(self.settings.podmonitor_labels),
                           pdb_api=self.features.pdb_api, tls=certificates.rendered if certificates else None,
                           metrics_from=self.settings.metrics_from, control_from=own, generation=generation or 0,
                           evict_unhealthy=self.features.unhealthy_eviction)
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


def _running(pod: Manifest, role: str) -> bool:
    """Whether a pod's process runs (its main container is running, not waiting to be restarted): one that
    does not answer then may be busy, holding trees."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return any(c.get("name") == role and "running" in (c.get("state") or {}) for c in statuses)


def _errors_of(address: str) -> Any:
    """A pod's ``GET /errors?last=N``, parsed; None if it does not answer, in :data:`ERRORS_TIMEOUT` in all,
    with at most :data:`ERRORS_MAX_BYTES`. A pod runs its user's code: an answer that never ends (its
    headers too), or one of millions of entries, must not hold up or exhaust the operator of every
    Topology. Redirects are not followed. A process older than ``?last=`` answers it 404: then ``/errors``."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + ERRORS_TIMEOUT
    for path in (f"{ERRORS_PATH}?last={status.KEEP_ERRORS}", ERRORS_PATH):
        answer = _get(host, int(port), path, deadline)
        if answer is None or answer[0] not in (200, 404):
            return None
        if answer[0] == 200:
            try:
                return json.loads(answer[1])
            except ValueError:
                return None
    return None


def _get(host: str, port: int, path: str, deadline: float) -> tuple[int, bytes] | None:
    """An HTTP/1.0 GET (the server closes once it answered), read whole by ``deadline``: (status, body)."""
    data = bytearray()
    try:
        with socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.001)) as sock:
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            while chunk := sock.recv(1 << 16):
                data += chunk
                left = deadline - time.monotonic()
                if left <= 0 or len(data) > ERRORS_MAX_BYTES:
                    return None
                sock.settimeout(left)
    except OSError:
        return None  # a pod that does not answer: its readiness and container state tell why
    head, end, body = bytes(data).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if not end or len(status_line) < 2 or not status_line[1].isdigit():
        return None
    return int(status_line[1]), body


def _owned(live: Manifest, topology: Mapping[str, Any]) -> bool:
    """Whether ``live`` is this Topology's child (so it may be deleted when no longer rendered)."""
    meta = live.get("metadata") or {}
    uid = topology["metadata"].get("uid")
    if any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or ()):
        return True
    labels = meta.get("labels") or {}
    return (labels.get(MANAGED_BY_LABEL) == MANAGED_BY
            and labels.get("app.kubernetes.io/instance") == topology["metadata"]["name"])


def _spec_written(body: Mapping[str, Any]) -> bool:
    """Whether a StatefulSet's spec changed since its controller last looked (its generation moved)."""
    observed = (body.get("status") or {}).get("observedGeneration")
    return observed is not None and observed != body.get("metadata", {}).get("generation")


def _topology_of(body: Mapping[str, Any]) -> str | None:
    for ref in body.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("kind") == resource.KIND and ref.get("apiVersion") == resource.API_VERSION:
            return ref.get("name")
    return None


def register(registry: kopf.OperatorRegistry, *, settings: Settings, api: client.ApiClient) -> Operator:
    """Register the handlers in ``registry``; the ``kubernetes`` client ``api`` reads and writes objects."""
    operator = Operator(settings=settings, kube=Kube(api))
    topologies = dict(group=resource.GROUP, version=resource.VERSION, plural=resource.PLURAL, registry=registry)
    if settings.webhook_host is not None:
        admission.register(registry, on_review=operator.metrics.admitted)

    counted = operator.metrics.counted  # failures and retries by handler id

    @kopf.on.startup(registry=registry)
    @counted("discover")
    def discover(logger: logging.Logger, **_: Any) -> None:
        operator.discover(logger)

    @kopf.on.startup(registry=registry, id="resync")
    async def start_resync(**_: Any) -> None:
        # started here, it runs in kopf's context, so its reconciles may post Events like the handlers'
        operator.resync_task = asyncio.create_task(operator.resync(), name="resync")

    @kopf.on.cleanup(registry=registry, id="resync")
    async def stop_resync(**_: Any) -> None:
        # Ended here, before kopf's shutdown waits 5 s for every task it did not start itself and
        # then cancels them: each stop of the operator took 5 s longer (a rolling update, each test).
        task = operator.resync_task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @kopf.on.resume(**topologies, id="reconcile")
    @kopf.on.create(**topologies, id="reconcile")
    @kopf.on.update(**topologies, id="reconcile")
    @counted("reconcile")
    def reconcile(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
        operator.reconcile(namespace, name, logger)

    managed = {MANAGED_BY_LABEL: MANAGED_BY}  # as the API server filters their watches (CHILD_WATCHES)

    @kopf.on.event("apps", "v1", "statefulsets", labels=managed, registry=registry, id="status")
    @counted("status")
    def statefulset_changed(event: kopf.RawEvent, body: kopf.Body, namespace: str, logger: logging.Logger,
                            **_: Any) -> None:
        name = _topology_of(body)
        if name is None:
            return
        # deleted, or its spec written by someone (the controller has not caught up): put it back;
        # otherwise only its status moved
        if event.get("type") == "DELETED" or _spec_written(body):
            operator.reconcile(namespace, name, logger)
        else:
            operator.refresh(namespace, name)

    def child_changed(event: kopf.RawEvent, body: kopf.Body, namespace: str, logger: logging.Logger,
                      **_: Any) -> None:
        name = _topology_of(body)
        # the initial listing (type None) is the resume handler's, creations are the operator's own
        if name is not None and event.get("type") in ("MODIFIED", "DELETED"):
            operator.reconcile(namespace, name, logger)

    for plural in ("configmaps", "secrets", "services"):
        kopf.on.event("", "v1", plural, labels=managed, registry=registry, id=plural)(counted(plural)(child_changed))

    @kopf.on.event("", "v1", "pods", labels=managed, registry=registry, id="pods")
    @counted("pods")
    def pod_changed(body: kopf.Body, namespace: str, **_: Any) -> None:
        # worker and acker pods belong to their StatefulSet; the instance label names the Topology
        name = body.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/instance")
        if name:
            operator.refresh(namespace, name)

    return operator


async def operate(*, settings: Settings, api: client.ApiClient, registry: kopf.OperatorRegistry,
                  stop_flag: Any = None, ready_flag: Any = None) -> None:
    """Run the operator until ``stop_flag`` (or a signal): one replica, no peering, the namespaces of
    ``settings`` (all when none), kopf's liveness endpoint at ``settings.liveness``, the operator's
    metrics on ``settings.metrics_port``."""
    operator = register(registry, settings=settings, api=api)
    ready = ready_flag if ready_flag is not None else threading.Event()
    operator.metrics.watch_ready(ready.is_set)
    metrics = MetricsServer(registry=operator.metrics.registry, host="0.0.0.0", port=settings.metrics_port,
                            healthy=ready.is_set)
    metrics.start()
    try:
        await kopf.operator(registry=registry, settings=kopf_settings(settings, api), standalone=True,
                            clusterwide=settings.clusterwide, namespaces=list(settings.namespaces),
                            liveness_endpoint=settings.liveness, stop_flag=stop_flag, ready_flag=ready)
    finally:
        if operator.resync_task is not None:
            operator.resync_task.cancel()
        metrics.stop()
