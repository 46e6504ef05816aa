"""The receiving side: a gRPC server whose ``Transfer`` streams feed the ingress, and which answers the
``Control`` commands of a rebalance (:mod:`squall.process.control`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
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


class _Stream:
    """One inbound stream while it is served: the frames taken in so far, and whether it is over."""

    __slots__ = ("key", "taken", "ended", "error", "over", "lock")

    def __init__(self, key: tuple[str, str]) -> None:
        self.key = key  # (sender, lane)
        self.taken = 0  # frames put into the ingress
        self.ended = False  # the count is answered: no frame is taken in after it
        self.error: str | None = None  # a malformed frame: the stream is closed with this
        self.over = threading.Event()  # the peer ended the stream, it broke, or this process stops
        self.lock = threading.Lock()  # the reader takes a frame in, or the handler reads the count


class Receiver:
    def __init__(self, *, decoder: Decoder, ingress: Ingress, bind: str, fingerprint: str, senders: frozenset[str],
                 max_frame: int, streams: int, tls: Credentials | None = None,
                 control: Callable[[ControlRequest], ProcessState] | None = None) -> None:
        self.decoder = decoder
        self.fingerprint = fingerprint
        self.senders = senders  # the processes of the plan that stream to this one
        self.ingress = ingress
        self.stats = ReceiveStats()
        # (sender, lane) → streams of it being served: a sender's new stream can open before its old one ends
        self._open: Counter[tuple[str, str]] = Counter()
        #: sender → streams of it accepted so far: a new one means its link to this process was down
        #: (and it forgot what this process told it, see Transport._tell)
        self.accepted: Counter[str] = Counter()
        self._served: set[_Stream] = set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        # The streams stop_taking answered whose senders have not been back since (see stop).
        self._unheard: set[tuple[str, str]] = set()
        self._answered_at = 0.0
        self._heard = threading.Condition(self._lock)
        # One thread per inbound stream: every peer keeps two streams open.
        self._pool = futures.ThreadPoolExecutor(max_workers=streams + 4, thread_name_prefix="recv")
        self.server = grpc.server(self._pool, options=server_options(max_frame), maximum_concurrent_rpcs=streams + 4)
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
        if self._closed.is_set():  # refused before it is accepted: the sender backs off and retries
            log.debug("refusing the %s stream from %s: this process is stopping", lane, sender)
            with self._heard:  # a sender starts a new stream once it has read the answer to its last
                self._unheard.discard((sender, lane))
                self._heard.notify_all()
            context.abort(grpc.StatusCode.UNAVAILABLE, "this process is stopping")
        if lane not in (DATA, CONTROL):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"metadata squall-lane must be data or control, not {lane!r}")
        theirs = meta.get(PLAN_KEY, "")
        if theirs != self.fingerprint:
            # A peer routing by another assignment would misdeliver tuples: refuse it until both
            # run the same spec (the end of a rolling update, or a fixed configuration).
            log.info("refusing the %s stream from %s: it runs plan %s, this process plan %s (a rolling "
                     "update in progress, or processes given different specs)", lane, sender, theirs or "?",
                     self.fingerprint)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{sender} runs plan {theirs or '?'} but this process runs plan {self.fingerprint}")
        if sender not in self.senders:
            # Only the plan's processes that send here may: another name (a stray or misconfigured client
            # holding the topology's certificate, or any client without TLS) would become a metric's
            # label and a key kept for good, one more for each name it made up.
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"metadata squall-sender {sender[:64]!r} names no process of plan {self.fingerprint} that "
                          f"sends to this one ({', '.join(sorted(self.senders)) or 'none'})")
        context.send_initial_metadata(((PLAN_KEY, self.fingerprint),))
        key = (sender, lane)
        with self._lock:
            self._open[key] += 1
            self.accepted[sender] += 1
        try:
            return self._serve(frames, context, key)
        finally:
            with self._lock:
                self._open[key] -= 1
                if not self._open[key]:
                    del self._open[key]

    @property
    def open_streams(self) -> set[tuple[str, str]]:
        """(sender, lane) of the streams being served, from any thread."""
        with self._lock:
            return set(self._open)

    def _command(self, request: ControlRequest, context: grpc.ServicerContext) -> ProcessState:
        try:
            return self._control(request)
        except CommandError as exc:  # refused with the reason, or not carried out: the process goes on as it was
            context.abort(grpc.StatusCode.INVALID_ARGUMENT if exc.refused else grpc.StatusCode.UNAVAILABLE, str(exc))

    def _serve(self, frames, context: grpc.ServicerContext, key: tuple[str, str]) -> TransferSummary:
        """Answer the stream with how many frames this process took in; the sender counts the rest as
        dropped, and fails their trees. A thread of the stream's own reads it, so that this one can
        answer when the process stops, too: waiting for a frame in gRPC's iterator cannot be
        interrupted, and a stream cut instead made its sender fail the trees of every frame it could
        not be sure was read (its last ones, read long before)."""
        stream = _Stream(key)
        with self._lock:
            self._served.add(stream)
        if self._closed.is_set():  # stop() may have gone through the streams before this one was added
            stream.over.set()
        threading.Thread(target=self._read, args=(frames, stream), name=f"rx-{key[0]}-{key[1][0]}",
                         daemon=True).start()
        try:
            stream.over.wait()
            with stream.lock:
                stream.ended = True
                taken = stream.taken
        finally:
            with self._lock:
                self._served.discard(stream)
        if stream.error is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed frame: {stream.error}")
        return TransferSummary(batches=taken)

    def _read(self, frames, stream: _Stream) -> None:
        key = stream.key
        sender, lane = key
        try:
            for frame in frames:
                try:
                    items = self.decoder.decode(frame)
                except Exception as exc:  # noqa: BLE001 - a decoder bug is no reason for the reader to die unseen
                    error = str(exc) if isinstance(exc, FrameError) else f"{type(exc).__name__}: {exc}"
                    with self._lock:
                        self.stats.malformed += 1
                    log.error("closing the %s stream from %s: malformed frame: %s", lane, sender, error)
                    stream.error = error
                    return
                with self._lock:
                    self.stats.batches[key] = self.stats.batches.get(key, 0) + 1
                    self.stats.bytes[key] = self.stats.bytes.get(key, 0) + len(frame)
                with stream.lock:  # taken in and counted together, or neither once the count is answered
                    if stream.ended or not self.ingress.put(lane, items, closed=self._closed.is_set):
                        return
                    stream.taken += 1
        except grpc.RpcError:  # the stream broke, or ended with this process's answer
            pass
        finally:
            stream.over.set()

    def stop_taking(self) -> None:
        """Take no more frames in: every stream is answered with the count it took in (its sender fails
        the trees of the rest), and new streams are refused. Once this returns, no frame is on its way
        into the ingress: what it holds is all this process was sent and must deliver."""
        self._closed.set()  # a reader that has not begun putting its frame now never will
        with self._lock:
            streams = list(self._served)
            if streams and not self._unheard:
                self._answered_at = time.monotonic()
            self._unheard.update(stream.key for stream in streams)
        for stream in streams:
            stream.over.set()
            with stream.lock:  # a reader that was putting a frame has put it, and counted it
                pass

    def stop(self, grace: float = 1.0) -> None:
        """Answer every stream (:meth:`stop_taking`), then close. The connections stay open until each
        sender answered has come back (it read its answer), for at most ``grace`` after the answers:
        closed at once, a socket the sender was still writing to was reset, and with it the answer it
        had not yet read; the sender then took the stream for broken and failed the trees of every
        frame it could not be sure had arrived."""
        self.stop_taking()
        with self._heard:
            self._heard.wait_for(lambda: not self._unheard, timeout=self._answered_at + grace - time.monotonic())
        self.server.stop(grace).wait()
        self._pool.shutdown(wait=False)  # gRPC leaves its threads to the pool's owner: each switch leaked them
