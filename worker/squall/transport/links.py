"""Outgoing links: one long-lived gRPC client stream per (peer process, lane).

The scheduler thread hands encoded frames to a link's bounded :class:`Handoff`; the link's own thread
streams them to the peer. A full handoff refuses frames (backpressure into the executors). When a
stream breaks, the frames it had handed to gRPC that the peer may not have read
(:class:`InFlight`) are dropped and counted, and the tuple trees they carried fail at once (their
spouts replay them). Frames offered while the peer is unreachable are dropped and counted too, but
their trees fail once the link is back (:meth:`PeerLink.offer`), or at once in a process that drains
to exit (:meth:`PeerLink.stop_holding`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
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
# The receiver's HTTP/2 window per stream (gRPC's default, set so that UNREAD_BOUND rests on it; a
# fixed window, as BDP probing is off). What a sender has written beyond what the peer's code has
# read stays below about 1.5 windows (measured, gRPC 1.85: 96-98 KiB of messages for 64 KiB).
STREAM_WINDOW = 64 * 1024
UNREAD_BOUND = 4 * STREAM_WINDOW  # bytes written after a frame beyond which the peer surely read it
MESSAGE_PREFIX = 5  # gRPC's length prefix: a message takes 5 bytes more of the window than its frame
KEEPALIVE_MS = 10_000  # pings find a silently vanished or stopped peer (a partition, SIGSTOP) in ~15 s
KEEPALIVE_TIMEOUT_MS = 5_000
# What a link that is down keeps of the frames offered to it, to fail their trees once it is back:
# tens of thousands of tuples, many times what max spout pending lets a topology send into an outage
# (a process has two links per peer, so all of them down hold 8 MiB per peer at most). Beyond it (no
# max spout pending) trees time out instead.
HELD_BYTES = 4 * 1024 * 1024
CONNECTIVITY_POLL = 0.25  # s: gRPC's connectivity polling period (0.2 s, grpc/_channel.py), and a margin


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
        # gRPC's default, relied on: a local run's supervisor holds the port (SO_REUSEPORT) while the
        # process is away, see squall.process.supervisor.reserve_ports
        ("grpc.so_reuseport", 1),
        # pings of our own find a sender that vanished (its pod gone, no FIN): its stream closes and
        # stops counting as open, so readiness and the drain see the truth
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        *_ping_timeout(),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_MS // 2),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_WINDOW),
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


class InFlight:
    """The frames one call has handed to gRPC that the peer may not have read yet.

    gRPC takes the next frame of a stream only once it has written the one before (see
    ``_consume_request_iterator`` in ``grpc/_channel.py``), and HTTP/2 flow control lets a sender
    write only a window's worth of bytes beyond what the peer's code has read. So a frame with more
    than :data:`UNREAD_BOUND` bytes written after it was read, and is forgotten; the last few stay
    here. When the call ends, :meth:`end` says which of them the peer did not read: exactly, from the
    count the peer answers a clean end with; all of them, as possibly lost, when the call broke. A
    frame the peer did read but that is reported anyway fails trees that may have completed: their
    spouts replay them (at least once), and a FAIL for a tree already decided is ignored.

    An HTTP/2 proxy between the pods (a service mesh's sidecar) keeps windows of its own: frames it
    had taken when a stream broke are beyond this bound, and their trees time out instead.
    """

    __slots__ = ("frames", "bytes", "taken", "over", "_lock")

    def __init__(self) -> None:
        self.frames: deque[bytes] = deque()
        self.bytes = 0  # of the messages in ``frames``
        self.taken = 0  # frames handed to gRPC on this call
        self.over = threading.Event()  # the call has ended: its iterator takes no more frames
        self._lock = threading.Lock()

    def add(self, frame: bytes) -> bool:
        """Record ``frame`` as handed to gRPC (on gRPC's thread); False if the call is over already."""
        with self._lock:
            if self.over.is_set():
                return False
            frames, size = self.frames, self.bytes
            # gRPC asks for this frame once it has written the ones before: an oldest frame with more
            # than the bound written after it has been read
            while frames and size - len(frames[0]) - MESSAGE_PREFIX > UNREAD_BOUND:
                size -= len(frames.popleft()) + MESSAGE_PREFIX
            frames.append(frame)
            self.bytes = size + len(frame) + MESSAGE_PREFIX
            self.taken += 1
            return True

    def end(self, read: int | None) -> list[bytes]:
        """End the call; the frames the peer did not read: those after the first ``read`` (the count the
        peer answered a clean end with), or, if the call broke (``read`` None), every one it may not have."""
        with self._lock:
            self.over.set()
            frames = list(self.frames)
        if read is None:
            return frames
        return frames[max(0, len(frames) - (self.taken - read)):] if self.taken > read else []


class Handoff:
    """The frames waiting for a link's current call (at most :data:`WAITING_FRAMES`), between the
    scheduler thread that offers them and the gRPC thread that pulls the call's request iterator.

    A taker waits for a frame or for its call to end, whichever comes first, and a call that has ended
    takes nothing: gRPC may still pull the iterator of a call that is over (refused by a peer of another
    plan, broken), and it discards what it pulls. With a plain queue that iterator stayed blocked in
    ``get`` for up to its timeout and took the first frame meant for the next, accepted call.
    """

    __slots__ = ("frames", "_cond")

    def __init__(self) -> None:
        self.frames: deque[bytes] = deque()
        self._cond = threading.Condition(threading.Lock())

    def put(self, frame: bytes) -> bool:
        """Add ``frame``; False if the handoff is full."""
        with self._cond:
            if len(self.frames) >= WAITING_FRAMES:
                return False
            self.frames.append(frame)
            self._cond.notify()
            return True

    def take(self, over: Callable[[], bool]) -> bytes | None:
        """The next frame, waiting for it; None once ``over()`` says the taker's call has ended."""
        with self._cond:
            while not over():  # checked first: a call that ended takes nothing, even if a frame waits
                if self.frames:
                    return self.frames.popleft()
                self._cond.wait()
            return None

    def wake(self) -> None:
        """Let every waiting taker look at ``over`` again (a call ended, the link closes)."""
        with self._cond:
            self._cond.notify_all()

    def drain(self) -> list[bytes]:
        with self._cond:
            frames, self.frames = list(self.frames), deque()
            return frames


class PeerLink:
    """Streams frames to ``address`` on ``lane``, reconnecting for as long as the process lives."""

    def __init__(self, *, peer: str, address: str, lane: str, sender: str, fingerprint: str, max_frame: int,
                 wake: Callable[[], None], dropped: Callable[[bytes], None],
                 down: Callable[[str], None] = lambda peer: None, tls: Credentials | None = None) -> None:
        self.peer, self.address, self.lane, self.sender, self.fingerprint = peer, address, lane, sender, fingerprint
        self.stats = LinkStats()
        self._handoff = Handoff()
        self._wake = wake
        self._dropped = dropped
        self._down = down  # told the peer's name each time the link goes down
        self._closed = threading.Event()
        self.connected = threading.Event()
        self.ever_connected = False
        self._held: deque[bytes] = deque()  # dropped while down; their trees fail once the link is back
        self._held_bytes = 0
        self._holding = True  # False once the process drains to exit
        self._held_lock = threading.Lock()  # the scheduler thread holds frames, the link's thread lets go
        options = channel_options(max_frame)
        if tls:  # peers are checked against the topology's CA, not the address dialled (pod IPs change)
            self._channel = grpc.secure_channel(address, tls.channel(),
                                                options=[*options, ("grpc.ssl_target_name_override", SERVER_NAME)])
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._thread = threading.Thread(target=self._run, name=f"tx-{peer}-{lane[0]}", daemon=True)
        self._watched = float("-inf")  # when the last channel-ready future was done (see close())

    def start(self) -> None:
        self._thread.start()

    def has_room(self) -> bool:
        """Whether :meth:`offer` will take a frame now (the scheduler thread is the only producer).

        Before the first connection frames wait; once the peer has been up, frames sent while it
        is unreachable are taken and dropped, as they would have died with it anyway.
        """
        if not self.connected.is_set():
            return self.ever_connected
        # The length without the lock: this thread is the only producer, so it can only be shorter
        # than read, never longer.
        return len(self._handoff.frames) < WAITING_FRAMES

    def queued(self) -> int:
        return len(self._handoff.frames)

    def offer(self, frame: bytes) -> None:
        """Queue a frame; call only after :meth:`has_room` said yes.

        While the peer is down the frame is dropped, and its trees fail when the link is back (or
        closes), not now: a spout that replays a failed tree at once would send it into the same dead
        link, fail it again, and so on as fast as the CPU goes. On k8s-local that loop failed 40,000
        trees a second for as long as a worker pod was away, and starved the node enough to delay the
        replacement pod by a minute. Held, the trees stay pending and max spout pending stops the
        spout, as Storm's timeouts would; once the peer is back they are replayed at once.
        """
        if not self.connected.is_set():
            self._hold(frame)
            return
        if not self._handoff.put(frame):  # the link broke and refilled in between: the frame dies with it
            self._drop(frame)

    def _stream(self, call: InFlight) -> Iterator[bytes]:
        """The frames of one call, until that call is over (:class:`Handoff` says why it must stop)."""
        closed, over = self._closed, call.over

        def ended() -> bool:
            return over.is_set() or closed.is_set()

        while (frame := self._handoff.take(ended)) is not None:
            if not call.add(frame):  # the call ended right after the take: the frame dies with it, counted
                self._drop(frame)
                return
            self.stats.batches += 1
            self.stats.bytes += len(frame)
            self._wake()  # room in the handoff: an executor parked on it may go on
            yield frame

    def _end_call(self, call: InFlight) -> None:
        call.over.set()
        self._handoff.wake()

    def _run(self) -> None:
        call = self._channel.stream_unary(METHOD, request_serializer=None,
                                          response_deserializer=TransferSummary.FromString)
        metadata = (("squall-lane", self.lane), ("squall-sender", self.sender), (PLAN_KEY, self.fingerprint))
        ceiling = BACKOFF[0]
        while not self._closed.is_set():
            ready = grpc.channel_ready_future(self._channel)
            try:
                ready.result(timeout=1.0)
            except grpc.FutureTimeoutError:
                # Cancelled, it stops watching the channel: each one left behind kept gRPC's connectivity
                # polling thread going while the peer was down.
                ready.cancel()
                continue
            finally:
                self._watched = time.monotonic()
            in_flight = InFlight()
            future = call.future(self._stream(in_flight), metadata=metadata)
            future.add_done_callback(lambda _, call=in_flight: self._end_call(call))
            # The peer answers with its fingerprint once it has accepted the stream (the same).
            accepted = dict(future.initial_metadata() or ()).get(PLAN_KEY) == self.fingerprint
            if accepted:
                ceiling = BACKOFF[0]
                if self.ever_connected:
                    self.stats.reconnects += 1
                    log.info("reconnected to %s (%s) on the %s lane", self.peer, self.address, self.lane)
                self.ever_connected = True
                self.connected.set()
                self._let_go()
            read = None
            # Waiting on the call's own condition (future.result()) would wake this thread at every
            # frame's event, for nothing: the done callback's event wakes it once, at the end.
            in_flight.over.wait()
            try:
                read = future.result().batches  # the peer read them all, or (closing) this many
            except grpc.RpcError as exc:
                if not self._closed.is_set():
                    log.warning("stream to %s (%s, %s lane) %s: %s", self.peer, self.address, self.lane,
                                "broke" if accepted else "refused", exc.details() or exc.code())
            finally:
                # The frames the call took are accounted for before the link counts as down: until
                # then a sender waits for room (the call takes no more), so once a send has been
                # dropped for the link being down, every frame before it has been reported.
                unread = in_flight.end(read)
                if unread and not self._closed.is_set():
                    log.warning("%d frames to %s (%s lane) may not have arrived: their trees fail now",
                                len(unread), self.peer, self.lane)
                for frame in unread:
                    self._drop(frame)
                self._drop_queued()
                self.connected.clear()
                self._drop_queued()
                if accepted:
                    self._down(self.peer)
            if not accepted:  # refused (another plan, a malformed frame): don't hammer the peer
                self.stats.refused += 1
                # Jittered: after a rescale every new pod is refused by the same old ones at once; with
                # the bare doubling they all retried in lockstep. A wait is drawn between the least and a
                # ceiling that doubles up to the most, so even at the most no two pods wait alike.
                ceiling = min(2 * ceiling, BACKOFF[1])
                self._closed.wait(random.uniform(BACKOFF[0], ceiling))

    def stop_holding(self) -> None:
        """Fail the trees of held frames now, and of frames offered while the peer is down from now on.

        For a process that drains to exit: its spouts no longer emit, so no replay can loop into the
        dead link, and it cannot wait for the peer to come back (a peer that drained and left before
        it, as a topology's processes stop one by one); held, the trees would keep it up until their
        timeout.
        """
        self._holding = False
        self._let_go()

    def _hold(self, frame: bytes) -> None:
        if not self._holding:
            self._drop(frame)
            return
        self.stats.dropped += 1
        with self._held_lock:
            if self._held_bytes + len(frame) <= HELD_BYTES:
                self._held.append(frame)
                self._held_bytes += len(frame)
        if self.connected.is_set():  # it came back after the check in offer(): it may have let go already
            self._let_go()

    def _let_go(self) -> None:
        """Fail the trees of the frames held while the peer was down (it is back, or the link closes)."""
        with self._held_lock:
            held, self._held, self._held_bytes = self._held, deque(), 0
        if held:
            log.info("failing the trees of %d frames offered while %s (%s lane) was unreachable", len(held),
                     self.peer, self.lane)
        for frame in held:
            self._dropped(frame)

    def _drop_queued(self) -> None:
        for frame in self._handoff.drain():
            self._drop(frame)

    def _drop(self, frame: bytes) -> None:
        """Count a frame that will never reach the peer and report it, so its trees fail now."""
        self.stats.dropped += 1
        self._dropped(frame)

    def stop(self) -> None:
        """Begin closing: the stream ends at once (within a second while the peer is unreachable).
        :meth:`close` waits for it; a process stops every link first, so they end together."""
        self._closed.set()
        self._handoff.wake()

    def close(self) -> None:
        self.stop()
        self._thread.join(timeout=2)
        # gRPC's thread that watched the channel for the ready future polls on for up to 0.2 s after
        # the future is done; a channel closed under it raises "Channel closed!" in that thread.
        time.sleep(max(0.0, self._watched + CONNECTIVITY_POLL - time.monotonic()))
        self._channel.close()
        self._let_go()  # the trees of held frames fail now: the link will not be back
