"""Exactly-once checkpoints against a model: two offset-spout tasks (each a partition of words) feed a
stateful count over FIFO links; the real checkpoint spout, the real spout and bolt sides of the protocol
(:class:`CheckpointedSpout`, :class:`CheckpointedTask` with its aligned barrier) and real SQLite stores
are driven through any interleaving of emits, deliveries, checkpoints, background writes finishing,
failed records and deaths of any process.

The property (exactly once): whenever the spouts' and the count's stores hold the same checkpoint, the
committed counts are a fold over exactly the records before the committed positions, each once; and
once faults stop, the positions reach the end with every word at its true count."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from squall import StatefulBolt
from squall.executor.checkpointing import CheckpointedSpout, CheckpointedTask
from squall.state.checkpoint import Barrier, CheckpointSpout
from squall.state.stores import SqliteStore
from squall.tuples import ACKED, FAILED

CHECKPOINT_TASK, SPOUTS, COUNT_TASK = 9, (1, 2), 5


@dataclass(eq=False)
class Tree:
    """A checkpoint's tuple tree: complete when every tuple made for it is acked, failed by any fail."""

    msg_id: Any
    outstanding: int = 0
    failed: bool = False
    settled: bool = False


@dataclass(eq=False)
class FakeTuple:
    values: list[Any]
    source_task: int
    source_stream: str = "default"
    tree: Tree | None = None
    done: int = 0

    @property
    def root(self) -> int | None:
        return id(self.tree) if self.tree is not None else None

    def __getitem__(self, name: str) -> Any:
        return self.values[0]


class Collector:
    """A task's collector: a forwarded checkpoint goes down ``link`` (none: the count forwards to no one)."""

    def __init__(self, task: int, link: collections.deque | None) -> None:
        self.task, self.link = task, link

    def emit(self, values, *, anchors=None, stream="default") -> list[int]:
        assert stream == "__checkpoint", "the model's count emits nothing else"
        if self.link is not None:
            (tree,) = {a.tree for a in ([anchors] if isinstance(anchors, FakeTuple) else anchors)}
            tree.outstanding += 1
            self.link.append(FakeTuple(list(values), self.task, "__checkpoint", tree))
        return []

    def ack(self, tup: FakeTuple) -> None:
        if not tup.done:
            tup.done = ACKED
            if tup.tree is not None:
                tup.tree.outstanding -= 1

    def fail(self, tup: FakeTuple) -> None:
        tup.done = FAILED
        if tup.tree is not None:
            tup.tree.failed = True

    def report_error(self, exc: BaseException) -> None:
        raise AssertionError(f"a task reported {exc!r}")


class WordSpout:
    """An offset spout over one partition: ``next`` is the first offset not emitted."""

    def __init__(self, name: str, words: list[str]) -> None:
        self.name, self.words = name, words
        self.next, self.rewound, self.lost = 0, False, False

    def snapshot(self) -> dict[str, int] | None:
        return None if self.lost else {self.name: self.next}

    def rewind(self, positions) -> None:
        self.next, self.rewound, self.lost = positions.get(self.name, 0), True, False

    def commit_positions(self, positions) -> None:
        pass


class Count(StatefulBolt):
    outputs: list[str] = []

    def execute(self, tup):
        self.state.put(tup["word"], self.state.get(tup["word"], 0) + 1)


@dataclass
class World:
    directory: Any
    partitions: dict[int, list[str]]
    links: dict[int, collections.deque] = field(default_factory=lambda: {s: collections.deque() for s in SPOUTS})
    writes: collections.deque = field(default_factory=collections.deque)  # the count's writes under way
    trees: list[Tree] = field(default_factory=list)
    poisoned: bool = False  # the next record the count executes fails

    def __post_init__(self) -> None:
        self.conf = {"topology.state.provider": "embedded", "topology.state.dir": str(self.directory),
                     "topology.state.checkpoint.interval.ms": 0}
        self.spouts = {s: self.start_spout(s) for s in SPOUTS}
        self.start_count()
        self.start_checkpoint_spout()

    def store(self, name: str) -> SqliteStore:
        return SqliteStore(self.directory / f"{name}.db")

    def start_spout(self, task: int) -> CheckpointedSpout:
        spout = WordSpout(f"p{task}", self.partitions[task])
        return CheckpointedSpout(spout=spout, collector=Collector(task, self.links[task]),
                                 open_store=lambda: self.store(f"spout-{task}"))

    def start_count(self) -> None:
        self.writes.clear()  # a write under way dies with its process
        bolt = Count()
        out = Collector(COUNT_TASK, None)

        def run(tup):
            if self.poisoned:
                self.poisoned = False
                out.fail(tup)
            else:
                bolt.execute(tup)

        self.count = CheckpointedTask(barrier=Barrier(frozenset(SPOUTS)), collector=out, bolt=bolt,
                                      open_store=lambda: self.store("count"), run=run,
                                      submit=lambda work, done: self.writes.append((work, done)), exactly_once=True)
        self.count.open()
        bolt.prepare({}, None, self.count.collector)

    def start_checkpoint_spout(self) -> None:
        self.checkpoint_spout = CheckpointSpout()
        self.emitted: list = []
        collector = SimpleNamespace(emit=lambda values, *, stream, msg_id: self.emitted.append((values, msg_id)))
        context = SimpleNamespace(topology_name="eo", task_id=CHECKPOINT_TASK, this_task_index=0)
        self.conf["topology.state.dir"] = str(self.directory)
        self.checkpoint_spout.open(self.conf, context, collector)
        self.trees = []  # a new incarnation hears no verdict of the old one's trees

    # -- steps ----------------------------------------------------------------------------------

    def emit(self, task: int) -> None:
        side = self.spouts[task]
        spout = side.spout
        if spout.rewound and spout.next < len(spout.words):
            self.links[task].append(FakeTuple([spout.words[spout.next]], task))
            spout.next += 1

    def deliver(self, task: int) -> None:
        if self.links[task]:
            tup = self.links[task].popleft()
            (self.count.checkpoint if tup.source_stream == "__checkpoint" else self.count.take)(tup)

    def checkpoint(self) -> None:
        self.checkpoint_spout.next_tuple()
        for values, msg_id in self.emitted:
            tree = Tree(msg_id, outstanding=len(SPOUTS))
            self.trees.append(tree)
            for side in self.spouts.values():
                side.checkpoint(FakeTuple(list(values), CHECKPOINT_TASK, "__checkpoint", tree))
        self.emitted.clear()

    def finish_write(self) -> None:
        if self.writes:
            work, done = self.writes.popleft()
            work()
            done(None)

    def die(self, who: str) -> None:
        """A process dies: what was on its links is lost, and every checkpoint in flight fails (its tree
        loses a tuple: failed at once, or timed out)."""
        for tree in self.trees:
            tree.failed = True
        if who == "count":
            for link in self.links.values():
                link.clear()
            self.count.close()
            self.start_count()
        elif who == "checkpoint":
            self.checkpoint_spout.close()
            self.start_checkpoint_spout()
        else:
            task = int(who)
            self.links[task].clear()
            self.spouts[task].close()
            self.spouts[task] = self.start_spout(task)

    def settle(self) -> None:
        """The checkpoint spout hears its trees' verdicts."""
        for tree in self.trees:
            if tree.settled:
                continue
            if tree.failed:
                tree.settled = True
                self.checkpoint_spout.fail(tree.msg_id)
            elif tree.outstanding == 0:
                tree.settled = True
                self.checkpoint_spout.ack(tree.msg_id)

    # -- what the stores hold -------------------------------------------------------------------

    def committed(self) -> tuple[set[int], collections.Counter, dict[int, int]]:
        stores = {s: self.store(f"spout-{s}") for s in SPOUTS}
        count = self.store("count")
        try:
            loaded = {s: store.load() for s, store in stores.items()}
            txid, counts = count.load()
        finally:
            for store in [*stores.values(), count]:
                store.close()
        txids = {txid, *(t for t, _ in loaded.values())}
        return txids, collections.Counter(counts), {s: items.get(f"p{s}", 0) for s, (_, items) in loaded.items()}

    def check(self) -> None:
        txids, counts, positions = self.committed()
        if len(txids) == 1 and txids != {-1}:  # one checkpoint everywhere: it must be a consistent cut
            truth = collections.Counter(w for s in SPOUTS for w in self.partitions[s][:positions[s]])
            assert counts == truth, f"checkpoint {txids}: counts {dict(counts)}, records before {positions}"


STEP = st.sampled_from(["emit 1", "emit 2"] * 3 + ["deliver 1", "deliver 2"] * 3 + ["checkpoint", "write"] * 2
                       + ["poison", "die count", "die 1", "die 2", "die checkpoint"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(steps=["checkpoint", "deliver 1", "deliver 2", "emit 1", "poison", "deliver 1"], one=["a"], two=[])  # failed
@example(steps=["checkpoint", "die 1"], one=[], two=["a"])  # an INITSTATE's copies of two attempts
@given(steps=st.lists(STEP, max_size=150), one=st.lists(st.sampled_from("abc"), max_size=10),
       two=st.lists(st.sampled_from("abc"), max_size=10))
def test_exactly_once_state_is_a_fold_over_a_prefix_of_each_partition_each_record_once(tmp_path_factory, steps,
                                                                                        one, two):
    world = World(directory=tmp_path_factory.mktemp("eo"), partitions={1: one, 2: two})
    for step in steps:
        verb, _, arg = step.partition(" ")
        if verb == "emit":
            world.emit(int(arg))
        elif verb == "deliver":
            world.deliver(int(arg))
        elif verb == "checkpoint":
            world.checkpoint()
        elif verb == "write":
            world.finish_write()
        elif verb == "poison":
            world.poisoned = True
        else:
            world.die(arg)
        world.settle()
        world.check()
    world.poisoned = False
    for _ in range(40):  # then no more faults: every record is read and checkpointed
        for task in SPOUTS:
            for _ in range(len(world.partitions[task])):
                world.emit(task)
        for task in SPOUTS:
            while world.links[task]:
                world.deliver(task)
        while world.writes:
            world.finish_write()
        world.settle()
        world.checkpoint()
        world.settle()
        world.check()
        txids, counts, positions = world.committed()
        if len(txids) == 1 and all(positions[s] == len(world.partitions[s]) for s in SPOUTS):
            break
    txids, counts, positions = world.committed()
    assert len(txids) == 1 and positions == {s: len(world.partitions[s]) for s in SPOUTS}, (txids, positions)
    assert counts == collections.Counter(one + two)


def test_a_spout_whose_tuple_failed_fails_the_prepare_and_the_topology_goes_back(tmp_path):
    """A failed (or timed-out) spout tuple leaves its spout without positions to record: the PREPARE fails at
    that spout, never reaching the count, and the recovery rewinds every spout to the last commit."""
    world = World(directory=tmp_path, partitions={1: ["a", "b"], 2: ["c"]})
    world.checkpoint()  # INITSTATE: the spouts rewind and may emit
    for task in SPOUTS:
        world.deliver(task)
    world.settle()
    world.emit(1)
    world.deliver(1)
    world.spouts[1].spout.lost = True  # its tuple for "a" failed downstream, as OffsetCore.fail marks it
    world.checkpoint()  # PREPARE 0
    prepare = world.trees[-1]
    assert prepare.failed and world.links[1] == collections.deque(), "not forwarded by the spout that lost"
    world.settle()
    world.checkpoint()  # the recovery: ROLLBACK
    world.settle()
    assert world.spouts[1].spout.next == 0 and not world.spouts[1].spout.lost, "rewound to the last commit"
