"""This process's links to its peers: outgoing items batched per (peer, lane), incoming frames received."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack

from squall.executor.base import Remote, Transfer
from squall.proto.squall_pb2 import Batch, ControlRequest, ProcessState
from squall.transport.codec import Decoder, encode_congestion, encode_verdicts, lost_trees
from squall.transport.ingress import Ingress
from squall.transport.links import CONTROL, DATA, STREAM_WINDOW, PeerLink
from squall.transport.outbox import YOUNG_SECONDS, AckerOutbox, DataOutbox, Outbox
from squall.transport.server import Receiver
from squall.transport.tls import Credentials
from squall.tuples import Tuple

try:
    import cython

    _COMPILED = cython.compiled
except ImportError:  # interpreted, with no Cython installed (a SQUALL_PURE_PYTHON=1 install)
    _COMPILED = False

# The frames' format (squall.proto). Peers agree on it as on the spec: a process announces its spec's
# fingerprint as ``<fingerprint>+wire<N>``, so during an upgrade that changes the format, processes of two versions
# refuse each other's streams (their trees fail and replay once both sides run one version) instead
# of reading frames they cannot understand.
WIRE_FORMAT = 3
# The fewest bytes an item takes in a frame (an acker message; a tuple takes more): what a peer sends to a
# congested task before it hears is bounded by its stream's window in items of this size, and two batches
# (the one its link holds, the one it builds).
SMALLEST_ITEM = 21
# The flusher thread's interval when the flush interval is shorter (0: a batch goes at the end of each round):
# a wake of its own every millisecond at most.
FLUSHER_FLOOR = 0.001
log = logging.getLogger("squall.transport")


def wire_fingerprint(fingerprint: str) -> str:
    """What a process's streams carry to say what they run: its spec's fingerprint and the frames' format."""
    return f"{fingerprint}+wire{WIRE_FORMAT}"


class _Boxes:
    """The outboxes of a task of another process: tuples go to ``data``, the rest to ``control``
    (compiled, typed fields: the hot path reads an ``Outbox`` without checking its class)."""

    def __init__(self, data: Outbox, control: Outbox) -> None:
        self.data, self.control = data, control


class Transport(Remote):
    """This process's links to its peers: batches outgoing items, and receives incoming frames.

    ``owner`` maps every task not in this process onto its process name, ``ackers`` names the acker
    processes among them; ``acker_via`` maps the acker tasks whose messages go through a worker, their
    home, onto that worker (:attr:`~squall.topology.assignment.Assignment.acker_homes`), and
    ``forwards`` names the acker tasks whose home this worker is; ``addresses``
    maps process names onto ``host:port``. ``fingerprint`` is the spec's
    (:meth:`~squall.topology.spec.TopologySpec.fingerprint`): streams are refused between processes of different
    fingerprints, or of different
    :data:`WIRE_FORMAT`. ``control`` answers a
    rebalance's commands (:mod:`squall.process.control`), whatever the plan of who sends them.
    """

    def __init__(self, *, name: str, fingerprint: str, owner: dict[int, str], ackers: frozenset[str],
                 addresses: dict[str, str], senders: frozenset[str], decoder: Decoder, bind: str, batch_size: int,
                 flush_interval: float, max_frame: int, tls: Credentials | None = None,
                 control: Callable[[ControlRequest], ProcessState] | None = None,
                 acker_via: dict[int, str] | None = None, forwards: frozenset[int] = frozenset(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        fingerprint = self.fingerprint = wire_fingerprint(fingerprint)
        # The peers that keep streams open to us: until they all have, what they send may be dropped.
        self._inbound = {(peer, lane) for peer in senders for lane in (DATA, CONTROL)}
        self.owner = owner
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._due = float("inf")  # when the oldest batch the last flush held back must go
        self.clock = clock
        self._wake: Callable[[], None] = lambda: None
        peers = sorted(set(owner.values()))
        #: (spout task, root) of trees whose frames were dropped: the runtime fails them at once
        #: (appended on link threads, taken on the scheduler thread)
        self.lost: deque[tuple[int, int]] = deque()
        # Set while a batch waits for room in its link: only then does a link taking a frame wake the loop.
        self.waiting_room = False
        self.links = {(p, lane): PeerLink(peer=p, address=addresses[p], lane=lane, sender=name, fingerprint=fingerprint,
                                          max_frame=max_frame, wake=self._room,
                                          dropped=self._dropped, down=self._down, tls=tls)
                      for p in peers for lane in (DATA, CONTROL)}
        # The control lane carries acker messages to ackers and verdicts to workers; the data lane
        # tuples, and acker messages for the ackers whose home its worker is.
        # An acker whose home this worker is gets every message of its trees from here: its young trees
        # can wait here long (see AckerOutbox), the others' only for a round.
        homes = {owner[task] for task in forwards}
        self._outboxes = {key: DataOutbox(link, batch_size, max_frame) if key[1] == DATA else
                          AckerOutbox(link, batch_size, YOUNG_SECONDS if key[0] in homes else 0.0)
                          if key[0] in ackers else Outbox(link, encode_verdicts)
                          for key, link in self.links.items()}
        # (data outboxes too: they fold the acker messages they forward, and never drop a tree they complete)
        self._acker_boxes = [box for box in self._outboxes.values() if isinstance(box, AckerOutbox)]
        for box in self._acker_boxes:  # trees kept before the first round are kept since now, not since 0
            box.expire(clock())
        #: task → the (data, control) outboxes of its process, or of the worker it is reached through:
        #: one lookup per item sent
        to = {task: _Boxes(self._outboxes[(p, DATA)], self._outboxes[(p, CONTROL)]) for task, p in owner.items()}
        to |= {task: _Boxes(self._outboxes[(home, DATA)], self._outboxes[(home, DATA)])
               for task, home in (acker_via or {}).items()}
        # indexed by task id (None: a task of this process): no task id boxed and hashed per item
        self._to: list[_Boxes | None] = [to.get(task) for task in range(max(to, default=-1) + 1)]
        # task → 1 while its process says it is congested: sends to it wait in their executors' overflow
        # (written by server threads as peers say so, and link threads as a peer goes away)
        self._congested = bytearray(len(self._to))
        decoder.on_congestion = self._heard
        # This process's congestion, for the peers that send to it (see _tell): its tasks' last state as
        # a frame, a version per change, and what each sender's control link was told: (version, its
        # reconnects, the sender's streams this process accepted).
        self._state = b""
        self._version = 0
        self._told = {self.links[(peer, CONTROL)]: (0, 0, 0) for peer in senders if (peer, CONTROL) in self.links}
        self._unsettled = False
        # The tasks whose congestion this process tells its peers (see _tell): its own, known once attached,
        # and the acker tasks it forwards for, since their messages from other workers wait here.
        self._tasks: list[int] = []
        self._forwards = forwards
        self.ingress: Ingress | None = None
        self.receiver: Receiver | None = None
        self._decoder, self._bind, self._max_frame, self._tls, self._control = decoder, bind, max_frame, tls, control
        # Every process that streams to us, not only those we send to (an acker sends only to its spouts'
        # workers, and every worker streams to it): two streams each, and room for each sender's new two
        # to open before its old ones end (a reconnect). Sized from ours alone, an acker of 5 workers
        # refused streams for good, and its spouts' worker never activated.
        self._streams = 4 * len(set(peers) | senders) + 2
        self._senders = senders
        # The flusher thread (see _flusher) and its hand-off with the scheduler thread
        self._round = clock()  # when the scheduler thread last flushed
        self._inside = 0  # calls of the scheduler thread into this transport under way (they nest)
        self._claimed = False  # the flusher flushes: a call of the scheduler's waits for it
        self._lock = threading.Lock()
        self._kick = threading.Event()
        self._closed = False
        self._flusher = threading.Thread(target=self._flusher_loop, name="flusher", daemon=True)

    def _room(self) -> None:
        """On a link thread: the link took a frame and has room again. The loop needs to know only if a
        batch waits for that room; otherwise the wake would cost a sleeping loop a round for nothing."""
        if self.waiting_room:
            self._wake()
            self._kick.set()  # the scheduler thread may be held in a callback: the flusher sends it then

    def _dropped(self, frame: bytes) -> None:
        """On a link thread: a frame will never arrive; its trees should fail now, not at their timeout."""
        trees = lost_trees(frame)
        if trees:
            self.lost.extend(trees)
            self._wake()

    def _heard(self, state: dict[int, bool]) -> None:
        """On a server thread: a peer says which of its tasks are congested."""
        flags, to = self._congested, self._to
        cleared = False
        for task, congested in state.items():
            if 0 <= task < len(to) and to[task] is not None:
                cleared = cleared or (flags[task] and not congested)
                flags[task] = congested
        if cleared:  # executors that wait to send to those tasks may go on
            self._wake()

    def _down(self, peer: str) -> None:
        """On a link thread: ``peer`` is unreachable. What waits for its tasks goes to the link, which holds
        it and fails its trees once the peer is back (see PeerLink.offer); the peer says again if it is congested.
        The tasks reached through it (their boxes are its) are the peer's own and the acker tasks it is the home of."""
        flags = self._congested
        cleared = False
        for task, boxes in enumerate(self._to):
            if boxes is not None and flags[task] and boxes.data.link.peer == peer:
                flags[task] = 0
                cleared = True
        if cleared:
            self._wake()

    def congested(self) -> list[int]:
        """Tasks of other processes that this process sends nothing to for now (their process said so)."""
        return [task for task, flag in enumerate(self._congested) if flag]

    def attach(self, *, transfer: Transfer, wake: Callable[[], None], frames: int, flusher: bool = True) -> None:
        """Connect to the runtime whose ``transfer`` holds the inboxes, and start listening and connecting;
        ``flusher``: the runtime runs user callbacks (spouts, bolts), which may hold its thread (see
        :meth:`_flusher_loop`); an acker's runs none."""
        self._wake = wake
        self._tasks = sorted({*transfer.inboxes, *self._forwards})
        # What the backlogs may hold before the lanes take no more frames (see squall.transport.ingress): enough
        # that peers who heed congestion never reach it: an inbox's worth per task of this process before it
        # is congested, and what each peer's two streams may send before it hears.
        in_flight = STREAM_WINDOW // SMALLEST_ITEM + 2 * self.batch_size
        limit = len(self._tasks) * transfer.capacity + len(self._inbound) * in_flight
        self.ingress = Ingress(transfer=transfer, wake=wake, frames=frames, limit=limit)
        for box in self._acker_boxes:
            box.transfer = transfer
        self.receiver = Receiver(decoder=self._decoder, ingress=self.ingress, bind=self._bind,
                                 fingerprint=self.fingerprint, senders=self._senders, max_frame=self._max_frame,
                                 streams=self._streams, tls=self._tls, control=self._control)
        self.receiver.start()
        for link in self.links.values():
            link.start()
        if flusher:
            self._flusher.start()

    def all_connected(self) -> bool:
        """Every link to a peer is up, and every peer that sends to us has its streams open."""
        return self.receiver is not None and all(up for *_, up in self.connections())

    def connections(self) -> list[tuple[str, str, str, bool]]:
        """(peer, lane, direction, up) of each link to a peer (``out``) and each stream a peer should
        open to us (``in``), from any thread (``squall_transport_connected``; readiness)."""
        # a copy: the metrics thread asks while server threads open and close streams
        open_streams = self.receiver.open_streams if self.receiver else set()
        out = [(peer, lane, "out", link.connected.is_set()) for (peer, lane), link in self.links.items()]
        return out + [(peer, lane, "in", (peer, lane) in open_streams) for peer, lane in sorted(self._inbound)]

    def missing(self) -> list[str]:
        """Peers not connected yet, either way (for the log)."""
        return sorted({f"to {peer} ({self.links[peer, lane].address})" if direction == "out" else f"from {peer}"
                       for peer, lane, direction, up in self.connections() if not up})

    def unsent(self) -> int:
        """Items batched or queued here and not yet handed to gRPC."""
        return (sum(box.size for box in self._outboxes.values()) + sum(box.kept() for box in self._acker_boxes)
                + sum(link.queued() for link in self.links.values()))

    def undelivered(self) -> int:
        """Frames and items received from peers and not yet in an inbox."""
        return self.ingress.waiting() if self.ingress else 0

    def stop_receiving(self) -> None:
        """Take no more frames in (see :meth:`Receiver.stop_taking`); what the ingress holds then is still
        delivered."""
        if self.receiver:
            self.receiver.stop_taking()

    def stop_holding(self) -> None:
        """This process drains to exit: what its links cannot deliver fails now (see :meth:`PeerLink.stop_holding`)."""
        for link in self.links.values():
            link.stop_holding()

    @property
    def completed(self) -> int:
        """Trees completed in this process, their acker never told (see AckerOutbox)."""
        return sum(box.completed for box in self._acker_boxes)

    @property
    def last_input(self) -> float:
        return self.ingress.last_input if self.ingress else float("-inf")

    # -- the scheduler thread's side -------------------------------------------------------
    #
    # Each call here may find the flusher thread flushing for the scheduler (see _flusher_loop): it waits
    # for the flush to end, since both would change the same batches.

    def _enter(self) -> None:
        self._inside += 1
        if self._claimed:
            with self._lock:
                pass

    def try_send(self, task: int, item: Any) -> bool:
        self._enter()
        try:
            boxes = self._boxes(task)
            if self._congested[task]:
                return False
            box = boxes.data if type(item) is Tuple else boxes.control
            size = self._room_in(box)
            if size < 0:
                return False
            box.add(item)
            self._added(box, size)
            return True
        finally:
            self._inside -= 1

    def try_message(self, task: int, kind: int, root: int, val: int, spout: int) -> bool:
        self._enter()
        try:
            box = self._boxes(task).control
            if self._congested[task]:
                return False
            size = self._room_in(box)
            if size < 0:
                return False
            box.message(kind, root, val, spout)
            self._added(box, size)
            return True
        finally:
            self._inside -= 1

    def _boxes(self, task: int) -> _Boxes:
        boxes = self._to[task] if 0 <= task < len(self._to) else None
        if boxes is None:
            raise KeyError(f"task {task} is not a task of another process")
        return boxes

    def _room_in(self, box: Outbox) -> int:
        """The items in ``box``'s batch before the next is added (0 once a full batch went out); -1 when the
        batch is full and its link busy: backpressure."""
        size = box.size
        if size >= self.batch_size:
            if not self._flush(box):
                return -1
            size = 0
        return size

    def _added(self, box: Outbox, size: int) -> None:
        """An item was added to ``box``, whose batch held ``size`` before."""
        # Only an item that went into the batch counts: a young tree's acker messages are kept, not
        # batched, and a folded message takes no room.
        if box.size > size:
            if not size:  # a new batch
                since = box.since = self.clock()
                # due by then, even if this round never ends (the flusher sends it, see _flusher_loop)
                if since + self.flush_interval < self._due:
                    self._due = since + self.flush_interval
            # The clock is read every 32 items only: the end of each scheduler round flushes anyway.
            elif not box.size & 31 and self.clock() - box.since >= self.flush_interval:
                self._flush(box)

    def _flush(self, box: Outbox) -> bool:
        """Hand the batch to its link if the link has room (False if it has none for all of it).

        While the link is busy the batch keeps growing (up to ``batch_size``), so a saturated link
        sends fewer, larger frames: a gRPC stream's per-frame cost, not bytes, is its limit.
        """
        link = box.link
        while True:
            if not link.has_room():
                # The flag, then a second look: room the link made before the flag was up is seen here,
                # room it makes after comes with a wake (see _room).
                self.waiting_room = True
                if not link.has_room():
                    return False
            frame = box.frame()
            if len(frame) > self._max_frame:
                self._too_large(frame)
            elif frame:  # empty: every tree in it completed here
                link.offer(frame)
            if not box.size:  # else the rest of a batch too large for one frame (DataOutbox), next
                return True

    def _too_large(self, frame: bytes) -> None:
        """A tuple whose values together encode to more than a frame holds: never sent, its tree failed now
        (sent, gRPC would refuse it and break the stream, failing every frame in flight)."""
        (task, source, stream), = msgpack.unpackb(Batch.FromString(frame).tuples.routes)
        log.error("a tuple from task %d on stream %r to task %d encodes to %s bytes, over transfer.maxFrameBytes "
                  "(%s): it is not sent, and its tree fails. Emit smaller values (maxValueBytes bounds each value, "
                  "not their sum), or raise maxFrameBytes", source, stream, task, f"{len(frame):,}",
                  f"{self._max_frame:,}")
        self._dropped(frame)

    def _park(self, box: AckerOutbox) -> None:
        """Deliver the verdicts ``box`` could not, as those of a frame from their acker."""
        self.ingress.park(box.verdicts)
        box.verdicts = []
        self._wake()  # the loop runs another round to deliver them, whatever else it has to do

    def flush(self) -> bool:
        """Send the batches that are full or have waited the flush interval, if their link has room; the
        rest keep filling (fewer, larger frames are cheaper to send), until :meth:`due_in`. True when
        nothing is left waiting."""
        self._enter()
        try:
            now = self._round = self.clock()
            return self._flush_due(now)
        finally:
            self._inside -= 1

    def _flush_due(self, now: float) -> bool:
        done = True
        blocked = False
        for box in self._acker_boxes:  # young trees kept long enough go to their acker
            size = box.size
            box.expire(now)
            if not size and box.size:
                box.since = now
        wait = self.flush_interval
        due = float("inf")
        for box in self._outboxes.values():
            if not box.size:
                continue
            if box.size < self.batch_size and now - box.since < wait:
                done = False
                due = min(due, box.since + wait)
            elif not self._flush(box):
                done, blocked = False, True
        for box in self._acker_boxes:
            if box.verdicts:
                self._park(box)
        ingress = self.ingress
        if ingress is not None and (ingress.changed or ingress.congested or self._unsettled):
            self._tell(ingress)
        self.waiting_room = blocked
        self._due = due
        return done

    def _tell(self, ingress: Ingress) -> None:
        """Tell each peer that sends to this process which of its tasks are congested, once per change, and
        again when a link between them has been down: this process's to it (the peer may have restarted
        without it, or missed a change), or its to this process (it forgot, see _down)."""
        if ingress.changed:
            ingress.changed = False
            self._version += 1
            congested = ingress.congested
            self._state = encode_congestion({task: task in congested for task in self._tasks})
        unsettled = False
        accepted = self.receiver.accepted
        for link, told in self._told.items():
            now = (self._version, link.stats.reconnects, accepted[link.peer])
            if told == now:
                continue
            if link.connected.is_set() and link.has_room():
                link.offer(self._state)
                self._told[link] = now
            else:  # when it has room (a later round), or is back
                unsettled = True
        self._unsettled = unsettled

    def due_in(self) -> float:
        """Seconds until the oldest batch the last :meth:`flush` held back must go, infinity if none: an
        idle scheduler sleeps no longer. (A batch that waits for room in its link is not counted: the
        link wakes the scheduler once it has room.)"""
        return self._due - self.clock()

    def deliver(self) -> bool:
        if self.ingress is None:
            return False
        self._enter()
        try:
            return self.ingress.deliver()
        finally:
            self._inside -= 1

    # -- the flusher thread ----------------------------------------------------------------

    def _flusher_loop(self) -> None:
        """While a long callback holds the scheduler thread (a bolt's execute waiting on a service, a spout's
        next_tuple that blocks), what it handed over before and during the callback (emits, acks, fails,
        resets) leaves as it would at the end of a round, once its batch is due: the flusher thread
        flushes for it, as Storm's transfer never waits for its executors. A scheduler whose rounds
        flush, or that sleeps with nothing due, never meets it."""
        interval = max(self.flush_interval, FLUSHER_FLOOR)
        while True:
            self._wait_held(interval)
            if self._closed:
                return
            now = self.clock()
            if not self._held(now, interval):
                continue
            with self._lock:
                self._claimed = True
                try:
                    if not self._inside:  # else the scheduler runs a call of its own: not held
                        self._flush_due(now)
                finally:
                    self._claimed = False

    def _held(self, now: float, interval: float) -> bool:
        """The scheduler's round has lasted an interval without a flush, and a batch is due or waits for room."""
        return now - self._round >= interval and (now >= self._due or self.waiting_room)

    def _wait_held(self, interval: float) -> None:
        """Sleep until the scheduler looks held (see :meth:`_held`), or the transport closes. It looks once
        per interval at most, and at the oldest batch's due time; compiled, without the GIL, so that a look
        that finds the scheduler flushing its rounds costs it nothing (with the GIL, the thousand looks a
        second took 10-15 % more CPU per tree from a busy scheduler)."""
        if _COMPILED and self.clock is time.monotonic:
            with cython.nogil:
                while not self._closed:
                    clock_gettime(CLOCK_MONOTONIC, cython.address(ts))  # noqa: F821 (transport.pxd)
                    now = ts.tv_sec + ts.tv_nsec * 1e-9  # noqa: F821
                    if self._held(now, interval):
                        break
                    wait = min(max(max(self._round + interval, self._due) - now, interval / 4), interval)
                    ts.tv_sec = int(wait)  # noqa: F821
                    ts.tv_nsec = int((wait - ts.tv_sec) * 1e9)  # noqa: F821
                    nanosleep(cython.address(ts), cython.NULL)  # noqa: F821
            return
        while not self._closed:
            now = self.clock()
            if self._held(now, interval):
                return
            self._kick.wait(min(max(max(self._round + interval, self._due) - now, interval / 4), interval))
            self._kick.clear()

    def close(self) -> None:
        self._closed = True
        self._kick.set()
        if self._flusher.is_alive():
            self._flusher.join()
        for link in self.links.values():
            link.stop()
        for link in self.links.values():
            link.close()
        if self.receiver:
            self.receiver.stop()

