"""The receiving side: a gRPC server whose ``Transfer`` streams feed the ingress, and which answers the
``Control`` commands of a rebalance (:mod:`squall.process.control`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures

import grpc

from squall.errors import CommandError
from squall.proto.squall_pb2 import ControlRequest, ProcessState, TransferSummary
from squall.transport.codec import Decoder, FrameError
from squall.transport.ingress import Ingress
from squall.transport.links import CONTROL, DATA, PLAN_KEY, server_options
from squall.transport.tls import Credentials

log = logging.getLogger("squall.transport")


class ReceiveStats:
    __slots__ = ("batches", "bytes", "malformed")

    def __init__(self) -> None:
        self.batches: dict[tuple[str, str], int] = {}
        self.bytes: dict[tuple[str, str], int] = {}
        self.malformed = 0


class Receiver:
    def __init__(self, *, decoder: Decoder, ingress: Ingress, bind: str, plan: str, max_frame: int,
                 streams: int, tls: Credentials | None = None,
                 control: Callable[[ControlRequest], ProcessState] | None = None) -> None:
        self.decoder = decoder
        self.plan = plan
        self.ingress = ingress
        self.stats = ReceiveStats()
        self.open_streams: set[tuple[str, str]] = set()  # (sender, lane) of the streams being served
        self._closed = threading.Event()
        self._lock = threading.Lock()
        # One thread per inbound stream: every peer keeps two streams open.
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=streams + 4, thread_name_prefix="recv"),
                                  options=server_options(max_frame), maximum_concurrent_rpcs=streams + 4)
        handler = grpc.stream_unary_rpc_method_handler(self._transfer, request_deserializer=None,
                                                        response_serializer=TransferSummary.SerializeToString)
        handlers = {"Transfer": handler}
        if control is not None:
            self._control = control
            handlers["Control"] = grpc.unary_unary_rpc_method_handler(
                self._command, request_deserializer=ControlRequest.FromString,
                response_serializer=ProcessState.SerializeToString)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("squall.v1.Squall", handlers),))
        # With TLS, a client without a certificate of this topology fails the handshake: it never
        # reaches _transfer, let alone the decoder.
        self.port = self.server.add_secure_port(bind, tls.server()) if tls else self.server.add_insecure_port(bind)
        if not self.port:
            raise OSError(f"cannot listen on {bind} for gRPC; is the port in use?")

    def start(self) -> None:
        self.server.start()

    def _transfer(self, frames, context: grpc.ServicerContext) -> TransferSummary:
        meta = dict(context.invocation_metadata())
        lane, sender = meta.get("squall-lane", ""), meta.get("squall-sender", "?")
        if lane not in (DATA, CONTROL):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"metadata squall-lane must be data or control, not {lane!r}")
        theirs = meta.get(PLAN_KEY, "")
        if theirs != self.plan:
            # A peer routing by another assignment would misdeliver tuples: refuse it until both
            # run the same spec (the end of a rolling update, or a fixed configuration).
            log.info("refusing the %s stream from %s: it runs plan %s, this process plan %s (a rolling "
                     "update in progress, or processes given different specs)", lane, sender, theirs or "?",
                     self.plan)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{sender} runs plan {theirs or '?'} but this process runs plan {self.plan}")
        context.send_initial_metadata(((PLAN_KEY, self.plan),))
        key = (sender, lane)
        with self._lock:
            self.open_streams.add(key)
        try:
            return self._serve(frames, context, key)
        finally:
            with self._lock:
                self.open_streams.discard(key)

    def _command(self, request: ControlRequest, context: grpc.ServicerContext) -> ProcessState:
        try:
            return self._control(request)
        except CommandError as exc:  # refused, with the reason: the process goes on as it was
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def _serve(self, frames, context: grpc.ServicerContext, key: tuple[str, str]) -> TransferSummary:
        sender, lane = key
        n = 0
        for frame in frames:
            try:
                items = self.decoder.decode(frame)
            except FrameError as exc:
                with self._lock:
                    self.stats.malformed += 1
                log.error("closing the %s stream from %s: malformed frame: %s", lane, sender, exc)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed frame: {exc}")
            with self._lock:
                self.stats.batches[key] = self.stats.batches.get(key, 0) + 1
                self.stats.bytes[key] = self.stats.bytes.get(key, 0) + len(frame)
            if not self.ingress.put(lane, items, closed=self._closed.is_set):
                break
            n += 1
        # How many frames this process took in: the sender counts the rest (closing, this one stopped
        # reading) as dropped, and fails their trees
        return TransferSummary(batches=n)

    def stop(self, grace: float = 1.0) -> None:
        self._closed.set()
        self.server.stop(grace).wait()
