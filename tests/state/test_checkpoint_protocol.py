"""Storm's checkpoint protocol against a model: the checkpoint spout's phases, a bolt task's barrier, and a
stateful task driven through any interleaving of records, checkpoints, lost checkpoint tuples and deaths
of its process or of the checkpoint spout's, with the real task, state and SQLite store.

The property (at least once): once every record is acked, the committed state is a fold over the
records, each at least once, and no record is counted more often than it was executed."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall import StatefulBolt
from squall.executor.checkpointing import CheckpointedTask
from squall.state.checkpoint import COMMIT, COMMITTED, INITSTATE, PREPARE, ROLLBACK, Barrier, CheckpointSpout, Progress
from squall.state.stores import SqliteStore
from squall.tuples import ACKED, FAILED

SPOUT_TASK = 9  # the checkpoint spout's task


def test_the_spouts_phases_follow_storms_checkpoint_state():
    start = Progress(-1, COMMITTED)
    assert start.emit(recovering=True) == (INITSTATE, -1, start)
    action, txid, preparing = start.emit(recovering=False)
    assert (action, txid, preparing) == (PREPARE, 0, Progress(0, "PREPARING"))
    assert preparing.emit(recovering=True) == (ROLLBACK, 0, preparing)  # a failed PREPARE rolls back
    assert preparing.acked(ROLLBACK, 0) == Progress(-1, COMMITTED)
    action, txid, committing = preparing.acked(PREPARE, 0).emit(recovering=False)
    assert (action, txid) == (COMMIT, 0)
    assert committing.emit(recovering=True)[:2] == (COMMIT, 0)  # a failed COMMIT is retried, never rolled back
    assert committing.acked(COMMIT, 0) == Progress(0, COMMITTED)


@dataclass(eq=False)
class FakeTuple:
    values: list[Any]
    source_task: int
    done: int = 0
    root: int | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[0]


def test_a_barrier_acts_once_every_input_sent_the_checkpoint_and_fails_what_earlier_attempts_left():
    barrier = Barrier(frozenset({1, 2}))
    first = FakeTuple([0, PREPARE], 1)
    assert barrier.arrive(first) == (None, [])
    again = FakeTuple([0, PREPARE], 1)  # task 1 sends it again: the first copy was of an attempt that failed
    assert barrier.arrive(again) == (None, [first])
    lost = FakeTuple([0, COMMIT], 1)  # an attempt that never completes here (task 2's copy was lost)
    assert barrier.arrive(lost) == (None, [])
    second = FakeTuple([0, PREPARE], 2)
    complete, failed = barrier.arrive(second)
    assert complete == [again, second] and failed == [lost]


class Collector:
    """What a task's BoltCollector does, recorded: an ack or fail decides the tuple."""

    def __init__(self) -> None:
        self.forwarded: list[tuple[int, str]] = []

    def ack(self, tup: FakeTuple) -> None:
        if not tup.done:
            tup.done = ACKED

    def fail(self, tup: FakeTuple) -> None:
        tup.done = FAILED

    def emit(self, values, *, anchors=None, stream="default") -> list[int]:
        if stream == "__checkpoint":
            self.forwarded.append(tuple(values))
        return []

    def report_error(self, exc: BaseException) -> None:
        raise AssertionError(f"the task reported {exc!r}")


def at_once(work, done) -> None:
    """Runs a commit's write in the calling thread (the engine's runs it on a thread of its own)."""
    try:
        work()
    except Exception as exc:  # noqa: BLE001 - handed to done, as the engine's does
        done(exc)
        return
    done(None)


class Count(StatefulBolt):
    outputs = ["word", "count"]

    def execute(self, tup):
        self.state.put(tup["word"], self.state.get(tup["word"], 0) + 1)
        self.executed[tup["word"]] += 1
        self.collector.emit([tup["word"], self.state.get(tup["word"])])


class SpoutCollector:
    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], Any]] = []

    def emit(self, values, *, stream="default", msg_id=None) -> list[int]:
        self.emitted.append((values, msg_id))
        return [1]


@dataclass
class World:
    """One stateful task fed by a replaying source and the real checkpoint spout, in one thread; the task's
    state and the spout's progress in SQLite files, as the embedded store keeps them."""

    directory: Any
    records: list[str]
    executed: collections.Counter = field(default_factory=collections.Counter)
    queue: collections.deque = field(default_factory=collections.deque)  # record ids to emit (fresh or replays)
    in_flight: dict[int, FakeTuple] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.queue.extend(range(len(self.records)))
        self.conf = {"topology.state.provider": "embedded", "topology.state.dir": str(self.directory),
                     "topology.state.checkpoint.interval.ms": 0}
        self.start_task()
        self.start_spout()

    def store(self) -> SqliteStore:
        return SqliteStore(self.directory / "wc" / "count-1.db")

    def start_task(self) -> None:
        bolt = Count()
        bolt.executed = self.executed
        self.out = Collector()
        self.task = CheckpointedTask(barrier=Barrier(frozenset({SPOUT_TASK})), collector=self.out, bolt=bolt,
                                     open_store=self.store, run=lambda tup: bolt.execute(tup), submit=at_once)
        self.task.open()
        bolt.prepare({}, None, self.task.collector)

    def start_spout(self) -> None:
        self.spout, self.spout_out = CheckpointSpout(), SpoutCollector()
        context = SimpleNamespace(topology_name="wc", task_id=SPOUT_TASK, this_task_index=0)
        self.spout.open(self.conf, context, self.spout_out)

    def settle(self) -> None:
        """The spout hears its trees' verdicts: acked ones are done, failed ones replay."""
        for rid, tup in list(self.in_flight.items()):
            if tup.done == ACKED:
                self.acked.add(rid)
                del self.in_flight[rid]
            elif tup.done == FAILED:
                del self.in_flight[rid]
                self.queue.append(rid)

    def deliver_record(self) -> None:
        if self.queue:
            rid = self.queue.popleft()
            tup = self.in_flight[rid] = FakeTuple([self.records[rid]], 1)
            self.task.execute(tup)
        self.settle()

    def checkpoint(self, *, lost: bool = False) -> None:
        """The checkpoint spout emits; its tuple reaches the task (or is lost), and its tree's verdict the spout."""
        self.spout.next_tuple()
        if not self.spout_out.emitted:
            return
        (values, msg_id), = self.spout_out.emitted
        self.spout_out.emitted.clear()
        before = len(self.out.forwarded)
        if not lost:
            self.task.checkpoint(FakeTuple(values, SPOUT_TASK))
        if len(self.out.forwarded) > before:  # forwarded: the tree completes
            self.spout.ack(msg_id)
        else:  # failed, or lost and timed out
            self.spout.fail(msg_id)
        self.settle()

    def task_dies(self) -> None:
        """Its process is killed: what it held is gone, their trees time out and replay."""
        for tup in self.in_flight.values():
            tup.done = FAILED
        self.settle()
        self.start_task()

    def spout_dies(self) -> None:
        self.start_spout()


STEPS = st.lists(st.sampled_from(["record", "record", "record", "checkpoint", "checkpoint", "lost", "task dies",
                                  "spout dies"]), max_size=120)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, words=st.lists(st.sampled_from("abc"), min_size=1, max_size=12))
def test_committed_state_is_a_fold_over_every_record_at_least_once_whatever_happens(tmp_path_factory, steps, words):
    world = World(directory=tmp_path_factory.mktemp("state"), records=words)
    act = {"record": world.deliver_record, "checkpoint": world.checkpoint,
           "lost": lambda: world.checkpoint(lost=True), "task dies": world.task_dies, "spout dies": world.spout_dies}
    for step in steps:
        act[step]()
    for _ in range(10 * len(words) + 20):  # then no more faults, until every record is acked
        if len(world.acked) == len(words):
            break
        world.deliver_record()
        world.checkpoint()
    assert len(world.acked) == len(words)
    _, committed = world.store().load()
    truth = collections.Counter(words)
    for word, count in truth.items():
        assert committed.get(word, 0) >= count, f"{word!r} counted {committed.get(word, 0)} times of {count}"
        assert committed[word] <= world.executed[word]
    assert set(committed) <= set(truth)
