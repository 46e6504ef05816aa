"""Talking to a Topology's running processes: a rebalance's, a suspend's and a log level's commands over each
pod's gRPC control port (:mod:`squall.process.control`), and the components' recent errors over its metrics port
(``GET /errors``), for the status.

A pod runs its user's code: whatever it answers, or does not, costs the operator a timeout at most, and
:data:`ASKING` pods are asked at once, so that one pod that does not answer holds up no other.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from squall.contract import ERRORS_PATH, GRPC_PORT_NAME, METRICS_PORT_NAME, WORKER
from squall.errors import CommandError
from squall.process import log_levels
from squall.process.control import COMMAND_WAIT, ControlClient, ProcessState
from squall.topology.spec import TopologySpec
from squall.transport.tls import Credentials
from squall_operator import rebalance, status
from squall_operator.render import TEMPLATE_HASH, TLS_CA, Manifest

_T = TypeVar("_T")
ASKING = 8  # pods asked at once
# seconds to wait for a process's answer to a rebalance's command: longer than a busy process waits for its
# loop, so that it answers (and is not taken for one that cannot, whose trees a drain would not wait for)
ANSWER_TIMEOUT = COMMAND_WAIT + 2.0
ERRORS_TIMEOUT = 2.0  # seconds to wait for a pod's GET /errors, in all
ERRORS_MAX_BYTES = 256 << 10  # of a pod's GET /errors?last=5, far more than five errors take

# (role, ordinal, pod) of a Topology's worker and acker pods
RolePods = Sequence[tuple[str, int, Manifest]]
Logger = logging.Logger | logging.LoggerAdapter


def address(pod: Manifest, port_name: str) -> str | None:
    """``ip:port`` of a running pod's named container port (None: not running, or no such port)."""
    ip = (pod.get("status") or {}).get("podIP")
    port = next((p.get("containerPort") for c in pod.get("spec", {}).get("containers", ())
                 for p in c.get("ports") or () if p.get("name") == port_name), None)
    if not ip or not port or (pod.get("status") or {}).get("phase") != "Running":
        return None
    return f"{ip}:{port}"


def running(pod: Manifest, role: str) -> bool:
    """Whether a pod's process runs (its main container is running, not waiting to be restarted): one that
    does not answer then may be busy, holding trees."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return any(c.get("name") == role and "running" in (c.get("state") or {}) for c in statuses)


def command(pod: Manifest, tls: Credentials | None, send: Callable[[ControlClient], _T]) -> _T | None:
    """``send`` a command to a pod's process, with ``tls`` if the pod was made with the topology's TLS
    (else in plaintext: made before TLS was turned on); None if the pod is not running. Raises
    :class:`CommandError` if the process did not answer within :data:`ANSWER_TIMEOUT`."""
    at = address(pod, GRPC_PORT_NAME)
    if at is None:
        return None
    made_with_tls = TLS_CA in (pod["metadata"].get("annotations") or {})
    with ControlClient(at, tls=tls if made_with_tls else None, timeout=ANSWER_TIMEOUT) as process:
        return send(process)


def states(pods: RolePods, tls: Credentials | None) -> list[rebalance.Pod]:
    """The pods with what each one's process says of itself (asked all at once: a silent one costs
    :data:`ANSWER_TIMEOUT` at most)."""
    def ask(pod: Manifest) -> ProcessState | None:
        try:
            return command(pod, tls, ControlClient.status)
        except CommandError:
            return None  # starting, stopping or unreachable: its readiness tells the rest

    with ThreadPoolExecutor(max_workers=ASKING) as pool:
        answers = list(pool.map(ask, [pod for _, _, pod in pods]))
    return [rebalance.Pod(name=pod["metadata"]["name"], role=role, ordinal=i, state=state,
                          template=(pod["metadata"].get("annotations") or {}).get(TEMPLATE_HASH),
                          running=running(pod, role))
            for (role, i, pod), state in zip(pods, answers, strict=True)]


def carry_out(decision: rebalance.Decision, pods: RolePods, *, spec: TopologySpec, tls: Credentials | None,
              logger: Logger, commands: tuple[str, ...]) -> dict[str, Any] | None:
    """Send a rebalance's commands (``commands``: which of deactivate, switch, activate). A command that
    went unanswered is retried at the next reconcile; a SWITCH that a process refused stops the
    rebalance: the rebalance to report instead (None: none refused)."""
    by_name = {pod["metadata"]["name"]: pod for _, _, pod in pods}
    stopped = None
    for kind in commands:
        for name in getattr(decision, kind):
            try:
                command(by_name[name], tls, lambda process, kind=kind:
                        process.switch(spec) if kind == "switch" else getattr(process, kind)())
            except CommandError as exc:
                if kind == "switch" and exc.refused and decision.rebalance is not None:
                    logger.warning("rebalance: %s refused the switch, not sent again: %s", name, exc)
                    stopped = stopped or rebalance.refused(decision.rebalance, name, str(exc))
                else:
                    logger.warning("rebalance: %s %s failed (retried): %s", kind, name, exc)
    return stopped


def check(decision: rebalance.Decision, pods: RolePods, *, spec: TopologySpec, tls: Credentials | None,
          logger: Logger) -> dict[str, Any] | None:
    """Ask a process to be switched whether it could run ``spec`` before its children are applied: the
    rebalance stopped if it could not (None: it could, or did not answer, and the switch will tell)."""
    assert decision.rebalance is not None
    name = decision.switch[0]
    pod = next(pod for _, _, pod in pods if pod["metadata"]["name"] == name)
    try:
        command(pod, tls, lambda process: process.check(spec))
    except CommandError as exc:
        if exc.refused:
            logger.warning("rebalance: %s cannot run the new spec, nothing of it is applied: %s", name, exc)
            return rebalance.refused(decision.rebalance, name, str(exc))
    return None


def suspend(found: list[rebalance.Pod], pods: RolePods, *, spec: TopologySpec, generation: int,
            tls: Credentials | None, logger: Logger) -> None:
    """Tell each running worker process whose ``suspended`` is not the spec's: at once, where the
    kubelet would bring its mounted spec file up to date up to a minute later. A command that fails
    is retried at the next reconcile; the file follows anyway. The command carries the Topology's
    generation, so that a process ignores an older version of the file that the kubelet writes after it."""
    by_name = {pod["metadata"]["name"]: pod for _, _, pod in pods}
    for pod in found:
        if pod.role != WORKER or pod.state is None or pod.state.suspended == spec.suspended:
            continue
        try:
            command(by_name[pod.name], tls, lambda process: process.suspend(spec.suspended, generation=generation))
        except CommandError as exc:
            logger.warning("%s %s failed (retried; its spec file follows): %s",
                           "suspend" if spec.suspended else "resume", pod.name, exc)


def relay_log_levels(found: list[rebalance.Pod], pods: RolePods, *, overrides: Sequence[log_levels.Override],
                     relayed: set[tuple[str, ...]], tls: Credentials | None, logger: Logger) -> None:
    """Tell each process that answered the log levels ``overrides`` not over yet (``squall set-log-level``),
    with the seconds each has left: each process sets its logger back by itself when they run out.
    ``relayed`` keeps what was told (pod, its uid and restarts, the override), so a process is told again
    only when it is new or restarted, or the override changed."""
    by_name = {pod["metadata"]["name"]: pod for _, _, pod in pods}
    now = datetime.now(UTC)
    relayed.difference_update({key for key in relayed if key[-1] <= now.isoformat()})  # over: forgotten
    for pod in found:
        if pod.state is None:
            continue  # not running or not answering: told at a later reconcile
        manifest = by_name[pod.name]
        containers = (manifest.get("status") or {}).get("containerStatuses") or ()
        restarts = sum(c.get("restartCount") or 0 for c in containers)
        for override in overrides:
            key = (pod.name, manifest["metadata"].get("uid", ""), str(restarts), override.logger, override.level,
                   override.until.isoformat())
            if key in relayed or (seconds := override.seconds_left(now)) <= 0:
                continue
            try:
                command(manifest, tls, lambda process, o=override, s=seconds:
                        process.set_log_level(o.logger, o.level, s))
            except CommandError as exc:
                logger.warning("set-log-level of %s at %s in %s failed (retried): %s", override.logger,
                               override.level, pod.name, exc)
                continue
            relayed.add(key)


def reported_errors(pods: Sequence[Manifest]) -> list[dict[str, Any]]:
    """The components' recent errors, from ``GET /errors`` on the metrics port of each running pod,
    :data:`ASKING` pods at a time (one pod that does not answer costs its timeout once, not per pod)."""
    found = asyncio.run(_errors_of_each([address(pod, METRICS_PORT_NAME) for pod in pods]))
    recent = {pod["metadata"]["name"]: [e for e in errors[-status.KEEP_ERRORS:] if isinstance(e, dict)]
              for pod, errors in zip(pods, found, strict=True) if isinstance(errors, list)}
    return status.component_errors(recent)


async def _errors_of_each(addresses: list[str | None]) -> list[Any]:
    """:func:`_errors_of` each address (None: a pod not running, not asked), :data:`ASKING` at a time."""
    room = asyncio.Semaphore(ASKING)
    # Nothing is decompressed: a small answer must not unpack into a large one.
    async with aiohttp.ClientSession(auto_decompress=False, skip_auto_headers=("Accept-Encoding",)) as session:

        async def one(at: str | None) -> Any:
            if at is None:
                return None
            async with room:
                return await _errors_of(session, at)

        return await asyncio.gather(*(one(at) for at in addresses))


async def _errors_of(session: aiohttp.ClientSession, at: str) -> Any:
    """A pod's ``GET /errors?last=N``, parsed; None if it does not answer, in :data:`ERRORS_TIMEOUT` in all,
    with at most :data:`ERRORS_MAX_BYTES`. A pod runs its user's code: an answer that never ends (its
    headers too), or one of millions of entries, must not hold up or exhaust the operator of every
    Topology. Redirects are not followed. A process older than ``?last=`` answers it 404: then ``/errors``.

    A deadline on the whole exchange, not on each read: an answer that drips a byte at a time would
    never miss a per-read timeout (urllib3's and httpx's timeouts are per read)."""
    host, _, port = at.rpartition(":")  # the last colon: an IPv6 address has its own
    try:
        async with asyncio.timeout(ERRORS_TIMEOUT):
            for query in (f"last={status.KEEP_ERRORS}", ""):
                url = URL.build(scheme="http", host=host, port=int(port), path=ERRORS_PATH, query_string=query)
                async with session.get(url, allow_redirects=False) as response:
                    if response.status == 404:
                        continue
                    if response.status != 200:
                        return None
                    body = bytearray()
                    async for chunk in response.content.iter_any():
                        body += chunk
                        if len(body) > ERRORS_MAX_BYTES:
                            return None
                    return json.loads(body)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
        return None  # a pod that does not answer: its readiness and container state tell why
    return None
