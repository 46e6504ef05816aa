"""The embedded durable log and LogSpout (driven by hand, with a real TopologyContext)."""

from __future__ import annotations

import logging
import sqlite3

import pytest
from spout_harness import RecordingCollector, context_for

from squall.errors import ConfigError
from squall.spouts.log import DurableLog, LogError, LogSpout, partition_for
from squall.spouts.records import TopicPartition

# ---- the log ------------------------------------------------------------------------------------


def test_offsets_count_from_zero_per_partition_and_survive_reopening(log_path):
    log = DurableLog(log_path, create=True)
    log.create_topic("clicks", partitions=2)
    placed = log.append("clicks", [(None, "a"), (None, "b"), (None, "c")])
    assert placed == [(0, 0), (1, 0), (0, 1)], "unkeyed records go round-robin"
    assert log.append("clicks", [(None, "d")]) == [(1, 1)], "round-robin continues across appends"
    log.close()

    log = DurableLog(log_path)
    assert log.topics() == {"clicks": 2}
    assert [r.value for r in log.read("clicks", 0, 0, 10)] == ["a", "c"]
    assert [(r.offset, r.value) for r in log.read("clicks", 1, 1, 10)] == [(1, "d")]
    assert log.watermarks("clicks", 0) == (0, 2)
    log.close()


def test_records_with_equal_keys_share_a_partition(log_path):
    log = DurableLog(log_path, create=True)
    log.create_topic("clicks", partitions=4)
    placed = log.append("clicks", [("alice", {"n": i}) for i in range(5)] + [({"id": 7}, 1)])
    assert {p for p, _ in placed[:5]} == {partition_for("alice", 4)}
    assert [o for _, o in placed[:5]] == [0, 1, 2, 3, 4]
    [record] = log.read("clicks", placed[5][0], placed[5][1], 1)
    assert record.key == {"id": 7} and record.value == 1 and record.timestamp is not None
    log.close()


def test_offsets_are_never_reused_after_records_are_removed(log_path):
    log = DurableLog(log_path, create=True)
    log.create_topic("t", partitions=1)
    log.append("t", [(None, i) for i in range(3)])
    with sqlite3.connect(log_path) as db:
        db.execute("DELETE FROM records WHERE off >= 1")
    assert log.watermarks("t", 0) == (0, 3)
    assert log.append("t", [(None, 3)]) == [(0, 3)]
    log.close()


def test_group_commits_keep_their_metadata_and_are_per_group(log_path):
    log = DurableLog(log_path, create=True)
    log.create_topic("t", partitions=2)
    log.commit("a", "t", {0: 5, 1: 2}, metadata="m")
    log.commit("a", "t", {0: 6})
    log.commit("b", "t", {1: 1})
    assert {p: (c.offset, c.metadata) for p, c in log.committed("a", "t").items()} == {0: (6, ""), 1: (2, "m")}
    assert {g: {p: c.offset for p, c in cs.items()} for g, cs in log.groups("t").items()} == {
        "a": {0: 6, 1: 2}, "b": {1: 1}}
    assert log.committed("c", "t") == {}
    log.close()


def test_the_log_is_in_wal_mode(log_path):
    DurableLog(log_path, create=True).close()
    with sqlite3.connect(log_path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_clear_errors_for_wrong_files_and_topics(tmp_path):
    with pytest.raises(LogError, match="no log at .*squall log produce"):
        DurableLog(tmp_path / "missing.db")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE x (y)")
    with pytest.raises(LogError, match="not a Squall log"):
        DurableLog(other)
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a database at all" * 100)
    with pytest.raises(LogError, match="not a Squall log"):
        DurableLog(text)

    log = DurableLog(tmp_path / "log.db", create=True)
    log.create_topic("t", partitions=2)
    log.create_topic("t", partitions=2)  # the same again is fine
    with pytest.raises(LogError, match="already has 2 partitions"):
        log.create_topic("t", partitions=3)
    with pytest.raises(LogError, match="topic 'nope' does not exist .*topics: t"):
        log.partition_count("nope")
    with pytest.raises(LogError, match="invalid"):
        log.create_topic("a b", partitions=1)
    log.close()


# ---- LogSpout -----------------------------------------------------------------------------------

def open_spout(conf, *, cls=LogSpout, tasks=1, index=0, name="topo"):
    spout = cls()
    collector = RecordingCollector(cls, "records")
    spout.open(conf, context_for(cls, tasks=tasks, index=index, name=name), collector)
    return spout, collector


def make_log(path, *, partitions=2, records=6):
    log = DurableLog(path, create=True)
    log.create_topic("clicks", partitions=partitions)
    log.append("clicks", [(None, {"n": i}) for i in range(records)])
    return log


def run(spout, collector, *, calls=50):
    for _ in range(calls):
        spout.next_tuple()
    return collector.emitted


def test_partitions_are_split_among_tasks_by_index(log_path):
    make_log(log_path, partitions=4).close()
    conf = {"log.path": str(log_path), "log.topic": "clicks"}
    owned = []
    for index in range(3):
        spout, _ = open_spout(conf, tasks=3, index=index)
        owned.append(sorted(tp.partition for tp in spout.core.assigned))
        spout.close()
    assert owned == [[0, 3], [1], [2]]


def test_exactly_once_a_spout_waits_for_its_first_rewind_and_has_no_positions_after_a_failure(log_path):
    """Exactly once, the topology's checkpoints say where a spout reads from: nothing before the first
    rewind; its positions are the first offsets not emitted; a failed tuple leaves it none to record (the
    checkpoint must not call that offset done) until the next rewind."""
    make_log(log_path, partitions=1, records=4).close()
    conf = {"log.path": str(log_path), "log.topic": "clicks", "topology.state.guarantee": "exactly_once"}
    spout, collector = open_spout(conf)
    assert run(spout, collector) == [], "no read before the checkpoints say where from"
    spout.rewind({"clicks/0": 1})
    emitted = run(spout, collector)
    assert [values[2] for values, _, _ in emitted] == [1, 2, 3]
    assert spout.snapshot() == {"clicks/0": 4}
    spout.fail(emitted[0][2])
    assert spout.snapshot() is None
    spout.rewind({"clicks/0": 2})
    assert spout.snapshot() == {"clicks/0": 2}
    spout.close()


def test_spout_emits_tracked_records_commits_acks_on_close_and_resumes(log_path):
    make_log(log_path).close()
    conf = {"log.path": str(log_path), "log.topic": "clicks", "log.group": "counter"}
    spout, collector = open_spout(conf)
    emitted = run(spout, collector)
    assert sorted(values[4]["n"] for values, _, _ in emitted) == list(range(6))
    values, stream, msg_id = emitted[0]
    assert stream == "default" and values[:3] == ["clicks", msg_id.partition, msg_id.offset]
    for _, _, msg_id in emitted[:4]:
        spout.ack(msg_id)
    spout.close()

    log = DurableLog(log_path)
    committed = {p: c.offset for p, c in log.committed("counter", "clicks").items()}
    acked = {}
    for _, _, m in emitted[:4]:
        acked[m.partition] = max(acked.get(m.partition, 0), m.offset + 1)
    assert committed == acked

    spout, collector = open_spout(conf)
    again = run(spout, collector)
    assert sorted(v[4]["n"] for v, _, _ in again) == sorted(v[4]["n"] for v, _, _ in emitted[4:]), \
        "a restarted spout resumes from the committed offsets"
    spout.close()
    log.close()


def test_default_group_is_topology_and_component(log_path):
    make_log(log_path, partitions=1, records=1).close()
    spout, collector = open_spout({"log.path": str(log_path), "log.topic": "clicks"}, name="shop")
    [(_, _, msg_id)] = run(spout, collector)
    spout.ack(msg_id)
    spout.close()
    log = DurableLog(log_path)
    assert log.committed("shop-records", "clicks")[0].offset == 1
    log.close()


class Amounts(LogSpout):
    outputs = ["n"]

    def translate(self, record):
        return [record.value["n"]] if record.value["n"] % 2 == 0 else None


def test_a_subclass_chooses_the_tuple(log_path):
    make_log(log_path, partitions=1).close()
    spout, collector = open_spout({"log.path": str(log_path), "log.topic": "clicks"}, cls=Amounts)
    assert [values for values, _, _ in run(spout, collector)] == [[0], [2], [4]]
    spout.close()


@pytest.mark.parametrize(("conf", "message"), [
    ({"log.topic": "clicks"}, "log.path is required"),
    ({"log.path": "{path}"}, "log.topic is required"),
    ({"log.path": "{missing}", "log.topic": "clicks"}, "log.path: there is no log at .*squall log produce"),
    ({"log.path": "{path}", "log.topic": "nope"}, "log.topic: topic 'nope' does not exist"),
    ({"processing.guarantee": "at_least_one"}, "processing.guarantee must be one of at_least_once, at_most_once"),
    ({"first.poll.offset.strategy": 3}, "first.poll.offset.strategy must be one of earliest"),
    ({"max.uncommitted.offsets": 0}, "max.uncommitted.offsets must be a whole number >= 1"),
    ({"poll.max.records": True}, "poll.max.records must be a whole number"),
    ({"retry.max.retries": -1}, "retry.max.retries must be a whole number >= 0, .*unset for no limit"),
    ({"offset.commit.period.ms": "5s"}, "offset.commit.period.ms must be a finite number of milliseconds"),
    # infinite: never committed on its timer, so at max.uncommitted.offsets a partition paused for good
    ({"offset.commit.period.ms": float("inf")}, "offset.commit.period.ms must be a finite number"),
    ({"retry.max.delay.ms": float("inf")}, "retry.max.delay.ms must be a finite number"),
])
def test_config_errors_name_the_key_and_the_fix(log_path, tmp_path, conf, message):
    make_log(log_path).close()
    base = {"log.path": str(log_path), "log.topic": "clicks"}
    if "log.path" in conf or "log.topic" in conf:
        base = {}
    conf = {k: v.format(path=log_path, missing=tmp_path / "missing.db") if isinstance(v, str) else v
            for k, v in {**base, **conf}.items()}
    with pytest.raises(ConfigError, match=message):
        open_spout(conf)


def test_guarantee_names_are_case_insensitive(log_path):
    make_log(log_path).close()
    spout, _ = open_spout({"log.path": str(log_path), "log.topic": "clicks", "processing.guarantee": "AT_MOST_ONCE"})
    assert spout.core.config.guarantee == "at_most_once"
    spout.close()


def test_a_misspelt_key_is_warned_about(log_path, caplog):
    make_log(log_path).close()
    with caplog.at_level(logging.WARNING):
        spout, _ = open_spout({"log.path": str(log_path), "log.topic": "clicks", "log.grop": "x"})
    spout.close()
    assert "'log.grop'" in caplog.text and "did you mean 'log.group'" in caplog.text


@pytest.mark.parametrize(("conf", "message"), [
    ({"processing.guarantees": "at_most_once"}, "'processing.guarantees' is read by no one; did you mean "
                                                 "'processing.guarantee'"),
    ({"offset.commit.period": 5000}, "did you mean 'offset.commit.period.ms'"),
    ({"first.poll.offset.strategie": "latest"}, "did you mean 'first.poll.offset.strategy'"),
    ({"processing.guarantee": "exactly-once"}, "processing.guarantee must be one of at_least_once"),
])
def test_a_topology_with_a_misspelled_or_bad_offset_key_is_refused_by_validation(conf, message):
    """A misspelled key left its setting at the default (at least once) in silence, and a bad value passed
    squall validate, submit and the webhook, refused only by each task's open() (the configuration audit)."""
    from squall import TopologyBuilder
    from squall.topology import validate

    builder = TopologyBuilder("offsets")
    builder.set_spout("records", LogSpout, config={"log.path": "/nowhere.db", "log.topic": "clicks", **conf})
    with pytest.raises(ConfigError, match=message):
        validate(builder.build())


def test_a_task_without_partitions_emits_nothing(log_path):
    make_log(log_path, partitions=1).close()
    spout, collector = open_spout({"log.path": str(log_path), "log.topic": "clicks"}, tasks=2, index=1)
    assert spout.core.assigned == frozenset() and run(spout, collector) == []
    spout.close()
    assert TopicPartition("clicks", 0) not in spout.core.assigned
