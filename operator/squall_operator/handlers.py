"""The kopf handlers: reconcile a Topology on create, update and resume, and when one of its
StatefulSets, Services, ConfigMaps or Secrets is deleted or changed by someone; follow its StatefulSets
and pods for the status; start and stop the resync (:mod:`squall_operator.resync`) with kopf. What they
call is the :class:`~squall_operator.reconcile.Operator`'s.

With a Lease (``Settings.lease``), :func:`operate` runs kopf, and so every handler, only while this
replica leads (:mod:`squall_operator.leader`); every replica serves the admission webhook all along
(:class:`squall_operator.admission.Webhook`), outside kopf.

There is no delete handler, hence no finalizer: a deleted Topology goes at once (even while the
operator is down), and Kubernetes' garbage collector deletes its children through their
ownerReferences.

Handlers are plain functions, so kopf runs them in threads, where the blocking ``kubernetes``
client is at home.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import kopf
from kubernetes import client
from prometheus_client import CollectorRegistry

from squall.metrics.http import MetricsServer
from squall_operator import admission, leader, resource
from squall_operator.apply import Kube
from squall_operator.reconcile import Operator
from squall_operator.render import MANAGED_BY, MANAGED_BY_LABEL
from squall_operator.resync import Resync
from squall_operator.settings import Settings

# the (group or core version, plural) of the children the operator watches, all labelled as managed by it
HEARTBEAT_STALE = 20.0  # seconds without a turn of the event loop: not alive (the liveness probe fails)
CHILD_WATCHES = (("apps", "statefulsets"), ("v1", "configmaps"), ("v1", "secrets"), ("v1", "services"), ("v1", "pods"))


def kopf_settings(operator: Settings, api: client.ApiClient) -> kopf.OperatorSettings:
    """kopf's settings for this operator: without kopf's peering (the Lease elects the replica that runs
    kopf), state kept in annotations, no admission webhook (:class:`admission.Webhook` serves it)."""
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
    return settings


def _spec_written(body: Mapping[str, Any]) -> bool:
    """Whether a StatefulSet's spec changed since its controller last looked (its generation moved)."""
    observed = (body.get("status") or {}).get("observedGeneration")
    return observed is not None and observed != body.get("metadata", {}).get("generation")


def _topology_of(body: Mapping[str, Any]) -> str | None:
    for ref in body.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("kind") == resource.KIND and ref.get("apiVersion") == resource.API_VERSION:
            return ref.get("name")
    return None


def register(registry: kopf.OperatorRegistry, *, settings: Settings,
             api: client.ApiClient) -> tuple[Operator, Resync]:
    """Register the handlers in ``registry``, the resync started and stopped with kopf; the ``kubernetes``
    client ``api`` reads and writes objects."""
    operator = Operator(settings=settings, kube=Kube(api))
    resync = Resync(operator)
    topologies = dict(group=resource.GROUP, version=resource.VERSION, plural=resource.PLURAL, registry=registry)

    counted = operator.metrics.counted  # failures and retries by handler id

    @kopf.on.startup(registry=registry)
    @counted("discover")
    def discover(logger: logging.Logger, **_: Any) -> None:
        operator.discover(logger)

    @kopf.on.startup(registry=registry, id="resync")
    async def start_resync(**_: Any) -> None:
        # started here, it runs in kopf's context, so its reconciles may post Events like the handlers'
        resync.start()

    @kopf.on.cleanup(registry=registry, id="resync")
    async def stop_resync(**_: Any) -> None:
        # Ended here, before kopf's shutdown waits 5 s for every task it did not start itself and
        # then cancels them: each stop of the operator took 5 s longer (a rolling update, each test).
        await resync.stop()

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

    return operator, resync


async def operate(*, settings: Settings, api: client.ApiClient, registry: kopf.OperatorRegistry,
                  stop_flag: Any = None, ready_flag: Any = None, leave: Callable[[], None] = leader.leave) -> None:
    """Run the operator until ``stop_flag`` (or a signal): the namespaces of ``settings`` (all when none),
    ``/healthz`` and ``/readyz`` at ``settings.liveness``, the operator's metrics on ``settings.metrics_port``,
    the admission webhook with a ``settings.webhook_host``. With a ``settings.lease``, kopf runs once this
    replica holds the Lease, and ``leave()`` is called (the process ends) when it no longer does."""
    operator, resync = register(registry, settings=settings, api=api)
    ready = ready_flag if ready_flag is not None else threading.Event()
    operator.metrics.watch_ready(ready.is_set)
    webhook = admission.Webhook(settings, api, on_review=operator.metrics.admitted) if settings.webhook_host else None
    election = None
    if settings.lease is not None:
        assert settings.own_namespace is not None  # Settings.from_env checks it
        election = leader.Election(api=api, namespace=settings.own_namespace, name=settings.lease,
                                   on_change=operator.metrics.leading)
    else:
        operator.metrics.leading(True)

    beat = [time.monotonic()]  # when the event loop last ran the heartbeat

    def healthy() -> bool:  # alive: the loop runs, kopf in the leader, the webhook in every replica
        return time.monotonic() - beat[0] < HEARTBEAT_STALE and (webhook is None or webhook.serving) and (
            ready.is_set() or (election is not None and not election.leading))

    def serving() -> bool:  # ready for the webhook's Service: the leader and those waiting alike
        return webhook.serving if webhook is not None else healthy()

    metrics = MetricsServer(registry=operator.metrics.registry, host="0.0.0.0", port=settings.metrics_port,
                            healthy=healthy, ready=serving)
    # the probes' endpoint, in every replica from its start (kopf's own runs in the leader alone)
    liveness = urlsplit(settings.liveness)
    probes = MetricsServer(registry=CollectorRegistry(), host=liveness.hostname or "0.0.0.0",
                           port=liveness.port or 80, healthy=healthy, ready=serving)
    metrics.start()
    probes.start()
    heartbeat = asyncio.create_task(_beat(beat), name="heartbeat")
    webhook_task = asyncio.create_task(webhook.run(), name="webhook") if webhook is not None else None
    run_kopf = functools.partial(kopf.operator, registry=registry, settings=kopf_settings(settings, api),
                                 standalone=True, clusterwide=settings.clusterwide,
                                 namespaces=list(settings.namespaces), stop_flag=stop_flag, ready_flag=ready)
    try:
        if election is None:
            await run_kopf()
        elif await _until_stopped(election.acquire(), stop_flag):
            await _lead(election, run_kopf(), leave)
    finally:
        resync.cancel()
        heartbeat.cancel()
        if webhook_task is not None:
            webhook_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await webhook_task
        probes.stop()
        metrics.stop()


async def _beat(beat: list[float]) -> None:
    while True:
        beat[0] = time.monotonic()
        await asyncio.sleep(1.0)


async def _lead(election: leader.Election, running: Any, leave: Callable[[], None]) -> None:
    """Run kopf (``running``) while holding the Lease; hand it back once kopf has stopped."""
    holding = asyncio.create_task(election.hold(), name="lease")
    kopf_task = asyncio.ensure_future(running)
    done, _ = await asyncio.wait({holding, kopf_task}, return_when=asyncio.FIRST_COMPLETED)
    if holding in done:
        leave()  # the process ends here; a test's leave() stops kopf instead
        await kopf_task
        return
    holding.cancel()
    try:
        await kopf_task
    finally:
        await election.release()


async def _until_stopped(acquiring: Any, stop_flag: Any) -> bool:
    """Await ``acquiring``; False, with it cancelled, if the operator is told to stop first (``stop_flag``,
    or SIGTERM and SIGINT, which kopf handles once it runs)."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
    task = asyncio.ensure_future(acquiring)
    try:
        while not task.done():
            if stopping.is_set() or _is_set(stop_flag):
                task.cancel()
                return False
            await asyncio.wait({task}, timeout=0.2)
        return task.result() is None
    finally:
        task.cancel()


def _is_set(flag: Any) -> bool:
    if flag is None:
        return False
    return flag.done() if isinstance(flag, asyncio.Future) else flag.is_set()
