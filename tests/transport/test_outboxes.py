"""Outboxes and batching: a worker's acker messages folded per tree, young trees kept from their acker,
batches cut by count, frame size and flush interval, and the FAILs of lost trees."""

from __future__ import annotations

from array import array
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transport_support import Taking, decoder

from squall.acker.acker import ACK, FAIL, INIT, RESET, Notification
from squall.executor.base import Executor, Remote, Transfer
from squall.proto.squall_pb2 import Batch
from squall.topology import Plan
from squall.transport import Transport
from squall.transport.codec import Decoder
from squall.transport.outbox import AckerOutbox
from squall.tuples import Fields, Tuple


def test_a_batch_flushed_by_a_send_starts_the_next_one_afresh(plan):
    """Two real transports over loopback gRPC. Once a send flushes an overdue batch, the next batch
    must wait its own flush interval: with the old batch's start time it went out 32 tuples small."""
    import threading
    import time

    from squall.transport import Transport

    now = [0.0]
    got: list[Any] = []
    woke = threading.Event()

    def deliver(task: int, item: Any) -> bool:
        got.append(item)
        return True

    bolt_task = plan.component_tasks["upper"][0]
    common = {"fingerprint": "p1", "decoder": decoder(plan), "ackers": frozenset(), "bind": "127.0.0.1:0",
              "batch_size": 1000, "flush_interval": 0.001, "max_frame": 1 << 20}
    receiver = Transport(name="worker-1", owner={}, addresses={}, senders=frozenset({"worker-0"}), **common)
    receiver.attach(transfer=Taking(deliver), wake=woke.set, frames=8)
    sender = Transport(name="worker-0", owner={bolt_task: "worker-1"}, senders=frozenset(),
                       addresses={"worker-1": f"127.0.0.1:{receiver.receiver.port}"}, clock=lambda: now[0], **common)
    room = threading.Event()  # the sender's link took the frame waiting for it
    sender.attach(transfer=Taking(), wake=room.set, frames=8)
    try:
        deadline = time.monotonic() + 30
        while not (sender.all_connected() and receiver.all_connected()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sender.all_connected(), sender.missing()
        fields = Fields(["word", "meta"])
        spout_task = plan.component_tasks["words"][0]
        for i in range(200):
            if i == 1:
                now[0] = 0.002  # the first batch is overdue from here on: the send at 32 flushes it
            assert sender.try_send(bolt_task, Tuple([f"w{i}", None], fields, "words", "default", spout_task, {},
                                                    bolt_task))
        assert not sender.flush()  # the second batch keeps filling for its flush interval
        now[0] = 0.003  # then it goes, once
        while not sender.flush() and time.monotonic() < deadline:
            room.wait(1)  # the link took the first frame (one frame waits for a link at most)
            room.clear()
        while len(got) < 200 and time.monotonic() < deadline:  # the receiving scheduler's part
            woke.wait(1)
            woke.clear()
            receiver.deliver()
        frames = receiver.receiver.stats.batches[("worker-0", "data")]
        assert frames == 2  # 32 tuples, then the other 168 in one frame (not five more of 32)
        assert [t.values[0] for t in got] == [f"w{i}" for i in range(200)]
    finally:
        sender.close()
        receiver.close()


def test_a_partial_batch_waits_its_flush_interval_in_an_idle_round_and_the_scheduler_wakes_for_it():
    """A batch that is not full keeps filling for the flush interval, whether the round that ends was busy
    or idle: a frame costs both processes' threads some 300 µs of CPU, and sent at the end of every idle
    round, frames took a lightly loaded topology most of two cores. The idle scheduler's sleep ends when
    the batch is due, and the flush then sends it."""
    from bench.instructions import lone_worker

    from squall.executor.runtime import IDLE_WAIT, Runtime

    now = [1000.0]
    plan, _, transport = lone_worker(clock=lambda: now[0], flush_interval=1 / 32)  # times exact in binary
    runtime = Runtime(plan, executors=(), acker_tasks=(), remote=transport, clock=lambda: now[0])
    sleeps: list[float] = []

    class Sleep:
        """The loop's sleep, recorded rather than slept (the test's clock does not move while it sleeps)."""

        def wait(self, timeout: float) -> bool:
            sleeps.append(timeout)
            return False

        def set(self) -> None: ...

        def clear(self) -> None: ...

    runtime._wake = Sleep()
    for link in transport.links.values():
        link.ever_connected = True  # it takes frames (and holds them: the acker never runs)
    try:
        spout, acker = plan.component_tasks["sentences"][0], plan.acker_tasks[0]
        runtime.idle_wait()
        assert sleeps == [pytest.approx(IDLE_WAIT)]  # nothing held: the longest sleep
        assert transport.try_message(acker, FAIL, 5, 0, spout)  # a FAIL goes into the batch (no young tree)
        now[0] += 1 / 128
        assert not transport.flush() and transport.unsent() == 1  # held: it may yet fill
        runtime.idle_wait()
        assert sleeps[-1] == 3 / 128
        now[0] += 3 / 128
        assert transport.flush() and transport.unsent() == 0  # due: it went to its link
        runtime.idle_wait()
        assert sleeps[-1] == pytest.approx(IDLE_WAIT)
    finally:
        transport.close()


def test_a_link_that_makes_room_wakes_the_loop_only_while_a_batch_waits_for_it(plan):
    """A link's thread signals each frame it takes from its queue. A sleeping scheduler woken by every one
    spent a round on nothing (an acker's verdict link woke it for each frame it sent): it is woken only
    when a batch could not go for want of room."""
    from squall.process.supervisor import free_ports
    from squall.transport import Transport

    bolt_task, spout_task = plan.component_tasks["upper"][0], plan.component_tasks["words"][0]
    [port] = free_ports(1)  # nobody listens there: the link never connects, so it has no room
    wakes: list[int] = []
    sender = Transport(name="worker-0", fingerprint="p1", owner={bolt_task: "worker-1"}, ackers=frozenset(),
                       senders=frozenset(), addresses={"worker-1": f"127.0.0.1:{port}"}, decoder=decoder(plan),
                       bind="127.0.0.1:0", batch_size=100, flush_interval=0.0, max_frame=1 << 20)
    sender.attach(transfer=Taking(), wake=lambda: wakes.append(1), frames=8)
    try:
        took_a_frame = sender.links[("worker-1", "data")]._wake  # what the link's thread calls for each frame
        took_a_frame()
        assert wakes == []  # no batch waits
        assert sender.try_send(bolt_task, Tuple(["w", None], Fields(["word", "meta"]), "words", "default",
                                                spout_task, {}, bolt_task))
        assert not sender.flush()  # the batch waits for room in the link
        took_a_frame()
        assert wakes == [1]
    finally:
        sender.close()


def _sent(box: AckerOutbox, *, keep: float = -1.0) -> tuple[list[tuple[int, int, int, int]], list[Notification]]:
    """A flush of ``box`` at time 1: the trees kept since before ``1 - keep`` (all if ``keep`` < 0) go to
    its batch, and the frame; with the verdicts of the trees it found complete, which the worker keeps."""
    box.keep = keep
    box.expire(1.0)
    cols = Batch.FromString(box.frame()).acker
    assert box.size == 0  # the frame starts the next batch
    completed, box.verdicts = box.verdicts, []
    assert all(task == note.task for task, note in completed)
    return list(zip(cols.kind, array("Q", cols.root), array("Q", cols.val), array("i", cols.task),
                    strict=True)), [note for _, note in completed]


def _folded(messages: list[tuple[int, int, int, int]]) -> tuple[list[tuple[int, int, int, int]], list[Notification]]:
    """What a worker's frame to an acker carries after its outbox folds each message in, every young tree
    sent, and the verdicts of the trees it found complete."""
    box = AckerOutbox(link=None, capacity=max(1, len(messages)))
    for message in messages:
        box.add(message)
    return _sent(box)


def _traffic(rng) -> list[tuple[int, int, int, int]]:
    """Acker messages of up to three trees, interleaved: each a real tree's INIT and ACKs (every edge id
    once when created, once when acked), some trees cut short, some with a FAIL or RESET among them."""
    trees = []
    for root in range(11, 11 + rng.randint(1, 3)):
        # random ids, each with a bit of its own: no subset of them XORs to 0 (a real tree's does with
        # probability 2^-64; Hypothesis's random would find one, and every acker would decide early)
        edges = [rng.getrandbits(40) << 24 | 1 << i for i in range(rng.randint(1, 6))]
        parents = [-1 if i == 0 or rng.random() < 0.3 else rng.randrange(i) for i in range(len(edges))]
        init = 0
        acks = [edge for edge in edges]
        for i, parent in enumerate(parents):
            if parent < 0:
                init ^= edges[i]
            else:
                acks[parent] ^= edges[i]
        messages = [(INIT, root, init, 7)] + [(ACK, root, val, -1) for val in acks]
        rng.shuffle(messages)
        if rng.random() < 0.3:
            messages = messages[:rng.randint(1, len(messages))]
        if rng.random() < 0.4:
            messages.insert(rng.randint(0, len(messages)), (rng.choice([FAIL, RESET]), root, 0, -1))
        trees.append(messages)
    out = []
    while trees:
        tree = rng.choice(trees)
        out.append(tree.pop(0))
        if not tree:
            trees.remove(tree)
    return out


@settings(max_examples=500, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 40), st.booleans())
def test_acks_folded_per_tree_in_a_batch_give_the_verdicts_of_the_messages_one_by_one(rng, cut, busy):
    """The transport XORs a tree's INIT and ACKs into one message, or into the young tree it keeps; with
    trees in any order, cut short, with FAILs and RESETs among them, and a frame cut anywhere (while
    busy, young trees stay for the next), the worker and the acker together decide exactly as the
    acker would on every message one by one (XOR is associative; nothing is folded across a FAIL or
    RESET of the tree)."""
    from squall.acker import Acker

    messages = _traffic(rng)
    by_one, folded = Acker(), Acker()
    expected = [n for m in messages for n in by_one.process_messages([m])]
    box = AckerOutbox(link=None, capacity=max(1, len(messages)))
    got = []
    for part, keep in ((messages[:cut], 1.0 if busy else -1.0), (messages[cut:], -1.0)):
        for message in part:  # forwarded ones come as tuples, a worker's own as their fields
            if rng.random() < 0.5:
                box.add(message)
            else:
                box.message(*message)
        frame, completed = _sent(box, keep=keep)
        got += completed + folded.process_messages(frame)
    assert box.kept() == 0
    # One exception: a tree the worker found complete (its INIT and every ack folded to 0 there) is acked
    # where a FAIL before its INIT fails it at the acker. Then every edge of the tree was acked:
    # such a FAIL is a worker's, for a frame that might have been lost and was read after all.
    overruled = {n.root for n in got if n.kind == ACK} & {n.root for n in expected if n.kind == FAIL}
    for root in overruled:
        tree = [m for m in messages if m[1] == root]
        value = 0
        for kind, _, val, _ in tree:
            value ^= val if kind <= ACK else 0
        kinds = [kind for kind, *_ in tree]
        assert value == 0 and kinds.index(FAIL) < kinds.index(INIT)
    # And one more: a RESET that came before its tree's INIT is told at the INIT one by one; folded with
    # the acks after it, that INIT (or the worker) may find the tree complete at once, and a reset of a
    # complete tree has nothing to tell.
    unsaid = {n.root for n in expected if n.kind == RESET} - {n.root for n in got if n.kind == RESET}
    for root in unsaid:
        kinds = [kind for kind, r, *_ in messages if r == root]
        assert kinds.index(RESET) < kinds.index(INIT) and (ACK, root) in {(n.kind, n.root) for n in got}
    expected = [n for n in expected if n.kind != RESET or n.root not in unsaid]
    assert sorted(got) == sorted(n._replace(kind=ACK) if n.root in overruled else n for n in expected)
    # an ack folded into its tree's deciding message leaves no leftover entry (one by one, an ack after
    # the decision starts one, forgotten on rotation): never more trees the acker can still decide
    assert folded.trees.awaiting() <= by_one.trees.awaiting()


class _Remote(Remote):
    """Another process's tasks, as an executor's transfer reaches them: records what it takes, and how."""

    def __init__(self) -> None:
        self.room = True
        self.got: list[tuple[str, int, Any]] = []

    def try_send(self, task: int, item: Any) -> bool:
        if self.room:
            self.got.append(("item", task, item))
        return self.room

    def try_message(self, task: int, kind: int, root: int, val: int, spout: int) -> bool:
        if self.room:
            self.got.append(("fields", task, (kind, root, val, spout)))
        return self.room


def test_an_acker_message_goes_out_as_its_fields_and_in_order_behind_what_waits():
    """A worker's acker messages reach the transport without a tuple; one that finds no room waits in the
    executor's overflow, and the ones after it wait behind it, as any send does. A local acker task
    gets the message in its inbox."""
    remote = _Remote()
    transfer = Transfer(capacity=4, remote=remote)
    ex = Executor(component="count", tasks=(1,), transfer=transfer)
    acker_here = deque()
    transfer.register(2, acker_here)
    ex.send_message(9, ACK, 40, 0b01, -1)
    assert remote.got == [("fields", 9, (ACK, 40, 0b01, -1))]
    remote.room = False
    ex.send_message(9, ACK, 41, 0b10, -1)
    remote.room = True
    ex.send_message(9, FAIL, 42, 0, -1)  # behind the one that waits, not ahead of it
    assert remote.got == [("fields", 9, (ACK, 40, 0b01, -1))]
    assert ex.flush()
    assert remote.got[1:] == [("item", 9, (ACK, 41, 0b10, -1)), ("item", 9, (FAIL, 42, 0, -1))]
    ex.send_message(2, INIT, 43, 0b11, 1)
    assert list(acker_here) == [(INIT, 43, 0b11, 1)]


def test_a_trees_acks_leave_a_worker_as_one_message():
    init, acks = (INIT, 5, 0b0111, 2), [(ACK, 5, 0b0001, -1), (ACK, 5, 0b0010, -1), (ACK, 5, 0b0100, -1)]
    other = (ACK, 6, 9, -1)
    assert _folded([init, acks[0], other, acks[1]]) == ([other, (INIT, 5, 0b0100, 2)], [])
    fail = (FAIL, 5, 0, -1)
    assert _folded([acks[0], fail, acks[1], acks[2]]) == ([acks[0], fail, (ACK, 5, 0b0110, -1)], [])


def test_a_tree_whose_messages_fold_to_zero_is_acked_by_the_worker_not_its_acker():
    init, acks = (INIT, 5, 0b0111, 2), [(ACK, 5, 0b0001, -1), (ACK, 5, 0b0010, -1), (ACK, 5, 0b0100, -1)]
    other = (ACK, 6, 9, -1)
    assert _folded([init, acks[0], other, *acks[1:]]) == ([other], [Notification(ACK, 5, 2)])
    # the last ack before the INIT (it waited in the spout's overflow) completes the tree all the same
    assert _folded([*acks, init]) == ([], [Notification(ACK, 5, 2)])
    # a FAIL after the tree completed: the ack stands, and the FAIL goes on (the acker ignores it)
    fail = (FAIL, 5, 0, -1)
    assert _folded([init, *acks, fail]) == ([fail], [Notification(ACK, 5, 2)])
    # a FAIL before a tree's INIT and every ack: the tree was processed, and is acked too (see AckerOutbox)
    assert _folded([fail, init, *acks]) == ([fail], [Notification(ACK, 5, 2)])
    # a FAIL among the acks cuts the fold: the acker gets both parts, and decides
    assert _folded([init, acks[0], fail, *acks[1:]]) == ([(INIT, 5, 0b0110, 2), fail, (ACK, 5, 0b0110, -1)], [])
    # nothing left for the acker: no frame at all
    box = AckerOutbox(link=None, capacity=8)
    for message in [init, *acks]:
        box.add(message)
    assert box.verdicts == [(2, Notification(ACK, 5, 2))] and box.completed == 1 and box.kept() == 0
    assert box.frame() == b""


@pytest.mark.parametrize("kind", [FAIL, RESET])
def test_a_young_trees_fail_or_reset_brings_its_init_into_a_batch_with_one_place_left(kind):
    """The transport makes room for one message; a young tree's FAIL or RESET adds two, its INIT and
    itself. In a batch one short of full (its link busy or not up yet), the second overflowed the
    columns: the OverflowError reached the bolt's reset_timeout() or fail(), and a fail was never sent,
    its tree left to time out (found by the engine audit)."""
    box = AckerOutbox(link=None, capacity=2)
    box.add((ACK, 9, 0b1, -1))
    box.add((INIT, 5, 0b11, 2))  # kept young, out of the batch
    assert box.size == 1
    box.add((kind, 5, 0, -1))
    assert _sent(box) == ([(ACK, 9, 0b1, -1), (INIT, 5, 0b11, 2), (kind, 5, 0, -1)], [])


def test_a_batch_one_past_full_takes_no_expired_young_tree():
    """A young tree's RESET filled a batch one past its capacity; the next expire computed its room as -1,
    found no tree the room stopped at, and moved every kept tree in: the OverflowError killed the worker
    about once a minute under a SparkBolt, which resets a whole batch's inputs at once (found on k8s-local
    by bench/spark_executors.py)."""
    box = AckerOutbox(link=None, capacity=2, keep=0.0)
    box.expire(1.0)
    box.add((ACK, 9, 0b1, -1))
    for root in (5, 6):
        box.add((INIT, root, 0b11, 2))  # kept young
    box.add((RESET, 5, 0, -1))  # its INIT and itself: one past full
    assert box.size == 3 and box.kept() == 1
    box.expire(2.0)  # tree 6 is old enough, and there is no room for it
    assert box.size == 3 and box.kept() == 1
    assert _sent(box)[0] == [(ACK, 9, 0b1, -1), (INIT, 5, 0b11, 2), (RESET, 5, 0, -1)]


def test_a_young_tree_is_kept_from_its_acker_as_long_as_the_outbox_keeps_trees():
    from squall.transport.outbox import YOUNG_SECONDS

    box = AckerOutbox(link=None, capacity=2, keep=YOUNG_SECONDS)  # at the acker's home
    box.expire(0.5)
    for root in (5, 6, 7):
        box.add((INIT, root, 0b11, 2))
    box.expire(0.5 + YOUNG_SECONDS / 2)
    assert box.size == 0 and box.kept() == 3
    box.expire(0.5 + YOUNG_SECONDS)  # kept long enough: as many as the batch has room for
    assert box.size == 2 and box.kept() == 1
    box.add((ACK, 5, 0b11, -1))  # folds into the INIT message in the batch: complete there
    assert _sent(box, keep=1.0) == ([(INIT, 6, 0b11, 2)], [Notification(ACK, 5, 2)])
    assert box.kept() == 1
    # elsewhere a tree is kept for the round it started in: it goes with the next flush
    box = AckerOutbox(link=None, capacity=2)
    box.expire(1.0)
    box.add((INIT, 8, 0b1, 2))
    box.expire(1.001)
    assert box.kept() == 0 and box.size == 1


def test_fails_for_lost_trees_that_find_their_batch_full_wait_for_a_later_round():
    """Real gRPC and a worker's real runtime and transport: the trees of dropped frames fail at their
    acker. A FAIL that finds the acker's batch full (its link not up yet) waits for a later round with
    those after it; before, each was dropped, its tree left to time out. Once the acker is up, every
    one of them arrives."""
    import threading
    import time

    from bench.wordcount import spec

    from squall.executor.runtime import Runtime
    from squall.process.supervisor import free_ports
    from squall.topology import TopologySpec
    from squall.topology.assignment import assign

    topology = TopologySpec.from_dict(spec(workers=1, ackers=1))
    plan, fingerprint = Plan(topology), topology.fingerprint()
    assignment = assign(plan.layout)
    [port] = free_ports(1)  # for acker-0, which starts only later
    common = {"fingerprint": fingerprint, "batch_size": 1, "flush_interval": 0.001, "max_frame": 1 << 20}
    worker = assignment.wiring("worker", 0)
    sender = Transport(name="worker-0", owner=worker.owner, ackers=worker.ackers, senders=worker.senders,
                       addresses={"acker-0": f"127.0.0.1:{port}"}, bind="127.0.0.1:0",
                       decoder=Decoder(plan, bolt_tasks=worker.bolt_tasks, spout_tasks=worker.spout_tasks,
                                       acker_tasks=frozenset()), **common)
    runtime = Runtime(plan, executors=worker.executors, acker_tasks=(), remote=sender)
    acker = assignment.wiring("acker", 0)
    receiver = Transport(name="acker-0", owner=acker.owner, ackers=frozenset(), senders=acker.senders,
                         addresses={"worker-0": "127.0.0.1:1"}, bind=f"127.0.0.1:{port}",
                         decoder=Decoder(plan, bolt_tasks=frozenset(), spout_tasks=frozenset(),
                                         acker_tasks=frozenset(acker.acker_tasks)), **common)
    failed, arrived = [], threading.Event()

    def take(task: int, batch: Any) -> bool:
        failed.extend(root for kind, root, _, _ in batch.messages if kind == FAIL)
        arrived.set()
        return True

    roots = list(range(100, 110))
    try:
        sender.lost.extend((-1, root) for root in roots)
        runtime.step()
        assert list(sender.lost) == [(-1, root) for root in roots[1:]]  # one FAIL fills the batch of 1
        runtime.step()
        assert len(sender.lost) == 9  # still waiting, not dropped
        receiver.attach(transfer=Taking(take), wake=lambda: None, frames=8)
        deadline = time.monotonic() + 30
        while sorted(failed) != roots:
            assert time.monotonic() < deadline, f"FAILs that reached acker-0: {sorted(failed)}"
            runtime.step()
            while receiver.deliver():
                pass
            arrived.wait(0.05)
            arrived.clear()
        assert not sender.lost
    finally:
        runtime.close()
        sender.close()
        receiver.close()


def test_a_batch_too_large_for_one_frame_goes_out_in_frames_that_fit_and_a_tuple_too_large_alone_fails(plan):
    """Real loopback gRPC with frames of 64 KiB at most. Before, a batch was cut by its count of items
    only: tuples of 20 KB each made a frame gRPC refused (``Sent message larger than max``), and the
    stream broke, failing the trees of every frame in flight; a tuple whose values alone passed
    ``maxValueBytes`` but together passed a frame did the same at every replay. Found by the transport
    audit."""
    import threading
    import time

    from squall.transport.outbox import DataOutbox

    fields = Fields(["word", "meta"])
    spout_task, bolt_task = plan.component_tasks["words"][0], plan.component_tasks["upper"][0]
    big = [Tuple([f"{i}" + "x" * 20_000, None], fields, "words", "default", spout_task, {100 + i: 7}, bolt_task)
           for i in range(10)]

    # the outbox: the forwarded acker messages alone first, then the tuples in frames that each fit
    box = DataOutbox(link=None, capacity=16, max_frame=65_536)
    box.message(ACK, 99, 1, -1)
    for tup in big:
        box.add(tup)
    frames = []
    while box.size:
        frames.append(box.frame())
    assert all(len(f) <= 65_536 for f in frames) and len(frames) >= 5  # the acker messages, then 200 KB
    home = Decoder(plan, bolt_tasks=frozenset(plan.component_tasks["upper"]), spout_tasks=frozenset(),
                   acker_tasks=frozenset(), forwards=frozenset(plan.acker_tasks))
    items = [item for f in frames for item in home.decode(f)]
    assert items[0] == (plan.acker_tasks[0], (ACK, 99, 1, -1))
    assert [t.values for t in items[1:]] == [t.values for t in big]

    # two processes: every tuple arrives; one over a frame alone is not sent, and its tree fails at once
    got: list[Any] = []
    woke = threading.Event()
    common = {"ackers": frozenset(), "batch_size": 16, "flush_interval": 0.001, "max_frame": 65_536}
    receiver = Transport(name="worker-1", fingerprint="p", owner={}, addresses={}, senders=frozenset({"worker-0"}),
                         bind="127.0.0.1:0", decoder=decoder(plan), **common)
    receiver.attach(transfer=Taking(lambda task, item: got.append(item) or True), wake=woke.set, frames=8)
    sender = Transport(name="worker-0", fingerprint="p", owner={bolt_task: "worker-1"}, senders=frozenset(),
                       addresses={"worker-1": f"127.0.0.1:{receiver.receiver.port}"}, bind="127.0.0.1:0",
                       decoder=decoder(plan), **common)
    sender.attach(transfer=Taking(), wake=lambda: None, frames=8)
    try:
        deadline = time.monotonic() + 30
        while not sender.all_connected() and time.monotonic() < deadline:
            time.sleep(0.01)
        huge = Tuple(["y" * 40_000, "z" * 40_000], fields, "words", "default", spout_task, {555: 9}, bolt_task)
        for tup in [*big, huge]:
            while not sender.try_send(bolt_task, tup):
                sender.flush()
        while not sender.flush():
            time.sleep(0.001)
        while len(got) < len(big) and time.monotonic() < deadline:
            woke.wait(0.5)
            woke.clear()
            receiver.deliver()
        assert [t.values for t in got] == [t.values for t in big]
        assert list(sender.lost) == [(-1, 555)]  # the acker fails the huge tuple's tree
        link = sender.links[("worker-1", "data")]
        assert link.stats.dropped == 0 and link.stats.batches >= 4  # 200 KB in frames of 64 KiB
    finally:
        sender.close()
        receiver.close()
