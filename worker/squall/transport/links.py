"""Outgoing links: one long-lived gRPC client stream per (peer process, lane).

The scheduler thread hands encoded frames to a link's bounded queue; the link's own thread
streams them to the peer. A full queue refuses frames (backpressure into the executors). While
the peer is unreachable, frames are dropped and counted: the tuple trees they carried time out
and their spouts replay them, as in Storm when a worker dies.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Iterator

import grpc

from squall.proto.squall_pb2 import TransferSummary
from squall.transport.tls import SERVER_NAME, Credentials

log = logging.getLogger("squall.transport")

METHOD = "/squall.v1.Squall/Transfer"
PLAN_KEY = "squall-plan"
BACKOFF = (0.1, 2.0)  # seconds between attempts on a stream the peer refused: the least and the most
DATA, CONTROL = "data", "control"


# Frames that may wait for a link's thread: one. While it waits (the thread hands the one before to
# gRPC, or HTTP/2 flow control holds it), the next batch keeps growing in the transport's buffer: the
# busier a link, the larger its frames, so per-frame costs (threads, gRPC) fall as the load rises,
# and an idle link still sends at once. With room for 8, frames went out 3.6 trees small under load
# and cost the processes 2-4 times the CPU of the work they carried (docs/performance.md).
WAITING_FRAMES = 1
KEEPALIVE_MS = 10_000  # pings find a silently vanished or stopped peer (a partition, SIGSTOP) in ~15 s
KEEPALIVE_TIMEOUT_MS = 5_000


def channel_options(max_frame: int) -> list[tuple[str, int]]:
    """Client side: large frames, fast reconnects, keepalive pings."""
    return [
        ("grpc.max_send_message_length", max_frame),
        ("grpc.max_receive_message_length", max_frame),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
        # A replaced pod comes back under its name with a new IP: look the name up again within a
        # second of a failure, not gRPC's default 30 s (every pod replacement stalled its peers that long).
        ("grpc.dns_min_time_between_resolutions_ms", 1000),
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        *_ping_timeout(),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # A fixed HTTP/2 window: with BDP probing gRPC grows it to megabytes on loopback, which
        # buffers tens of thousands of tuples in flight and defeats backpressure.
        ("grpc.http2.bdp_probe", 0),
    ]


def server_options(max_frame: int) -> list[tuple[str, int]]:
    """Server side: accept the clients' keepalive pings (the default answers them with GOAWAY)."""
    return [
        ("grpc.max_send_message_length", max_frame),
        ("grpc.max_receive_message_length", max_frame),
        ("grpc.keepalive_permit_without_calls", 1),
        # pings of our own find a sender that vanished (its pod gone, no FIN): its stream closes and
        # stops counting as open, so readiness and the drain see the truth
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        *_ping_timeout(),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_MS // 2),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.http2.bdp_probe", 0),
    ]


def _ping_timeout() -> list[tuple[str, int]]:
    """How long a keepalive ping may go unanswered. gRPC (1.85) times its keepalive pings out after
    ``grpc.http2.ping_timeout_ms``, 60 s by default, whatever ``keepalive_timeout_ms`` says: a peer that
    stopped reading (SIGSTOP, a relay that stops forwarding) held its streams for 70 s, not 15."""
    return [("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS), ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS)]


class LinkStats:
    __slots__ = ("batches", "bytes", "dropped", "reconnects", "refused")

    def __init__(self) -> None:
        self.batches = self.bytes = self.dropped = self.reconnects = self.refused = 0


class PeerLink:
    """Streams frames to ``address`` on ``lane``, reconnecting for as long as the process lives."""

    def __init__(self, *, peer: str, address: str, lane: str, sender: str, plan: str, max_frame: int,
                 wake: Callable[[], None], dropped: Callable[[bytes], None],
                 tls: Credentials | None = None) -> None:
        self.peer, self.address, self.lane, self.sender, self.plan = peer, address, lane, sender, plan
        self.stats = LinkStats()
        self._frames: queue.Queue[bytes] = queue.Queue(WAITING_FRAMES)
        self._wake = wake
        self._dropped = dropped
        self._closed = threading.Event()
        self.connected = threading.Event()
        self.ever_connected = False
        options = channel_options(max_frame)
        if tls:  # peers are checked against the topology's CA, not the address dialled (pod IPs change)
            self._channel = grpc.secure_channel(address, tls.channel(),
                                                options=[*options, ("grpc.ssl_target_name_override", SERVER_NAME)])
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._thread = threading.Thread(target=self._run, name=f"link-{peer}-{lane}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def has_room(self) -> bool:
        """Whether :meth:`offer` will take a frame now (the scheduler thread is the only producer).

        Before the first connection frames wait; once the peer has been up, frames sent while it
        is unreachable are taken and dropped, as they would have died with it anyway.
        """
        if not self.connected.is_set():
            return self.ever_connected
        # The queue's length without its lock: this thread is the only producer, so it can only
        # be shorter than read, never longer.
        return len(self._frames.queue) < self._frames.maxsize

    def queued(self) -> int:
        return len(self._frames.queue)

    def offer(self, frame: bytes) -> None:
        """Queue a frame; call only after :meth:`has_room` said yes."""
        if not self.connected.is_set():
            self._drop(frame)
            return
        try:
            self._frames.put_nowait(frame)
        except queue.Full:  # the link broke and refilled in between: the frame dies with it
            self._drop(frame)

    def _stream(self, over: threading.Event) -> Iterator[bytes]:
        """The frames of one call, until that call is ``over``.

        gRPC keeps pulling a call's request iterator on its own thread; once the call is over it
        discards what it pulls. So the iterator of a finished call (refused by a peer of another plan,
        broken) must stop taking frames from the link's queue: before, each one stayed blocked there and
        took one frame of the next, accepted call, which then vanished, counted as sent.
        """
        frames, closed = self._frames, self._closed
        while not (closed.is_set() or over.is_set()):
            try:
                frame = frames.get(timeout=0.2)
            except queue.Empty:
                continue
            if over.is_set():  # the call ended while we waited: the frame dies with it, counted
                self._drop(frame)
                return
            self.stats.batches += 1
            self.stats.bytes += len(frame)
            self._wake()  # room in the queue: an executor parked on it may go on
            yield frame

    def _run(self) -> None:
        call = self._channel.stream_unary(METHOD, request_serializer=None,
                                          response_deserializer=TransferSummary.FromString)
        metadata = (("squall-lane", self.lane), ("squall-sender", self.sender), (PLAN_KEY, self.plan))
        ceiling = BACKOFF[0]
        while not self._closed.is_set():
            try:
                grpc.channel_ready_future(self._channel).result(timeout=1.0)
            except grpc.FutureTimeoutError:
                continue
            over = threading.Event()
            future = call.future(self._stream(over), metadata=metadata)
            future.add_done_callback(lambda _, over=over: over.set())
            # The peer answers with its plan id once it has accepted the stream (same plan).
            accepted = dict(future.initial_metadata() or ()).get(PLAN_KEY) == self.plan
            if accepted:
                ceiling = BACKOFF[0]
                if self.ever_connected:
                    self.stats.reconnects += 1
                    log.info("reconnected to %s (%s) on the %s lane", self.peer, self.address, self.lane)
                self.ever_connected = True
                self.connected.set()
            try:
                future.result()
            except grpc.RpcError as exc:
                if not self._closed.is_set():
                    log.warning("stream to %s (%s, %s lane) %s: %s", self.peer, self.address, self.lane,
                                "broke" if accepted else "refused", exc.details() or exc.code())
            finally:
                self.connected.clear()
                self._drop_queued()
            if not accepted:  # refused (another plan, a malformed frame): don't hammer the peer
                self.stats.refused += 1
                # Jittered: after a rescale every new pod is refused by the same old ones at once; with
                # the bare doubling they all retried in lockstep. A wait is drawn between the least and a
                # ceiling that doubles up to the most, so even at the most no two pods wait alike.
                ceiling = min(2 * ceiling, BACKOFF[1])
                self._closed.wait(random.uniform(BACKOFF[0], ceiling))

    def _drop_queued(self) -> None:
        while True:
            try:
                frame = self._frames.get_nowait()
            except queue.Empty:
                return
            self._drop(frame)

    def _drop(self, frame: bytes) -> None:
        """Count a frame that will never reach the peer and report it, so its trees fail now."""
        self.stats.dropped += 1
        self._dropped(frame)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)
        self._channel.close()
