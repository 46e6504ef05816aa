"""Ingress backlogs and congestion: one busy task's items wait while the others' go on, the backlogs are
bounded, and peers send nothing to a congested task (an acker's home's too) until it has room."""

from __future__ import annotations

import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

from transport_support import Taking, decoder

from squall.acker import AckBatch
from squall.acker.acker import ACK
from squall.executor.base import Executor, Transfer
from squall.transport import Transport
from squall.transport.codec import (
    Decoder,
    encode_congestion,
)
from squall.transport.links import CONTROL, DATA
from squall.tuples import Fields, Tuple


def test_what_a_process_received_and_has_not_delivered_counts_until_it_reaches_an_inbox():
    """A draining process may exit only once its ingress is empty too: frames the receiver took in
    were counted as read by their sender, so leaving them behind would lose their trees silently
    (to the timeout). They count while queued, and while parked behind a full inbox."""
    from squall.transport.ingress import Ingress

    room = {"n": 0}

    def take(task: int, item: Any) -> bool:
        if room["n"] == 0:
            return False
        room["n"] -= 1
        return True

    ingress = Ingress(transfer=Taking(take), wake=lambda: None, frames=4, limit=100)
    assert ingress.waiting() == 0
    assert ingress.put(DATA, [(1, "a"), (1, "b"), (1, "c")], closed=lambda: False)
    assert ingress.put(CONTROL, [(2, "v")], closed=lambda: False)
    assert ingress.waiting() == 2  # two frames queued
    assert not ingress.deliver()  # every inbox full: the frames' items are parked
    assert ingress.waiting() == 4
    room["n"] = 3
    assert ingress.deliver()
    assert ingress.waiting() == 1  # control first, then two of the three data items
    room["n"] = 1
    ingress.deliver()
    assert ingress.waiting() == 0


def test_an_item_for_a_full_inbox_waits_in_order_while_the_other_tasks_items_go_on():
    """One busy task never stops the frames of the rest: its items wait in its backlog, in order, and
    the other tasks' items reach their inboxes. The task is congested once its backlog holds an inbox's
    worth, and until the backlog is gone and its inbox is half empty. Before, the lane stopped at the
    first item for a full inbox, and two workers whose bolts each waited to send to the other stalled
    both ways."""
    from squall.transport.ingress import Ingress

    transfer = Transfer(capacity=2)
    busy, idle = deque(), deque()
    transfer.register(1, busy)
    transfer.register(2, idle)
    ingress = Ingress(transfer=transfer, wake=lambda: None, frames=4, limit=100)
    assert ingress.put(DATA, [(1, "a"), (1, "b"), (1, "c"), (2, "x"), (1, "d"), (2, "y")], closed=lambda: False)
    assert ingress.deliver()
    assert list(busy) == ["a", "b"] and list(idle) == ["x", "y"]
    assert ingress.waiting() == 2 and ingress.congested == {1} and ingress.changed  # c and d: an inbox's worth
    ingress.changed = False
    assert ingress.put(DATA, [(1, "e")], closed=lambda: False)
    taken = [busy.popleft()]
    assert ingress.deliver() and list(busy) == ["b", "c"]  # the backlog first, in order
    assert ingress.congested == {1} and not ingress.changed
    taken += [busy.popleft(), busy.popleft()]
    ingress.deliver()
    assert list(busy) == ["d", "e"] and ingress.waiting() == 0 and ingress.congested == {1}  # its inbox is full
    taken.append(busy.popleft())
    ingress.deliver()
    assert ingress.congested == set() and ingress.changed  # no backlog, and half empty
    assert taken + list(busy) == ["a", "b", "c", "d", "e"]


def test_an_ingress_whose_backlogs_reach_their_limit_takes_no_more_frames():
    """What the backlogs hold is bounded: at the limit the lanes keep their frames (their queues fill and the
    server threads block: HTTP/2 flow control pushes back on every sender), and take them once there is room."""
    from squall.transport.ingress import Ingress

    transfer = Transfer(capacity=1)
    inbox: deque = deque()
    transfer.register(1, inbox)
    ingress = Ingress(transfer=transfer, wake=lambda: None, frames=4, limit=2)
    for item in "abcd":
        assert ingress.put(DATA, [(1, item)], closed=lambda: False)
    ingress.deliver()
    assert list(inbox) == ["a"] and ingress.held == 2 and ingress.waiting() == 3  # b, c held; d's frame queued
    inbox.clear()
    ingress.deliver()
    assert list(inbox) == ["b"] and ingress.held == 2 and ingress.waiting() == 2  # c held; d taken in behind it


def test_a_workers_ingress_at_its_limit_still_reads_its_control_lane_and_an_ackers_does_not():
    """An acker's home worker whose backlog of forwarded acker messages reached the limit (the acker
    congested, so each was refused) read no more frames from either lane: the acker's word that it had
    room again waited unread on the control lane, the flag never cleared, the backlog never moved, and
    the topology stalled for good (reproduced with real processes by the acker-home audit, 4 runs in 5).
    A worker's control lane brings only verdicts and word of congestion: it is read at the limit."""
    from squall.transport.ingress import Ingress

    for acker in (False, True):
        taken: list = []
        # task 2's process refuses what it is sent (its acker said it is congested); task 1 is a spout here
        transfer = Taking(lambda task, item, taken=taken: task != 2 and not taken.append(item))
        if acker:  # an acker task of this process: an acker process
            transfer.ackers.extend([None, None, None, Executor(component="__acker", tasks=(3,), transfer=transfer)])
        ingress = Ingress(transfer=transfer, wake=lambda: None, frames=4, limit=2)
        assert ingress.put(DATA, [(2, "m1"), (2, "m2")], closed=lambda: False)
        ingress.deliver()
        assert ingress.held == 2  # at the limit
        assert ingress.put(CONTROL, [(1, "verdict")], closed=lambda: False)
        ingress.deliver()
        assert taken == ([] if acker else ["verdict"]), acker


def test_an_ackers_backlog_counts_each_batch_as_its_messages_against_the_limit_and_its_congestion():
    """A frame brings an acker task one batch of acker messages. Counted as one item, a batch let an acker's
    backlog hold as many whole frames as the limit allows the smallest items (a stream window's worth of
    acker messages per peer), up to a frame's messages each, from a peer that ignored its congestion (found
    by the acker-home audit). Counted as its messages, the lane stops at the limit, what the backlog
    releases is taken off it the same way, and the task is congested (its peers told) long before."""
    from squall.transport.ingress import Ingress

    def batch(n: int) -> AckBatch:
        return AckBatch(array("B", [1] * n), array("Q", range(1, n + 1)), array("Q", [7] * n), array("i", [0] * n))

    transfer = Transfer(capacity=4)
    acker = Executor(component="__acker", tasks=(3,), transfer=transfer)
    transfer.ackers[3] = acker  # an acker process: its control lane stops at the limit too
    ingress = Ingress(transfer=transfer, wake=lambda: None, frames=8, limit=100)
    for _ in range(8):
        assert ingress.put(CONTROL, [(3, batch(40))], closed=lambda: False)
    ingress.deliver()
    assert len(acker.inbox) == 4
    assert ingress.held == 120  # three frames in the backlog reached the limit of 100 messages: one waits unread
    assert ingress.waiting() == 1 + 120
    assert ingress.congested == {3}  # from its first batch held: an inbox's worth (4) of messages
    acker.inbox.popleft()
    ingress.deliver()  # a batch leaves the backlog for the inbox: 80 messages are held, the lane gives the last
    assert ingress.held == 120 and ingress.waiting() == 120


def _until(done: Callable[[], bool], event: threading.Event) -> None:
    """Wait (at most 30 s) for ``done``, looking again whenever ``event`` is set, or every 0.1 s."""
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline
        event.wait(0.1)
        event.clear()


def test_a_peer_sends_nothing_to_a_congested_task_until_it_is_told_the_task_has_room(plan):
    """Two real transports over loopback gRPC. A task congested in its process is congested in its peer's
    transport within a round trip: the peer's sends to it are refused (they wait in their executors'
    overflow, which stops those executors taking input: the backpressure reaches its sources), until the
    task's process says it has room again, or goes away. A peer whose link to the task's process was down
    forgets, and is told again. Every item arrives, in order."""
    from squall.process.supervisor import free_ports
    from squall.transport import Transport

    bolt_task, spout_task = plan.component_tasks["upper"][0], plan.component_tasks["words"][0]
    ports = free_ports(2)
    addresses = {"worker-0": f"127.0.0.1:{ports[0]}", "worker-1": f"127.0.0.1:{ports[1]}"}
    common = {"fingerprint": "p1", "ackers": frozenset(), "addresses": addresses, "batch_size": 1,
              "flush_interval": 0.0, "max_frame": 1 << 20}
    transfer = Transfer(capacity=2)
    inbox: deque = deque()
    transfer.register(bolt_task, inbox)
    receiver = Transport(name="worker-1", owner={spout_task: "worker-0"}, senders=frozenset({"worker-0"}),
                         decoder=decoder(plan), bind=addresses["worker-1"], **common)
    woke = threading.Event()
    receiver.attach(transfer=transfer, wake=woke.set, frames=8)
    sender = Transport(name="worker-0", owner={bolt_task: "worker-1"}, senders=frozenset({"worker-1"}),
                       decoder=decoder(plan), bind=addresses["worker-0"], **common)
    heard = threading.Event()
    sender.attach(transfer=Taking(), wake=heard.set, frames=8)
    fields = Fields(["word", "meta"])

    def word(i: int) -> Tuple:
        return Tuple([f"w{i}", None], fields, "words", "default", spout_task, {}, bolt_task)

    def delivered(done: Callable[[], bool]) -> bool:
        receiver.deliver()  # the receiving scheduler's part
        return done()

    def send(i: int) -> None:
        assert sender.try_send(bolt_task, word(i))
        _until(sender.flush, heard)  # batches of one: each goes out as the link has room

    try:
        _until(lambda: sender.all_connected() and receiver.all_connected(), heard)
        for i in range(4):  # two for the inbox, two for the backlog
            send(i)
        _until(lambda: delivered(lambda: len(inbox) == 2 and receiver.ingress.held == 2), woke)
        receiver.flush()  # ... and its peer is told
        assert receiver.ingress.congested == {bolt_task}
        _until(lambda: sender.congested() == [bolt_task], heard)
        assert not sender.try_send(bolt_task, word(4))  # it waits where it is: in its executor's overflow
        taken = [inbox.popleft() for _ in range(2)]
        receiver.deliver()  # the backlog to the inbox: full again, still congested
        receiver.flush()
        assert receiver.ingress.congested == {bolt_task} and sender.congested() == [bolt_task]
        taken.append(inbox.popleft())
        receiver.deliver()
        receiver.flush()  # half empty, no backlog: its peer is told
        _until(lambda: sender.congested() == [], heard)
        send(4)
        _until(lambda: delivered(lambda: len(inbox) == 2), woke)
        taken += list(inbox)
        assert [t.values[0] for t in taken] == [f"w{i}" for i in range(5)]
        inbox.clear()
        for i in range(5, 9):  # congested again ...
            send(i)
        _until(lambda: delivered(lambda: len(inbox) == 2 and receiver.ingress.held == 2), woke)
        receiver.flush()
        _until(lambda: sender.congested() == [bolt_task], heard)
        # One way down: the sender's data link breaks (its peer refuses a frame), the links back do not. The
        # sender forgets, and is told again once its link is back.
        link = sender.links[("worker-1", DATA)]
        reconnects = link.stats.reconnects
        link.offer(encode_congestion({999: True}))
        _until(lambda: link.stats.reconnects > reconnects, heard)
        assert sender.congested() == []

        def told() -> bool:
            receiver.flush()
            return sender.congested() == [bolt_task]

        _until(told, heard)
        receiver.close()  # ... and gone: what waits for it goes to the link (which holds it, see PeerLink.offer)
        _until(lambda: sender.congested() == [], heard)
    finally:
        sender.close()
        receiver.close()


def test_a_home_counts_the_acker_messages_it_forwards_towards_their_acker_tasks_congestion():
    """An acker's home holds the other workers' messages for it while the acker is congested. It did not count
    them towards any task's congestion, so they kept coming until all the backlogs reached their limit, and the
    home read no more frames from anyone (tuples for its own bolts too). Now an inbox's worth makes the acker
    task congested here, and it is clear again once they went on to the acker."""
    from squall.transport.ingress import Ingress

    refused = [True]
    taken: list = []
    transfer = Taking(lambda task, item: not refused[0] and not taken.append(item))  # an inbox of 1
    ingress = Ingress(transfer=transfer, wake=lambda: None, frames=4, limit=100)
    acker = 9  # an acker task of another process, whose home this worker is
    assert ingress.put(DATA, [(acker, (ACK, 40, 1, -1))], closed=lambda: False)
    ingress.deliver()
    assert ingress.congested == {acker} and ingress.changed
    ingress.changed = False
    refused[0] = False  # the acker has room again, and says so: the backlog goes on to it
    ingress.deliver()
    assert taken == [(ACK, 40, 1, -1)] and ingress.congested == set() and ingress.changed


def test_the_other_workers_hold_their_messages_for_an_acker_whose_home_says_it_is_congested(plan):
    """Two real transports over loopback gRPC: worker-1 is the acker's home, worker-0 sends its acker messages
    through it. Once the home holds an inbox's worth for the acker, worker-0 is told and its messages for
    that acker wait in its executors (try_message refuses them) until the home says the acker task is clear.
    A worker whose link to the home goes down forgets what the home told it of the acker, as of the home's
    own tasks."""
    from squall.process.supervisor import free_ports

    acker, spout_task = plan.acker_tasks[0], plan.component_tasks["words"][0]
    bolts = plan.component_tasks["upper"] + plan.component_tasks["last"]
    ports = free_ports(3)  # the acker's port: nothing listens there; neither worker needs it here
    addresses = {"worker-0": f"127.0.0.1:{ports[0]}", "worker-1": f"127.0.0.1:{ports[1]}",
                 "acker-0": f"127.0.0.1:{ports[2]}"}
    common = {"fingerprint": "p1", "ackers": frozenset({"acker-0"}), "addresses": addresses, "batch_size": 1,
              "flush_interval": 0.0, "max_frame": 1 << 20}
    refused = [True]
    taken: list = []
    home = Transport(name="worker-1", owner={spout_task: "worker-0", acker: "acker-0"},
                     senders=frozenset({"worker-0"}), forwards=frozenset({acker}), bind=addresses["worker-1"],
                     decoder=Decoder(plan, bolt_tasks=frozenset(bolts), spout_tasks=frozenset(),
                                     acker_tasks=frozenset(), forwards=frozenset({acker})), **common)
    woke = threading.Event()
    home.attach(transfer=Taking(lambda task, item: not refused[0] and not taken.append(item)), wake=woke.set,
                frames=8)
    worker = Transport(name="worker-0", owner={**dict.fromkeys(bolts, "worker-1"), acker: "acker-0"},
                       senders=frozenset({"worker-1"}), acker_via={acker: "worker-1"}, bind=addresses["worker-0"],
                       decoder=decoder(plan), **common)
    heard = threading.Event()
    worker.attach(transfer=Taking(), wake=heard.set, frames=8)

    def told(congested: list[int]) -> Callable[[], bool]:
        def check() -> bool:
            home.deliver()
            home.flush()  # the home's scheduler: it takes frames in, and tells its peers
            return worker.congested() == congested
        return check

    try:
        _until(lambda: worker.links[("worker-1", DATA)].connected.is_set()
               and home.links[("worker-0", CONTROL)].connected.is_set(), heard)
        assert worker.try_message(acker, ACK, 40, 1, -1)
        _until(worker.flush, heard)
        _until(told([acker]), woke)
        assert not worker.try_message(acker, ACK, 41, 1, -1)  # it waits where it is: in its executor's overflow
        refused[0] = False  # the acker has room again
        _until(told([]), woke)
        assert taken == [(ACK, 40, 1, -1)]
        assert worker.try_message(acker, ACK, 41, 1, -1)
        _until(worker.flush, heard)
        _until(lambda: not home.deliver() and taken == [(ACK, 40, 1, -1), (ACK, 41, 1, -1)], woke)
        refused[0] = True
        assert worker.try_message(acker, ACK, 42, 1, -1)
        _until(worker.flush, heard)
        _until(told([acker]), woke)
        home.close()  # the home gone: what the worker was told of the acker task goes with it
        _until(lambda: worker.congested() == [], heard)
    finally:
        worker.close()
        home.close()
