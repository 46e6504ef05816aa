"""Stream groupings: where each tuple goes, checked on a running topology (and, for the fields
grouping, across processes with different hash seeds)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter, deque

import pytest

from engine_kit import Numbers, run_until_quiet
from squall import Bolt, EmitError, Spout, TopologyBuilder, direct
from squall.grouping import CHECK_EVERY, Locality, make_grouper
from squall.testing import LocalCluster
from squall.topology.plan import Subscriber
from squall.topology.spec import Grouping, Input
from squall.tuples import Fields

# Keys of every supported type; the dicts are equal but built in different orders.
KEYS = ["apple", "banana", "", "ünïcødé", 0, 1, -7, 2**63 - 1, 3.5, b"raw", None, True, [1, "x"],
        {"a": 1, "b": [2, 3]}, {"b": [2, 3], "a": 1}, *[f"word-{i}" for i in range(40)]]


class Recorder(Bolt):
    """Records every non-tick input as ``(values, this task id)`` and acks it."""

    outputs = ["key", "n"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.got: list[tuple[list, int]] = []

    def execute(self, tup):
        self.got.append((list(tup.values), self.context.task_id))
        self.collector.ack(tup)


class KeySpout(Spout):
    """Emits ``[key, n]`` for n in range(conf["count"]), cycling over ``conf["keys"]``; tracked."""

    outputs = ["key", "n"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
        self.acked = 0

    def next_tuple(self):
        if self.n < self.conf["count"]:
            keys = self.conf["keys"]
            self.collector.emit([keys[self.n % len(keys)], self.n], msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.acked += 1


def received(cluster: LocalCluster, component: str) -> list[tuple[list, int]]:
    return [got for bolt in cluster.instances(component) for got in bolt.got]


def run_grouping(declare, *, count: int, tasks: int, keys=("k",),
                 spout: type[KeySpout] = KeySpout) -> tuple[LocalCluster, list[tuple[list, int]]]:
    builder = TopologyBuilder("groupings")
    builder.set_spout("spout", spout, config={"count": count, "keys": list(keys)})
    declare(builder.set_bolt("bolt", Recorder, parallelism=2, tasks=tasks))
    cluster = LocalCluster(builder.build())
    run_until_quiet(cluster, lambda: cluster.instance("spout").acked == count)
    cluster.shutdown()
    return cluster, received(cluster, "bolt")


def test_shuffle_spreads_tuples_evenly_over_every_task():
    cluster, got = run_grouping(lambda b: b.shuffle_grouping("spout"), count=6000, tasks=4)
    per_task = Counter(task for _, task in got)
    assert set(per_task) == set(cluster.plan.component_tasks["bolt"])
    assert all(1350 <= n <= 1650 for n in per_task.values()), per_task  # 1500 each, ±10 %
    assert sorted(values[1] for values, _ in got) == list(range(6000))  # each tuple exactly once


def test_fields_sends_equal_keys_to_one_task_and_spreads_keys():
    cluster, got = run_grouping(lambda b: b.fields_grouping("spout", ["key"]), count=len(KEYS) * 5,
                                tasks=5, keys=KEYS)
    tasks_of: dict[str, set[int]] = {}
    for values, task in got:
        tasks_of.setdefault(json.dumps(values[0], sort_keys=True, default=repr), set()).add(task)
    assert len(tasks_of) == len(KEYS) - 1  # the two dicts are one key
    assert all(len(tasks) == 1 for tasks in tasks_of.values()), tasks_of
    assert {t for tasks in tasks_of.values() for t in tasks} == set(cluster.plan.component_tasks["bolt"])


def test_fields_grouping_hashes_only_the_key_fields():
    grouping = Input(component="spout", grouping=Grouping(type="fields", fields=["key"]))
    grouper = make_grouper(Subscriber("bolt", grouping, (4, 5, 6, 7)), source=("spout", "default"),
                           fields=Fields(["n", "key"]), task_id=1, local_tasks=frozenset(), context=None,
                           rng=random.Random(0))
    for key in KEYS:
        assert len({tuple(grouper.choose([n, key])) for n in range(20)}) == 1


CHOOSE = """
import json, sys
from squall.grouping import make_grouper
from squall.topology.plan import Subscriber
from squall.topology.spec import Grouping, Input
from squall.tuples import Fields
tasks = tuple(json.loads(sys.argv[1]))
sub = Subscriber("bolt", Input(component="spout", grouping=Grouping(type="fields", fields=["key"])), tasks)
grouper = make_grouper(sub, source=("spout", "default"), fields=Fields(["key", "n"]), task_id=1,
                       local_tasks=frozenset(), context=None, rng=None)
print(json.dumps({"hash": hash("apple"), "tasks": [grouper.choose([key, 0]) for key in %r]}))
"""


def test_fields_grouping_agrees_across_processes_with_different_hash_seeds():
    cluster, got = run_grouping(lambda b: b.fields_grouping("spout", ["key"]), count=len(KEYS), tasks=7, keys=KEYS)
    tasks = list(cluster.plan.component_tasks["bolt"])
    in_cluster = [task for _, task in sorted(got, key=lambda g: g[0][1])]  # by n: KEYS order

    outputs = []
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", CHOOSE % (KEYS,), json.dumps(tasks)], env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        outputs.append(json.loads(proc.stdout))
    assert len({o["hash"] for o in outputs}) == 3  # precondition: Python's own hash differs per process
    choices = [[t for [t] in o["tasks"]] for o in outputs]
    assert choices[0] == choices[1] == choices[2] == in_cluster
    assert len(set(in_cluster)) > 3


def test_all_sends_every_tuple_to_every_task():
    cluster, got = run_grouping(lambda b: b.all_grouping("spout"), count=200, tasks=3)
    tasks = cluster.plan.component_tasks["bolt"]
    for task in tasks:
        assert sorted(values[1] for values, t in got if t == task) == list(range(200))
    assert len(got) == 600


def test_global_sends_every_tuple_to_the_lowest_task_only():
    cluster, got = run_grouping(lambda b: b.global_grouping("spout"), count=200, tasks=3)
    lowest = min(cluster.plan.component_tasks["bolt"])
    assert {task for _, task in got} == {lowest}
    assert sorted(values[1] for values, _ in got) == list(range(200))


class ClearingSpout(KeySpout):
    """Empties the list of task ids each emit returns."""

    def next_tuple(self):
        if self.n < self.conf["count"]:
            self.collector.emit([self.conf["keys"][0], self.n], msg_id=self.n).clear()
            self.n += 1


@pytest.mark.parametrize("grouping", ["all_grouping", "global_grouping"])
def test_the_task_list_an_emit_returns_is_the_callers_own(grouping):
    """A spout that empties what emit returned changes nothing for the next tuples: the list is a new
    one, not the grouping's own list of tasks (which all and global groupings keep)."""
    cluster, got = run_grouping(lambda b: getattr(b, grouping)("spout"), count=50, tasks=3, spout=ClearingSpout)
    assert sorted(values[1] for values, _ in got) == sorted(list(range(50)) * (3 if grouping == "all_grouping" else 1))


def test_none_delivers_each_tuple_once_to_some_task():
    cluster, got = run_grouping(lambda b: b.none_grouping("spout"), count=400, tasks=3)
    assert sorted(values[1] for values, _ in got) == list(range(400))
    assert {task for _, task in got} == set(cluster.plan.component_tasks["bolt"])


def test_local_or_shuffle_prefers_the_tasks_in_this_worker():
    sub = Subscriber("bolt", Input(component="spout", grouping=Grouping(type="localOrShuffle")), (3, 4, 5, 6))

    def choices(local: frozenset[int]) -> Counter:
        grouper = make_grouper(sub, source=("spout", "default"), fields=Fields(["key", "n"]), task_id=1,
                               local_tasks=local, context=None, rng=random.Random(1))
        return Counter(t for _ in range(1000) for t in grouper.choose(["k", 0]))

    local = choices(frozenset({1, 4, 6}))
    assert set(local) == {4, 6}
    assert abs(local[4] - local[6]) <= 100
    assert set(choices(frozenset({1, 2}))) == {3, 4, 5, 6}  # no local task: shuffle over all of them


def test_a_shuffle_keeps_to_this_workers_tasks_until_they_fall_behind():
    """Storm 2's locality-aware shuffle, on the worker's real inboxes (deques of capacity 100): local
    while the local tasks' inboxes are under 80 % full on average, every task from there on, local
    again once they are under 20 %."""
    sub = Subscriber("bolt", Input(component="spout", grouping=Grouping(type="shuffle")), (3, 4, 5, 6))
    inboxes = {4: deque(), 6: deque()}
    grouper = make_grouper(sub, source=("spout", "default"), fields=Fields(["key", "n"]), task_id=1,
                           local_tasks=frozenset({1, 4, 6}), context=None, rng=random.Random(1),
                           locality=Locality(inboxes, 100, 0.8, 0.2))

    def choices(n: int = 40 * CHECK_EVERY) -> Counter:
        return Counter(t for _ in range(n) for t in grouper.choose(["k", 0]))

    local = choices()
    assert set(local) == {4, 6} and abs(local[4] - local[6]) <= 0.1 * sum(local.values())
    inboxes[4].extend(range(100))
    inboxes[6].extend(range(59))  # on average 79.5 % full: still local
    assert set(choices()) == {4, 6}
    inboxes[6].append(59)  # 80 %: every task, evenly
    choices(CHECK_EVERY)  # the next look at the inboxes comes within this many tuples
    wide = choices()
    assert set(wide) == {3, 4, 5, 6} and min(wide.values()) >= 0.2 * sum(wide.values())
    inboxes[4].clear()
    inboxes[6] = deque(range(40))  # 20 %: still every task (the bounds' hysteresis)
    choices(CHECK_EVERY)
    assert set(choices()) == {3, 4, 5, 6}
    inboxes[6].pop()  # 19.5 %: local again
    choices(CHECK_EVERY)
    assert set(choices()) == {4, 6}


def test_a_shuffle_is_plain_without_locality_or_when_all_or_none_of_its_tasks_are_local():
    sub = Subscriber("bolt", Input(component="spout", grouping=Grouping(type="shuffle")), (3, 4, 5, 6))

    def choices(local: frozenset[int], locality: Locality | None) -> set[int]:
        grouper = make_grouper(sub, source=("spout", "default"), fields=Fields(["key", "n"]), task_id=1,
                               local_tasks=local, context=None, rng=random.Random(1), locality=locality)
        return {t for _ in range(400) for t in grouper.choose(["k", 0])}

    locality = Locality({t: deque() for t in (3, 4, 5, 6)}, 100, 0.8, 0.2)
    assert choices(frozenset({4, 6}), None) == {3, 4, 5, 6}  # localityAware.enabled false
    assert choices(frozenset({3, 4, 5, 6}), locality) == {3, 4, 5, 6}  # in one process
    assert choices(frozenset({1}), locality) == {3, 4, 5, 6}  # none in this worker


def test_local_or_shuffle_in_one_process_uses_every_task():
    cluster, got = run_grouping(lambda b: b.local_or_shuffle_grouping("spout"), count=400, tasks=4)
    assert sorted(values[1] for values, _ in got) == list(range(400))
    assert {task for _, task in got} == set(cluster.plan.component_tasks["bolt"])


class ByParity:
    """A custom grouping: even ``n`` to the first target task, odd ``n`` to the last."""

    prepared: list = []

    def prepare(self, context, stream, target_tasks):
        ByParity.prepared.append((context.task_id, stream, list(target_tasks)))
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id, values):
        return [self.targets[0] if values[1] % 2 == 0 else self.targets[-1]]


class EveryOther:
    """A custom grouping that sends some tuples to two tasks and others to none."""

    def prepare(self, context, stream, target_tasks):
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id, values):
        return self.targets[:2] if values[1] % 2 == 0 else []


def test_custom_grouping_decides_the_tasks():
    ByParity.prepared.clear()
    cluster, got = run_grouping(lambda b: b.custom_grouping("spout", ByParity), count=100, tasks=3)
    tasks = list(cluster.plan.component_tasks["bolt"])
    spout_task = cluster.plan.component_tasks["spout"][0]
    assert ByParity.prepared == [(spout_task, ("spout", "default"), tasks)]
    assert sorted(values[1] for values, t in got if t == tasks[0]) == list(range(0, 100, 2))
    assert sorted(values[1] for values, t in got if t == tasks[-1]) == list(range(1, 100, 2))
    assert not [t for _, t in got if t == tasks[1]]


def test_custom_grouping_may_choose_several_tasks_or_none():
    cluster, got = run_grouping(lambda b: b.custom_grouping("spout", EveryOther), count=100, tasks=3)
    tasks = list(cluster.plan.component_tasks["bolt"])
    assert sorted(values[1] for values, t in got if t == tasks[0]) == list(range(0, 100, 2))
    assert sorted(values[1] for values, t in got if t == tasks[1]) == list(range(0, 100, 2))
    assert len(got) == 100


class Chooses:
    """A custom grouping that returns ``Chooses.choice(context, target_tasks)``, whatever that is."""

    choice = staticmethod(lambda context, targets: targets)

    def prepare(self, context, stream, target_tasks):
        self.context, self.targets = context, list(target_tasks)

    def choose_tasks(self, task_id, values):
        return Chooses.choice(self.context, self.targets)


class RefusedSpout(KeySpout):
    """KeySpout that keeps the messages of the emits refused."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.refused: list[str] = []

    def next_tuple(self):
        if self.n < self.conf["count"]:
            self.n += 1
            try:
                self.collector.emit(["k", self.n], msg_id=self.n)
            except EmitError as exc:
                self.refused.append(str(exc))


@pytest.mark.parametrize("choice", [
    lambda context, targets: [context.task_id],  # the emitting spout's own task
    lambda context, targets: context.get_component_tasks("other"),  # a bolt that does not subscribe
    lambda context, targets: [999],  # no task at all
    lambda context, targets: [str(targets[0])],  # an id, as a string
    lambda context, targets: targets[0],  # one id, not a list
    lambda context, targets: None,
], ids=["own task", "not subscribed", "no such task", "string", "bare int", "None"])
def test_a_custom_grouping_that_chooses_a_task_it_was_not_given_is_refused_at_the_emit(monkeypatch, choice):
    monkeypatch.setattr(Chooses, "choice", staticmethod(choice))
    builder = TopologyBuilder("groupings")
    builder.set_spout("spout", RefusedSpout, config={"count": 5, "keys": ["k"]})
    builder.set_bolt("bolt", Recorder, parallelism=2).custom_grouping("spout", Chooses)
    builder.set_bolt("other", Recorder).shuffle_grouping("bolt")
    with LocalCluster(builder.build()) as cluster:
        run_until_quiet(cluster, lambda: cluster.instance("spout").n == 5)
        assert received(cluster, "bolt") == received(cluster, "other") == []
        spout = cluster.instance("spout")
        assert len(spout.refused) == 5
        assert spout.refused[0].startswith(f"custom grouping {Chooses.__module__}:Chooses chose ")
        assert "choose_tasks must return a list of ids of the tasks it was given in prepare" in spout.refused[0]
        assert cluster.pending() == 0  # nothing was sent, no tree begun


class DirectSpout(Spout):
    """Emits ``[n, target]`` on the direct stream "to", to each task of "target" in turn."""

    outputs = {"default": ["n", "target"], "to": direct("n", "target"), "lonely": direct("n")}

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.targets = context.get_component_tasks(conf.get("target", "target"))
        self.n = 0
        self.acked = 0
        self.refused: list[str] = []

    def next_tuple(self):
        if self.n == 0:
            own = self.context.task_id
            for attempt in (
                lambda: self.collector.emit_direct(own, [0, own], stream="to"),  # not a consumer of "to"
                lambda: self.collector.emit_direct(self.targets[0], [0, 0]),  # "default" is not direct
                lambda: self.collector.emit([0, 0], stream="to"),  # a direct stream needs emit_direct
                lambda: self.collector.emit_direct(self.targets[0], [0], stream="lonely"),  # no subscriber
            ):
                try:
                    attempt()
                except EmitError as exc:
                    self.refused.append(str(exc))
        if self.n < 90:
            target = self.targets[self.n % len(self.targets)]
            self.collector.emit_direct(target, [self.n, target], stream="to", msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.acked += 1


class DirectRelay(Bolt):
    """Relays each input ``[n, _]`` with emit_direct (anchored) as ``[n, task]`` to task n % 3 of "target"."""

    outputs = {"to": direct("n", "target")}

    def execute(self, tup):
        targets = self.context.get_component_tasks("target")
        target = targets[tup["n"] % len(targets)]
        self.collector.emit_direct(target, [tup["n"], target], anchors=tup, stream="to")
        self.collector.ack(tup)


def test_direct_grouping_delivers_emit_direct_to_exactly_the_named_task():
    builder = TopologyBuilder("direct")
    builder.set_spout("spout", DirectSpout)
    builder.set_bolt("target", Recorder, parallelism=2, tasks=3).direct_grouping("spout", stream="to")
    builder.set_bolt("bystander", Recorder).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: spout.acked == 90)
        got = received(cluster, "target")
        assert sorted(values[0] for values, _ in got) == list(range(90))
        assert all(values[1] == task for values, task in got)
        assert len({task for _, task in got}) == 3
        assert received(cluster, "bystander") == []  # subscribed to "default" only

        own, not_direct, plain, lonely = spout.refused
        assert "'spout'" in own and "task" in own and "'to'" in own
        assert not_direct == ("component 'spout': emit_direct on stream 'default', which is not direct; use emit on "
                              "it, or declare it with squall.direct(...) and subscribe with grouping type 'direct'")
        assert "'to'" in plain and "emit_direct" in plain
        assert lonely == ("component 'spout': emit_direct on direct stream 'lonely', which no bolt subscribes to; "
                          "subscribe one with grouping type 'direct'")


def test_a_bolt_can_emit_direct_anchored_and_the_tree_completes():
    builder = TopologyBuilder("direct-bolt")
    builder.set_spout("spout", DirectSpout, config={"target": "relay"})
    builder.set_bolt("relay", DirectRelay).direct_grouping("spout", stream="to")
    builder.set_bolt("target", Recorder, parallelism=3).direct_grouping("relay", stream="to")
    with LocalCluster(builder.build()) as cluster:
        run_until_quiet(cluster, lambda: cluster.instance("spout").acked == 90)
        got = received(cluster, "target")
        assert len(got) == 90
        assert all(values[1] == task for values, task in got)


@pytest.mark.parametrize("subscribers", [1, 3])
def test_every_subscriber_of_a_stream_gets_its_own_copy(subscribers):
    builder = TopologyBuilder("subscribers")
    builder.set_spout("spout", Numbers, config={"count": 50})
    for i in range(subscribers):
        builder.set_bolt(f"bolt{i}", Recorder).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.acked) == list(range(50))
        for i in range(subscribers):
            assert sorted(values[0] for values, _ in received(cluster, f"bolt{i}")) == list(range(50))


def test_the_single_str_key_fast_path_hashes_exactly_like_stable_hash():
    import random

    from squall.grouping import FieldsHash, stable_hash

    rng = random.Random(7)
    grouper = FieldsHash(list(range(1, 1001)), [1])
    for size in [0, 1, 31, 32, 255, 256, 65535, 65536, 70000]:
        for text in ("x" * size, "é" * (size // 2), "".join(rng.choice("ab日") for _ in range(size))):
            expected = grouper.tasks[stable_hash([text]) % 1000]
            assert grouper.choose([0, text]) == [expected], (size, text[:10])
