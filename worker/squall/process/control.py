"""The operator's commands to one worker or acker process, over the gRPC server it already runs: a
rebalance's, a suspend's (:meth:`ControlClient.suspend`), and a log level's
(:meth:`ControlClient.set_log_level`).

Storm's ``rebalance -w`` deactivates the spouts, waits for the trees in flight, reassigns and
activates again. The operator (and tests, on local processes) does the same process by process:
:meth:`ControlClient.deactivate` every process, poll :meth:`ControlClient.status` until
:func:`drained`, :meth:`ControlClient.switch` each kept process to the new spec; each then
reconnects to its peers under the new plan and activates its spouts by itself.

The commands ride the topology's mutual TLS like its streams: only a holder of the topology's
certificate can send them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import grpc

from squall.errors import CommandError
from squall.proto.squall_pb2 import ControlRequest
from squall.proto.squall_pb2 import ProcessState as ProcessStateMessage
from squall.topology.spec import TopologySpec
from squall.transport.links import channel_options
from squall.transport.tls import SERVER_NAME, Credentials

METHOD = "/squall.v1.Squall/Control"
TIMEOUT = 10.0  # seconds for one command: a process answers from its scheduler loop within milliseconds
# Seconds a process waits for its scheduler loop to carry a command out (busy in a bolt, say) before it
# answers that it did not: a client that waits less takes a busy process for an unreachable one.
COMMAND_WAIT = 5.0
MAX_MESSAGE = 16 << 20  # a spec is small; this only bounds what a command may carry


@dataclass(frozen=True)
class ProcessState:
    """What a process says of itself (``squall.v1.ProcessState``)."""

    fingerprint: str  # of the spec it runs
    active: bool  # its spouts emit
    held: bool  # deactivated for a rebalance
    connected: bool  # streams to and from every peer are open
    pending: int  # trees pending at its spouts
    in_flight: int  # items queued in it, and inputs its bolts hold
    member: bool  # False: the spec it was asked to switch to has no place for it
    suspended: bool = False  # the topology is suspended, as its spec file or a SUSPEND said last

    @property
    def idle(self) -> bool:
        """Nothing of this process is in flight: no tree pending at its spouts, nothing queued or held."""
        return self.pending == 0 and self.in_flight == 0

    @classmethod
    def of(cls, message: ProcessStateMessage) -> ProcessState:
        return cls(fingerprint=message.fingerprint, active=message.active, held=message.held,
                   connected=message.connected, pending=message.pending, in_flight=message.in_flight,
                   member=message.member, suspended=message.suspended)

    def message(self) -> ProcessStateMessage:
        return ProcessStateMessage(fingerprint=self.fingerprint, active=self.active, held=self.held,
                                   connected=self.connected, pending=self.pending, in_flight=self.in_flight,
                                   member=self.member, suspended=self.suspended)


def drained(states: Iterable[ProcessState]) -> bool:
    """Whether every process is deactivated and idle: no tree is in flight anywhere."""
    return all(not s.active and s.idle for s in states)


class ControlClient:
    """Commands to the process listening on ``address`` (``host:port`` of its gRPC server)."""

    def __init__(self, address: str, *, tls: Credentials | None = None, timeout: float = TIMEOUT) -> None:
        self.address = address
        self.timeout = timeout
        options = [*channel_options(MAX_MESSAGE), ("grpc.ssl_target_name_override", SERVER_NAME)] if tls else \
            channel_options(MAX_MESSAGE)
        self._channel = grpc.secure_channel(address, tls.channel(), options=options) if tls else \
            grpc.insecure_channel(address, options=options)
        self._call = self._channel.unary_unary(METHOD, request_serializer=ControlRequest.SerializeToString,
                                               response_deserializer=ProcessStateMessage.FromString)

    def _send(self, request: ControlRequest) -> ProcessState:
        try:
            return ProcessState.of(self._call(request, timeout=self.timeout))
        except grpc.RpcError as exc:
            # A refusal carries the process's reason; anything else (unreachable, cancelled as its server
            # closed, timed out) is a command it never answered, which may be sent again.
            raise CommandError(f"{self.address}: {exc.details() or exc.code()}",
                               refused=exc.code() == grpc.StatusCode.INVALID_ARGUMENT) from None

    def status(self) -> ProcessState:
        return self._send(ControlRequest(command=ControlRequest.STATUS))

    def deactivate(self) -> ProcessState:
        """Stop the spouts emitting (they stay open): the trees in flight drain."""
        return self._send(ControlRequest(command=ControlRequest.DEACTIVATE))

    def activate(self) -> ProcessState:
        """Let the spouts emit again (unless the topology is suspended)."""
        return self._send(ControlRequest(command=ControlRequest.ACTIVATE))

    def suspend(self, suspended: bool = True, *, generation: int = 0) -> ProcessState:
        """Suspend the topology in this process (``False``: resume it) now, not when the kubelet next
        updates its mounted spec file (up to about a minute later): the operator sends both.
        ``generation``: the Topology's, which the process compares with its spec file's (0: not known)."""
        return self._send(ControlRequest(command=ControlRequest.SUSPEND if suspended else ControlRequest.RESUME,
                                         generation=generation))

    def set_log_level(self, logger: str, level: str, seconds: float) -> ProcessState:
        """Set ``logger`` (``ROOT``: the root logger) at ``level`` for ``seconds``, after which the process sets
        it back to its own level (Storm's ``set_log_level``; :mod:`squall.process.log_levels`)."""
        return self._send(ControlRequest(command=ControlRequest.SET_LOG_LEVEL, logger=logger, level=level,
                                         seconds=seconds))

    def switch(self, spec: TopologySpec) -> ProcessState:
        """Run ``spec`` from now on: the process rebuilds its tasks and links for the new plan (in the
        same OS process) and activates once connected to every peer of that plan. Anything still in
        flight is dropped, so drain first."""
        return self._send(ControlRequest(command=ControlRequest.SWITCH, spec=json.dumps(spec.to_dict())))

    def check(self, spec: TopologySpec) -> ProcessState:
        """Whether the process could run ``spec`` (it imports its classes): its state, or
        :class:`CommandError` (``refused``) saying why not. Nothing changes."""
        return self._send(ControlRequest(command=ControlRequest.CHECK, spec=json.dumps(spec.to_dict())))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
