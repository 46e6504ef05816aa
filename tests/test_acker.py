"""The XOR acker on its own: hand-built message sequences for random tuple trees, in every order."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.acker import AckBatch, Acker, AckerMessage, PendingTrees
from squall.acker.acker import ACK, FAIL, INIT, RESET


def tree_messages(rng: random.Random, *, root: int, spout_task: int, size: int) -> list[AckerMessage]:
    """The acker messages of one spout tuple tree of ``size`` tuples with a random shape.

    The spout tuple fans out to some first-level tuples (INIT carries the XOR of their edge ids);
    every other tuple is a child of a random earlier one. Each tuple's ACK carries its own edge id
    XOR the edge ids of its children, as ``OutputCollector.ack`` sends it.
    """
    edges = [rng.getrandbits(64) for _ in range(size)]
    parent = [-1] * size  # -1: emitted by the spout
    first_level = rng.randint(1, size)
    for i in range(first_level, size):
        parent[i] = rng.randrange(i)
    ack_val = [0] * size
    init_val = 0
    for i, p in enumerate(parent):
        if p < 0:
            init_val ^= edges[i]
        else:
            ack_val[p] ^= edges[i]
    messages = [AckerMessage(INIT, root, init_val, spout_task)]
    messages += [AckerMessage(ACK, root, edges[i] ^ ack_val[i]) for i in range(size)]
    return messages


def apply(acker: Acker, batch: list[AckerMessage]) -> list:
    return acker.process_messages(batch)


def random_batches(rng: random.Random, messages: list[AckerMessage]) -> list[list[AckerMessage]]:
    batches, i = [], 0
    while i < len(messages):
        n = rng.randint(1, 8)
        batches.append(messages[i:i + n])
        i += n
    return batches


@pytest.mark.parametrize("seed", range(20))
def test_tree_completes_exactly_when_its_last_message_arrives_in_any_order(seed):
    rng = random.Random(seed)
    messages = tree_messages(rng, root=rng.getrandbits(63) + 2, spout_task=7, size=rng.randint(1, 60))
    rng.shuffle(messages)
    acker = Acker()
    for i, msg in enumerate(messages):
        notes = apply(acker, [msg])
        if i < len(messages) - 1:
            assert notes == [], f"tree decided after {i + 1} of {len(messages)} messages"
    assert [(n.kind, n.root, n.task) for n in notes] == [(ACK, messages[0].root, 7)]
    assert acker.pending == 0


@pytest.mark.parametrize("seed", range(10))
def test_interleaved_trees_in_random_batches_each_complete_once(seed):
    rng = random.Random(1000 + seed)
    trees = {rng.getrandbits(63) + 2: rng.randrange(1, 5) for _ in range(50)}  # root -> spout task
    messages = [m for root, task in trees.items()
                for m in tree_messages(rng, root=root, spout_task=task, size=rng.randint(1, 30))]
    rng.shuffle(messages)
    last_position = {m.root: i for i, m in enumerate(messages)}  # where each tree's last message is

    acker = Acker()
    acked_in: dict[int, tuple[range, int]] = {}  # root -> (positions of the batch that acked it, task)
    position = 0
    for batch in random_batches(rng, messages):
        positions = range(position, position + len(batch))
        position += len(batch)
        for note in apply(acker, batch):
            assert note.kind == ACK
            assert note.root not in acked_in, "a tree was acked twice"
            acked_in[note.root] = (positions, note.task)
    assert {root: task for root, (_, task) in acked_in.items()} == trees
    for root, (positions, _) in acked_in.items():
        assert last_position[root] in positions, "acked before (or after) the batch with its last message"
    assert acker.pending == 0


def test_ack_before_init_completes_when_init_arrives():
    rng = random.Random(5)
    messages = tree_messages(rng, root=12345, spout_task=3, size=10)
    init, acks = messages[0], messages[1:]
    acker = Acker()
    assert apply(acker, acks) == []
    assert acker.pending == 1
    notes = apply(acker, [init])
    assert [(n.kind, n.root, n.task) for n in notes] == [(ACK, 12345, 3)]
    assert acker.pending == 0


def test_ack_before_init_in_separate_batches_and_one_batch():
    rng = random.Random(6)
    messages = tree_messages(rng, root=999, spout_task=4, size=5)
    acker = Acker()
    for ack in messages[1:]:
        assert apply(acker, [ack]) == []
    assert [n.kind for n in apply(acker, [messages[0]])] == [ACK]
    # the whole tree, INIT last, in one batch
    messages = tree_messages(rng, root=1000, spout_task=4, size=5)
    assert [(n.kind, n.root) for n in apply(acker, messages[1:] + messages[:1])] == [(ACK, 1000)]


def test_spout_tuple_with_no_receivers_completes_on_init():
    acker = Acker()
    notes = apply(acker, [AckerMessage(INIT, 77, 0, 2)])
    assert [(n.kind, n.root, n.task) for n in notes] == [(ACK, 77, 2)]


def test_fail_notifies_the_spout_task_once_and_later_acks_never_ack():
    rng = random.Random(7)
    messages = tree_messages(rng, root=4242, spout_task=9, size=6)
    acker = Acker()
    assert apply(acker, messages[:3]) == []
    notes = apply(acker, [AckerMessage(FAIL, 4242, 0)])
    assert [(n.kind, n.root, n.task) for n in notes] == [(FAIL, 4242, 9)]
    # the rest of the tree is acked afterwards (and failed again): no second verdict, never an ACK
    assert apply(acker, messages[3:]) == []
    assert apply(acker, [AckerMessage(FAIL, 4242, 0)]) == []


def test_fail_before_init_fails_on_init():
    acker = Acker()
    assert apply(acker, [AckerMessage(FAIL, 31337, 0)]) == []
    notes = apply(acker, [AckerMessage(INIT, 31337, 0xABC, 1)])
    assert [(n.kind, n.root, n.task) for n in notes] == [(FAIL, 31337, 1)]


def test_fail_wins_over_acks_in_the_same_batch():
    rng = random.Random(8)
    messages = tree_messages(rng, root=555, spout_task=2, size=4)
    acker = Acker()
    notes = apply(acker, [*messages[:-1], AckerMessage(FAIL, 555, 0)])
    assert [(n.kind, n.root) for n in notes] == [(FAIL, 555)]


def test_reset_timeout_is_forwarded_to_the_spout_task_only_for_known_pending_trees():
    rng = random.Random(9)
    messages = tree_messages(rng, root=8080, spout_task=5, size=3)
    acker = Acker()
    apply(acker, messages[:1])
    notes = apply(acker, [AckerMessage(RESET, 8080, 0)])
    assert [(n.kind, n.root, n.task) for n in notes] == [(RESET, 8080, 5)]
    assert apply(acker, [AckerMessage(RESET, 1234567, 0)]) == []  # unknown tree: nothing to tell
    assert [n.kind for n in apply(acker, messages[1:])] == [ACK]


def test_a_reset_that_came_before_its_init_is_told_to_the_spout_task_when_the_init_comes():
    """A bolt in another worker can reset a tree before its INIT left the spout's worker: the spout
    task must still hear of it, or the tree times out though its bolt asked for more time."""
    rng = random.Random(10)
    init, *acks = tree_messages(rng, root=8080, spout_task=5, size=3)
    acker = Acker()
    assert apply(acker, [AckerMessage(RESET, 8080, 0)]) == []  # no spout task to tell yet
    assert [(n.kind, n.root, n.task) for n in apply(acker, [init])] == [(RESET, 8080, 5)]
    assert [n.kind for n in apply(acker, acks)] == [ACK]  # told once: the acks give the verdict alone


def test_a_reset_before_an_init_that_decides_its_tree_gives_the_verdict_alone():
    acker = Acker()
    apply(acker, [AckerMessage(RESET, 9090, 0), AckerMessage(RESET, 9191, 0), AckerMessage(FAIL, 9191, 0)])
    notes = apply(acker, [AckerMessage(INIT, 9090, 0, 4), AckerMessage(INIT, 9191, 0xABC, 4)])
    assert [(n.kind, n.root) for n in notes] == [(ACK, 9090), (FAIL, 9191)]


def test_rotation_forgets_trees_untouched_for_three_rotations_and_reset_keeps_them():
    acker = Acker()
    apply(acker, [AckerMessage(INIT, 100, 0xF00D, 1), AckerMessage(INIT, 200, 0xBEEF, 1)])
    acker.rotate()
    acker.rotate()
    assert acker.pending == 2
    apply(acker, [AckerMessage(RESET, 200, 0)])
    acker.rotate()
    assert acker.pending == 1  # 100 expired; 200 was reset one rotation ago
    assert apply(acker, [AckerMessage(ACK, 200, 0xBEEF)])[0].kind == ACK
    assert acker.expired == 1


def test_reserved_root_ids_are_ignored():
    acker = Acker()
    assert apply(acker, [AckerMessage(INIT, 0, 5, 1), AckerMessage(INIT, 1, 5, 1)]) == []
    assert acker.pending == 0


def test_table_grows_and_keeps_every_tree_through_many_concurrent_trees():
    rng = random.Random(10)
    trees = PendingTrees(capacity=16)
    roots = sorted({rng.getrandbits(63) + 2 for _ in range(20_000)})
    vals = [rng.getrandbits(64) | 1 for _ in roots]
    tasks = [i % 7 for i in range(len(roots))]
    assert trees.apply(zip([INIT] * len(roots), roots, vals, tasks, strict=True)) == []
    assert len(trees) == len(roots)
    # complete every other tree, in reverse order
    half = slice(None, None, -2)
    out = trees.apply(zip([ACK] * len(roots[half]), roots[half], vals[half], [-1] * len(roots[half]), strict=True))
    assert sorted(out) == sorted((ACK, root, task) for root, task in zip(roots[half], tasks[half], strict=True))
    assert len(trees) == len(roots) - len(roots[half])
    # the rest still complete, after the deleted slots
    rest = [i for i in range(len(roots)) if i % 2 != (len(roots) - 1) % 2]
    out = trees.apply((ACK, roots[i], vals[i], -1) for i in rest)
    assert sorted(root for _, root, _ in out) == sorted(roots[i] for i in rest)
    assert len(trees) == 0


def test_slot_reuse_after_many_completed_trees():
    """Trees come and go far beyond the table's capacity: deleted slots must not break lookups."""
    rng = random.Random(11)
    acker = Acker()
    live: dict[int, list[AckerMessage]] = {}
    acked = 0
    for _ in range(3000):
        root = rng.getrandbits(63) + 2
        live[root] = tree_messages(rng, root=root, spout_task=1, size=3)
        apply(acker, [live[root].pop(0)])
        if len(live) > 50:
            victim = rng.choice(list(live))
            notes = apply(acker, live.pop(victim))
            assert [(n.kind, n.root) for n in notes] == [(ACK, victim)]
            acked += 1
    assert acker.pending == len(live)
    for root, rest in live.items():
        assert [(n.kind, n.root) for n in apply(acker, rest)] == [(ACK, root)]
    assert acker.pending == 0


class ModelAcker:
    """The acker's semantics written plainly, message by message with a dict, as Storm's acker runs:
    a tree is decided by the first message after which its spout task is known and it has seen a
    fail (sticky) or holds 0; a message for a decided root starts a new entry, which has no INIT. A
    RESET of an undecided tree is told to its spout task once the task is known."""

    def __init__(self) -> None:
        self.trees: dict[int, dict] = {}
        self.gen = 0

    def apply(self, batch: list[AckerMessage]) -> set[tuple[int, int, int]]:
        """The ACK, FAIL and RESET notifications of the batch."""
        notes = set()
        for msg in batch:
            if msg.root < 2:
                continue
            tree = self.trees.setdefault(msg.root, {"val": 0, "task": -1, "failed": False, "reset": False,
                                                    "gen": self.gen})
            tree["val"] ^= msg.val
            if msg.kind == INIT:
                tree["task"] = msg.task
            if msg.kind == FAIL:
                tree["failed"] = True
            if msg.kind in (FAIL, RESET):
                tree["gen"] = self.gen
            if msg.kind == RESET:
                tree["reset"] = True
            if tree["task"] >= 0 and (tree["failed"] or tree["val"] == 0):
                notes.add((FAIL if tree["failed"] else ACK, msg.root, tree["task"]))
                del self.trees[msg.root]
            elif tree["task"] >= 0 and tree["reset"]:
                notes.add((RESET, msg.root, tree["task"]))
                tree["reset"] = False
        return notes

    def rotate(self) -> None:
        self.gen += 1
        self.trees = {r: t for r, t in self.trees.items() if self.gen - t["gen"] < 3}


def random_traffic(rng: random.Random, trees: int) -> list[AckerMessage]:
    """Trees of random shapes, some failed, some reset, some never completed, overlapping in time."""
    messages: list[AckerMessage] = []
    for _ in range(trees):
        root = rng.getrandbits(64) | 2
        tree = tree_messages(rng, root=root, spout_task=rng.randrange(1, 9), size=rng.randint(1, 8))
        if rng.random() < 0.1:
            tree.insert(rng.randrange(len(tree) + 1), AckerMessage(FAIL, root, 0))
        if rng.random() < 0.1:
            tree.insert(rng.randrange(len(tree) + 1), AckerMessage(RESET, root, 0))
        if rng.random() < 0.05:
            tree.pop()  # an ack that never comes: the tree stays pending until rotated out
        messages += tree
    # mostly in order, with trees overlapping: shuffle within a sliding window
    for i in range(len(messages) - 1):
        j = min(len(messages) - 1, i + rng.randrange(40))
        messages[i], messages[j] = messages[j], messages[i]
    return messages


def verdicts(acker: Acker, batch: list[AckerMessage]) -> set[tuple[int, int, int]]:
    return {(n.kind, n.root, n.task) for n in apply(acker, batch)}


@pytest.mark.parametrize("seed", range(5))
def test_the_table_agrees_with_a_message_by_message_model_under_random_traffic(seed):
    rng = random.Random(2000 + seed)
    messages = random_traffic(rng, 3000)
    acker, model = Acker(), ModelAcker()
    i = 0
    while i < len(messages):
        batch = messages[i:i + rng.randint(1, 300)]
        i += len(batch)
        assert verdicts(acker, batch) == model.apply(batch)
        if rng.random() < 0.05:
            acker.rotate()
            model.rotate()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), cuts=st.lists(st.integers(1, 400), min_size=1, max_size=30))
def test_verdicts_do_not_depend_on_how_messages_fall_into_batches(seed, cuts):
    """The same messages in the same order, cut into batches two ways: the same verdicts. (Before, a
    fail and the completing acks in one batch gave an ACK, and in two batches a FAIL.)"""
    messages = random_traffic(random.Random(seed), 150)
    one_by_one, batched = Acker(), Acker()
    expected = set().union(*(verdicts(one_by_one, [m]) for m in messages))
    got: set = set()
    i, k = 0, 0
    while i < len(messages):
        size = cuts[k % len(cuts)]
        got |= verdicts(batched, messages[i:i + size])
        i, k = i + size, k + 1
    assert got == expected


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), cuts=st.lists(st.integers(1, 400), min_size=1, max_size=30))
def test_a_frames_columns_give_the_verdicts_of_its_messages_one_by_one(seed, cuts):
    """An acker applies another process's frame from its columns, without an object per message: the
    same verdicts, in the same order, as the same messages applied one by one."""
    messages = random_traffic(random.Random(seed), 150)
    one_by_one, columns = Acker(), Acker()
    expected = [note for m in messages for note in one_by_one.process_messages([m])]
    got = []
    i, k = 0, 0
    while i < len(messages):
        frame = messages[i:i + cuts[k % len(cuts)]]
        kinds, roots, vals, tasks = zip(*frame, strict=True)
        got += columns.process_batch(AckBatch(array("B", kinds), array("Q", roots), array("Q", vals),
                                              array("i", tasks)))
        i, k = i + len(frame), k + 1
    assert got == expected


def test_a_fail_is_sticky_even_when_the_completing_acks_share_its_batch():
    rng = random.Random(5)
    root = 77
    tree = tree_messages(rng, root=root, spout_task=3, size=4)
    fail_first = [tree[0], AckerMessage(FAIL, root, 0), *tree[1:]]
    assert verdicts(Acker(), fail_first) == {(FAIL, root, 3)}
    assert verdicts(Acker(), [*tree, AckerMessage(FAIL, root, 0)]) == {(ACK, root, 3)}  # complete first: ACK


def test_a_million_pending_trees_take_at_most_40_bytes_each_in_the_table():
    """A size assertion (not a timing one): the table's arrays over the trees they hold."""
    trees = PendingTrees()
    rng = np.random.default_rng(3)
    batch = 4096
    for start in range(0, 1_000_000, batch):
        n = min(batch, 1_000_000 - start)
        roots = rng.integers(2, 2**64 - 1, n, dtype=np.uint64, endpoint=True).tolist()
        vals = rng.integers(1, 2**64 - 1, n, dtype=np.uint64, endpoint=True).tolist()
        assert trees.apply(zip([INIT] * n, roots, vals, [7] * n, strict=True)) == []
    assert len(trees) == 1_000_000
    assert trees.nbytes / len(trees) <= 40


def test_a_spout_task_id_beyond_the_tables_range_is_refused_not_truncated():
    trees = PendingTrees()
    with pytest.raises(ValueError, match="spout task id 65535 is outside 0..65534"):
        trees.apply([(INIT, 5, 1, 65535)])
    assert len(trees) == 0


@pytest.mark.parametrize("spouts, ackers", [(1, 1), (1, 3), (2, 2), (3, 2), (2, 5), (4, 3), (5, 1)])
def test_each_spout_task_draws_roots_for_its_own_ackers_and_every_acker_has_one(spouts, ackers):
    """Roots are still routed as Storm routes them (``root % ackers``), but each spout task draws them
    for its share of the ackers, so an acker sends verdicts to the workers of its spout tasks only. No
    acker may be left without a spout task (it would idle while the others carry its load), and a
    spout task's roots must reach every acker of its share."""
    from squall.executor.collectors import AckerRoute, EdgeIds, new_root

    route = AckerRoute(range(100, 100 + ackers), range(1, 1 + spouts))
    ids = EdgeIds(7)
    assert set(route.residues) == set(range(1, 1 + spouts))
    for residues in route.residues.values():
        roots = [new_root(ids, route.n, residues) for _ in range(300)]
        assert all(2 <= root < 2**64 for root in roots)
        assert len(set(roots)) == len(roots)
        assert {root % route.n for root in roots} == set(residues)
    shares = list(route.residues.values())
    assert set().union(*shares) == set(range(ackers))  # every acker has a spout task
    if spouts >= ackers:
        assert all(len(share) == 1 for share in shares)
    else:  # fewer spout tasks: the ackers are split between them, none shared
        assert sum(map(len, shares)) == ackers


def test_roots_near_the_top_of_the_range_stay_64_bit():
    """A draw whose residue would carry the root past 2**64 - 1 is refused (drawn again), not wrapped or
    truncated; so is one that gives a reserved root."""
    from squall.executor.collectors import root_of

    assert root_of(2**64 - 1, 3, 2) == 0  # 2**64 - 1 is 0 mod 3: + 2 leaves the range
    assert root_of(2**64 - 3, 3, 2) == 2**64 - 2  # 2**64 - 3 is 1 mod 3
    assert root_of(2**64 - 1, 1, 0) == 2**64 - 1
    assert root_of(0, 1, 0) == root_of(1, 1, 0) == 0  # 0 and 1 are reserved
    assert root_of(5, 1, 0) == 5 and root_of(7, 4, 1) == 5


def test_a_draining_acker_waits_only_for_trees_it_can_still_decide():
    """A FAIL (or ACK) for a tree decided before leaves an entry without an INIT that never gives a
    verdict: it must not hold a draining acker until the message timeout (a worker that exits breaks
    its peers' streams, and they fail the trees of frames that were in fact read). A tree whose INIT
    was seen still counts."""
    acker = Acker()
    assert acker.process_messages([(INIT, 10, 5, 7)]) == []
    assert acker.trees.awaiting() == 1
    assert [n.kind for n in acker.process_messages([(ACK, 10, 5, -1)])] == [ACK]
    assert acker.pending == 0 and acker.trees.awaiting() == 0
    acker.process_messages([(FAIL, 10, 0, -1)])  # late: the tree was decided
    assert acker.pending == 1 and acker.trees.awaiting() == 0
    acker.process_messages([(INIT, 11, 3, 7)])
    assert acker.pending == 2 and acker.trees.awaiting() == 1


def test_edge_ids_are_splitmix64_and_each_collector_seeds_its_own():
    """Edge ids come from splitmix64 (the same numbers compiled and interpreted: this file runs both
    ways), seeded from os.urandom, so two collectors never draw the same sequence."""
    from squall.executor.collectors import EdgeIds

    ids = EdgeIds(0)
    assert [ids.next() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    wrapped = EdgeIds(2**64 - 1)  # the state wraps at 2**64, as the C uint64 does
    assert all(0 <= wrapped.next() < 2**64 for _ in range(1000))
    a, b = EdgeIds(), EdgeIds()
    drawn = [a.next() for _ in range(1000)]
    assert drawn != [b.next() for _ in range(1000)]
    assert len(set(drawn)) == 1000 and max(drawn) >= 2**63  # 64-bit ids, none repeated


def test_an_acker_of_this_process_applies_messages_at_once_or_after_what_waits_before_them():
    """A message for an acker of the same process is applied when it is sent, without a trip through
    the acker's inbox; one sent while the sender has sends waiting goes behind them and reaches the
    acker through its inbox. The tree is decided once its last edge is acked, whichever way it came."""
    from squall.acker.acker import Notification
    from squall.executor.acker import AckerExecutor
    from squall.executor.base import Executor, Transfer

    transfer = Transfer(capacity=1)
    spout = Executor(component="sentences", tasks=(1,), transfer=transfer)  # stands for spout task 1
    acker = AckerExecutor(task=2, transfer=transfer)
    bolt = Executor(component="count", tasks=(3,), transfer=transfer)

    bolt.send_message(2, INIT, 40, 0b011, 1)
    bolt.send_message(2, ACK, 40, 0b001, -1)
    assert not acker.inbox and acker.acker.pending == 1  # applied at once, and one edge is left

    spout.inbox.append("busy")  # task 1's inbox is full: the next send to it waits in the overflow
    bolt.send(1, "waits")
    bolt.send_message(2, ACK, 40, 0b010, -1)  # behind it, not applied ahead of it
    assert list(bolt.overflow) == [(1, "waits"), (2, (ACK, 40, 0b010, -1))]
    assert acker.acker.pending == 1

    spout.inbox.clear()
    assert bolt.flush()
    assert list(spout.inbox) == ["waits"] and list(acker.inbox) == [(ACK, 40, 0b010, -1)]
    assert acker.acker.pending == 1
    spout.inbox.clear()
    assert acker.run_once(0.0)
    assert list(spout.inbox) == [Notification(ACK, 40, 1)] and acker.acker.pending == 0
