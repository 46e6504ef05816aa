"""A worker that is its acker's home: a tree whose every tuple runs there completes there, young, and its
spout is acked without a frame to the acker."""

from __future__ import annotations

from collections import deque

from transport_support import Taking

from squall.acker.acker import ACK, INIT, Notification
from squall.executor.base import Transfer


def test_trees_that_complete_in_their_worker_are_acked_there_with_no_frame_to_their_acker():
    """A worker's real runtime and transport, its acker never started: every tuple of the word count runs
    in the worker, the home of the acker, so each tree completes there, young, and its spout is acked
    without a frame to the acker (squall.transport.outbox.AckerOutbox)."""
    import time

    from bench.instructions import lone_worker

    from squall.executor.runtime import Runtime

    plan, worker, transport = lone_worker()
    assert worker.forwards  # the worker is its acker's home
    runtime = Runtime(plan, executors=worker.executors, acker_tasks=(), remote=transport)

    def acked() -> int:
        return sum(sum(s.acked.values()) for s in runtime.component_stats("sentences"))

    try:
        runtime.start()
        deadline = time.monotonic() + 30
        while acked() < 500:
            assert time.monotonic() < deadline, f"{acked()} trees acked; {transport.completed} completed in the worker"
            if not runtime.step():
                runtime.idle_wait()
        assert transport.completed >= 500
        acker_links = [link for (peer, _), link in transport.links.items() if peer == "acker-0"]
        assert sum(link.stats.batches + link.stats.dropped + link.queued() for link in acker_links) == 0
        assert sum(sum(s.failed.values()) for s in runtime.component_stats("sentences")) == 0
    finally:
        runtime.close()
        transport.close()


def test_a_tree_begun_before_the_transports_first_round_is_kept_young_too():
    """A tree is kept young from when it starts: one begun before the transport's first round is not
    taken for one kept since time 0 and sent to its acker at that round, so its acks still complete
    it in the worker."""
    from bench.instructions import lone_worker

    plan, _, transport = lone_worker(clock=lambda: 1000.0)
    delivered = []
    transport.attach(transfer=Taking(lambda task, item: delivered.append((task, item)) or True), wake=lambda: None,
                     frames=8)
    try:
        spout, acker = plan.component_tasks["sentences"][0], plan.acker_tasks[0]
        transport.try_send(acker, (INIT, 5, 0b11, spout))
        transport.flush()
        transport.try_send(acker, (ACK, 5, 0b11, -1))
        transport.flush()
        transport.deliver()
        assert transport.completed == 1 and delivered == [(spout, Notification(ACK, 5, spout))]
    finally:
        transport.close()


def test_a_tree_completed_in_its_worker_is_acked_into_its_spouts_inbox_at_once_or_once_there_is_room():
    """The verdict of a tree that completes young goes into its spout task's inbox when its last ack folds,
    within the round, as a local acker's would; while that inbox is full it waits in the ingress, and
    the next delivery takes it there once the spout made room. A verdict is never lost or doubled."""
    from bench.instructions import lone_worker

    plan, _, transport = lone_worker(clock=lambda: 1000.0)
    spout, acker = plan.component_tasks["sentences"][0], plan.acker_tasks[0]
    transfer = Transfer(capacity=1)
    inbox: deque = deque()
    transfer.register(spout, inbox)
    transport.attach(transfer=transfer, wake=lambda: None, frames=8)
    try:
        transport.try_send(acker, (INIT, 5, 0b11, spout))
        transport.try_send(acker, (ACK, 5, 0b01, -1))
        assert not inbox  # not complete yet
        transport.try_send(acker, (ACK, 5, 0b10, -1))
        assert list(inbox) == [Notification(ACK, 5, spout)]  # no flush, no delivery: at once
        # the inbox is full (capacity 1): the next tree's verdict waits in the ingress
        transport.try_send(acker, (INIT, 6, 0b1, spout))
        transport.try_send(acker, (ACK, 6, 0b1, -1))
        assert list(inbox) == [Notification(ACK, 5, spout)]
        transport.flush()
        assert not transport.deliver() and transport.undelivered() == 1
        inbox.popleft()  # the spout takes its verdict
        assert transport.deliver() and list(inbox) == [Notification(ACK, 6, spout)]
        assert transport.completed == 2 and transport.undelivered() == 0
        # a tree with no tuple to wait for (its spout tuple went to no task: its INIT holds 0) is complete
        # at its INIT, as its acker would find it, not once it was kept young YOUNG_SECONDS
        inbox.popleft()
        transport.try_send(acker, (INIT, 7, 0, spout))
        assert list(inbox) == [Notification(ACK, 7, spout)] and transport.completed == 3
    finally:
        transport.close()


def test_a_tree_found_complete_as_its_frame_is_built_has_its_verdict_delivered_and_the_loop_woken():
    """A tree whose acks came before its INIT is folded in the batch, and found complete only when the
    batch's frame is built, at the end of a scheduler round that may have done nothing else: its
    verdict goes through the ingress into the spout's inbox, and the loop is woken for the round in
    which the spout takes it, not left in the inbox while the loop sleeps."""
    from bench.instructions import lone_worker

    plan, _, transport = lone_worker(clock=lambda: 1000.0, flush_interval=0.0)
    spout, acker = plan.component_tasks["sentences"][0], plan.acker_tasks[0]
    transfer = Transfer(capacity=8)
    inbox: deque = deque()
    transfer.register(spout, inbox)
    wakes = []
    transport.attach(transfer=transfer, wake=lambda: wakes.append(1), frames=8)
    for link in transport.links.values():
        link.ever_connected = True  # it takes frames (this one sends none: its only tree completes here)
    try:
        transport.try_send(acker, (ACK, 5, 0b11, -1))  # before its INIT (it waited in the spout's overflow)
        transport.try_send(acker, (INIT, 5, 0b11, spout))
        assert not inbox and not wakes
        transport.flush()  # builds the frame: the tree is complete, and the acker is sent nothing
        assert wakes and transport.completed == 1
        assert list(inbox) == [Notification(ACK, 5, spout)] and transport.undelivered() == 0
    finally:
        transport.close()
