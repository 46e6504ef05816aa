"""Leader election: of the operator's replicas, the one holding a ``coordination.k8s.io/v1`` Lease
reconciles; the others serve the admission webhook and wait to take the Lease over.

client-go's algorithm (``k8s.io/client-go/tools/leaderelection``): a candidate takes a Lease that has
no holder, or whose record it has seen unchanged for ``duration`` by its own clock (clocks of two
nodes are never compared); a write carries the ``resourceVersion`` it read, so of two candidates the
API server lets one win. The leader renews every ``retry``; one that has not renewed for
``renew_deadline`` (shorter than ``duration``, measured from the start of its last successful
renewal) stops leading before any candidate may take over, so two replicas never lead at once.
It stops by leaving the process (:func:`squall_operator.handlers.operate`): kopf's handlers run in
threads, which cannot be interrupted, and a reconcile of the old leader must not overlap one of the new.
A leader that stops cleanly hands the Lease back (no holder), and a candidate takes it at its next try.

Taking over from a leader killed without a word takes at most ``duration + 2 * retry``: the
candidate sees the last renewal up to ``retry`` after it was written, waits ``duration``, and tries
every ``retry``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseTimes:
    """The Lease's timing, in seconds: a killed leader is replaced within ``duration + 2 * retry`` (12 s)."""

    duration: float = 8.0  # the Lease's leaseDurationSeconds: how long a candidate waits on an unchanged record
    renew_deadline: float = 5.0  # a leader that has not renewed for this long stops (< duration)
    retry: float = 2.0  # between two renewals, and two tries of a candidate

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.duration:
            raise ValueError(f"lease times need 0 < retry < renew_deadline < duration: {self}")


def identity() -> str:
    """This replica's name in the Lease: its pod's name (the host name), and a suffix of its own, so a
    pod restarted in place is another holder."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Election:
    """Acquire, hold and release the Lease ``namespace/name`` through ``api`` as ``holder``."""

    def __init__(self, *, api: client.ApiClient, namespace: str, name: str, holder: str | None = None,
                 times: LeaseTimes = LeaseTimes(), on_change: Callable[[bool], None] = lambda leading: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.holder = holder or identity()
        self.times = times
        self.on_change = on_change  # told True when this replica starts leading, False when it stops
        self.clock = clock
        self.leading = False
        self._observed: dict[str, Any] | None = None  # the last Lease spec seen
        self._observed_at = 0.0  # when (self.clock) it was first seen so

    async def acquire(self) -> None:
        """Return once this replica holds the Lease."""
        waiting_for = None
        while True:
            started = self.clock()
            if await self._try():
                self._lead(True)
                log.info("leading: holding the Lease %s/%s as %s", self.namespace, self.name, self.holder)
                return
            holder = (self._observed or {}).get("holderIdentity")
            if holder != waiting_for:
                log.info("not leading: the Lease %s/%s is held by %s; serving the webhook and waiting",
                         self.namespace, self.name, holder)
                waiting_for = holder
            await asyncio.sleep(max(0.0, started + self.times.retry - self.clock()))

    async def hold(self) -> None:
        """Renew the Lease every ``retry``; return when it could not be renewed for ``renew_deadline``
        (the API server unreachable, or another holder in it): this replica no longer leads."""
        renewed = self.clock()
        while True:
            await asyncio.sleep(self.times.retry)
            started = self.clock()
            left = renewed + self.times.renew_deadline - started
            if left <= 0:
                break
            try:
                ok = await asyncio.wait_for(self._try(timeout=left), timeout=left)
            except TimeoutError:
                ok = False
            if ok:
                renewed = started  # the server's record is at least as new as the request
            elif self._observed is not None and self._observed.get("holderIdentity") not in (None, "", self.holder):
                break
        self._lead(False)
        log.error("lost the Lease %s/%s: not renewed for %.0f s (held by %s now)", self.namespace, self.name,
                  self.clock() - renewed, (self._observed or {}).get("holderIdentity"))

    async def release(self) -> None:
        """Hand the Lease back (no holder), so a candidate takes it at its next try rather than after
        ``duration``."""
        if not self.leading:
            return
        self._lead(False)
        try:
            await asyncio.to_thread(self._release)
        except Exception as exc:  # noqa: BLE001 - stopping anyway: the Lease expires
            log.warning("could not hand the Lease %s/%s back (%s): it expires in %.0f s", self.namespace,
                        self.name, exc, self.times.duration)
        else:
            log.info("handed the Lease %s/%s back", self.namespace, self.name)

    def _lead(self, leading: bool) -> None:
        self.leading = leading
        self.on_change(leading)

    async def _try(self, *, timeout: float | None = None) -> bool:
        try:
            return await asyncio.to_thread(self._acquire_or_renew, timeout or self.times.retry)
        except Exception as exc:  # noqa: BLE001 - urllib3, the socket and the API raise several types
            log.warning("the Lease %s/%s could not be read or written: %s", self.namespace, self.name, exc)
            return False

    def _acquire_or_renew(self, timeout: float) -> bool:
        """One try (blocking): True when this replica holds the Lease after it."""
        now = time.time()
        try:
            lease = self._read(timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return self._create(now, timeout)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if spec != self._observed:
            self._observed, self._observed_at = spec, self.clock()
        if holder and holder != self.holder and \
                self.clock() < self._observed_at + float(spec.get("leaseDurationSeconds") or self.times.duration):
            return False
        mine = holder == self.holder
        lease["spec"] = {**spec, "holderIdentity": self.holder, "leaseDurationSeconds": int(self.times.duration),
                         "renewTime": _micro_time(now),
                         "acquireTime": spec.get("acquireTime") if mine else _micro_time(now),
                         "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine or not holder else 1)}
        try:
            self._write(lease, timeout)  # with the resourceVersion read: a concurrent write wins, this one fails
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._observed, self._observed_at = lease["spec"], self.clock()
        return True

    def _create(self, now: float, timeout: float) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.holder, "leaseDurationSeconds": int(self.times.duration),
                         "acquireTime": _micro_time(now), "renewTime": _micro_time(now), "leaseTransitions": 0}}
        try:
            self.leases.create_namespaced_lease(self.namespace, body, _request_timeout=timeout)
        except ApiException as exc:
            if exc.status == 409:  # another candidate made it first
                return False
            raise
        self._observed, self._observed_at = body["spec"], self.clock()
        return True

    def _release(self) -> None:
        lease = self._read(self.times.retry)
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.holder:
            return
        lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1,
                         "renewTime": _micro_time(time.time())}
        self._write(lease, self.times.retry)

    def _read(self, timeout: float) -> dict[str, Any]:
        response = self.leases.read_namespaced_lease(self.name, self.namespace, _preload_content=False,
                                                     _request_timeout=timeout)
        return json.loads(response.data)

    def _write(self, lease: dict[str, Any], timeout: float) -> None:
        """A merge patch of the spec that carries the resourceVersion read: the API server refuses it (409)
        if the Lease was written since (a null removes a field: the holder, when handing it back)."""
        read = (lease.get("metadata") or {}).get("resourceVersion")
        body = {"metadata": {"resourceVersion": read} if read else {}, "spec": lease["spec"]}
        self.leases.patch_namespaced_lease(self.name, self.namespace, body, _preload_content=False,
                                           _content_type="application/merge-patch+json", _request_timeout=timeout)


def leave(code: int = 1) -> None:
    """End the process at once: a replica that lost the Lease must not finish its reconciles in flight,
    which the new leader makes too (its pod restarts it as a candidate)."""
    logging.shutdown()
    os._exit(code)
