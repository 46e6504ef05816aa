"""KafkaSpout and KafkaSource with a real confluent-kafka Consumer.

No Kafka broker can run on these machines. librdkafka (inside confluent-kafka) ships a mock
cluster, enabled by the client setting ``test.mock.num.brokers``, that serves the Kafka protocol
on a loopback port: produce, fetch, metadata, consumer groups (join, sync, rebalance) and offset
commits with metadata. These tests point real Consumers at it, so nothing here is a fake; what the
mock cannot show (a real broker's timing and failures) is listed in docs/offset-spouts.md.
The configuration tests need no cluster: the Consumer checks its settings when it is created.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import pytest
from spout_harness import RecordingCollector, context_for

from squall.errors import ConfigError
from squall.spouts import kafka
from squall.spouts.kafka import KafkaSpout

ck = pytest.importorskip("confluent_kafka")

quiet = logging.getLogger("tests.kafka.mock")
MOCK_PARTITIONS = 4  # the mock cluster creates topics with four partitions


@dataclass
class Cluster:
    bootstrap: str
    producer: Any

    def produce(self, topic: str, per_partition: int, *, start: int = 0) -> None:
        for i in range(start, start + per_partition):
            for p in range(MOCK_PARTITIONS):
                self.producer.produce(topic, key=f"k{p}".encode(), value=json.dumps([p, i]).encode(), partition=p)
        assert self.producer.flush(10) == 0

    def committed(self, group: str, topic: str) -> dict[int, tuple[int, str]]:
        consumer = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "logger": quiet})
        try:
            found = consumer.committed([ck.TopicPartition(topic, p) for p in range(MOCK_PARTITIONS)], timeout=10)
            return {tp.partition: (tp.offset, tp.metadata) for tp in found if tp.offset >= 0}
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def cluster():
    producer = ck.Producer({"test.mock.num.brokers": 1, "logger": quiet})
    broker = next(iter(producer.list_topics(timeout=10).brokers.values()))
    yield Cluster(f"{broker.host}:{broker.port}", producer)


def open_spout(conf: dict, *, tasks: int = 1, index: int = 0) -> tuple[KafkaSpout, RecordingCollector]:
    spout = KafkaSpout()
    collector = RecordingCollector(KafkaSpout, "records")
    spout.open(conf, context_for(KafkaSpout, tasks=tasks, index=index), collector)
    return spout, collector


def drive(spouts, until, *, timeout: float = 30.0) -> None:
    """Call next_tuple on every spout until ``until()`` holds (librdkafka works in its own threads)."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out driving the spouts"
        for spout in spouts:
            spout.next_tuple()
        time.sleep(0.001)  # let librdkafka's threads run on this small machine


def ids(collector: RecordingCollector) -> list:
    return [msg_id for _, _, msg_id in collector.emitted]


# ---- configuration (a real Consumer, no cluster) -------------------------------------------------

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


@pytest.mark.parametrize(("conf", "message"), [
    ({"kafka.config": {**UNREACHABLE, "enable.auto.commit": True}}, "remove 'enable.auto.commit'"),
    ({"kafka.config": {"bootstrap.servers": "127.0.0.1:1"}}, "kafka.config needs 'group.id'"),
    ({"kafka.config": {**UNREACHABLE, "no.such.setting": 1}}, "kafka.config is invalid: .*no.such.setting"),
    ({"kafka.config": {**UNREACHABLE, "fetch.min.bytes": "lots"}}, "kafka.config is invalid: .*fetch.min.bytes"),
    ({"kafka.config": "localhost:9092"}, "kafka.config must be a mapping"),
    ({"kafka.topics": []}, "kafka.topics must be a topic name or a list"),
    ({"kafka.subscription": "manual"}, "kafka.subscription must be one of subscribe, assign"),
])
def test_config_errors_name_the_key(conf, message):
    conf = {"kafka.topics": "clicks", "kafka.config": UNREACHABLE, **conf}
    with pytest.raises(ConfigError, match=message):
        open_spout(conf)


def test_exactly_once_refuses_a_consumer_groups_subscription_before_anything_runs():
    """A group's rebalance would move partitions between tasks, whose checkpoints keep their positions."""
    conf = {"kafka.topics": "clicks", "kafka.config": UNREACHABLE, "topology.state.guarantee": "exactly_once"}
    with pytest.raises(ConfigError, match="spout 'clicks': .* set kafka.subscription: assign"):
        KafkaSpout.check_config("clicks", conf, message_timeout_seconds=30)
    KafkaSpout.check_config("clicks", {**conf, "kafka.subscription": "assign"}, message_timeout_seconds=30)


def test_subscribing_needs_no_broker_until_records_are_polled():
    spout, collector = open_spout({"kafka.topics": ["clicks"], "kafka.config": UNREACHABLE})
    spout.next_tuple()
    assert collector.emitted == [] and spout.core.assigned == frozenset()
    spout.close()


# ---- against the mock cluster -------------------------------------------------------------------

def test_assign_mode_splits_partitions_retries_commits_with_metadata_and_resumes(cluster):
    topic, group = "assigned", "assign-group"
    cluster.produce(topic, 3)
    conf = {"kafka.topics": topic, "kafka.subscription": "assign", "offset.commit.period.ms": 3_600_000,
            "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": group}}
    spouts = [open_spout(conf, tasks=2, index=i) for i in range(2)]
    assert [sorted(tp.partition for tp in s.core.assigned) for s, _ in spouts] == [[0, 2], [1, 3]]

    drive([s for s, _ in spouts], lambda: all(len(c.emitted) == 6 for _, c in spouts))
    (first, first_out), (second, second_out) = spouts
    values, stream, msg_id = first_out.emitted[0]
    assert values[:3] == [topic, msg_id.partition, msg_id.offset] and stream == "default"
    assert values[3] == f"k{msg_id.partition}".encode()
    assert json.loads(values[4]) == [msg_id.partition, msg_id.offset]

    failed = ids(first_out)[1]
    first.fail(failed)
    drive([first], lambda: len(first_out.emitted) == 7)
    assert ids(first_out)[6] == failed, "the failed record is emitted again (after seeking back)"

    for spout, out in spouts:
        for m in ids(out):
            spout.ack(m)
        spout.close()
    committed = cluster.committed(group, topic)
    assert {p: offset for p, (offset, _) in committed.items()} == dict.fromkeys(range(4), 3)
    assert json.loads(committed[0][1]) == {"topology": "topo", "task": 0}
    assert json.loads(committed[1][1]) == {"topology": "topo", "task": 1}

    cluster.produce(topic, 1, start=3)
    again = [open_spout(conf, tasks=2, index=i) for i in range(2)]
    drive([s for s, _ in again], lambda: sum(len(c.emitted) for _, c in again) == 4)
    assert sorted((m.partition, m.offset) for _, c in again for m in ids(c)) == [(p, 3) for p in range(4)]
    for spout, _ in again:
        spout.close()


def test_lag_comes_from_the_cached_high_watermark_and_the_commits(cluster):
    topic = "lagging"
    cluster.produce(topic, 3)
    spout, out = open_spout({"kafka.topics": topic, "kafka.subscription": "assign",
                             "offset.commit.period.ms": 3_600_000,
                             "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": "lag-group"}})
    # The cached watermarks come with fetches and are read once a second: drive until they are known.
    drive([spout], lambda: len(out.emitted) == 12
          and all(o.latest == 3 for o in spout.partition_offsets().values()))
    assert {tp.partition: (o.committed, o.lag) for tp, o in spout.partition_offsets().items()} == dict.fromkeys(
        range(4), (0, 3))
    for m in ids(out):
        spout.ack(m)
    spout.deactivate()  # commits
    assert [o.lag for o in spout.partition_offsets().values()] == [0, 0, 0, 0]
    spout.close()


def test_lag_keeps_growing_while_partitions_are_paused(cluster, monkeypatch):
    """librdkafka's cached high watermark moves only with fetches, which stop for a paused partition:
    the source asks the broker for the end offsets besides (every END_OFFSETS_REFRESH seconds)."""
    monkeypatch.setattr(kafka, "END_OFFSETS_REFRESH", 0.2)  # 5 s by default
    topic = "backlog"
    cluster.produce(topic, 2)
    spout, out = open_spout({"kafka.topics": topic, "kafka.subscription": "assign", "max.uncommitted.offsets": 2,
                             "poll.max.records": 1, "offset.commit.period.ms": 3_600_000,
                             "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": "backlog-group"}})
    drive([spout], lambda: len(out.emitted) == 8 and all(o.latest == 2 for o in spout.partition_offsets().values()))
    # nothing is acked, so every partition stays at max.uncommitted.offsets: paused, not fetched from
    cluster.produce(topic, 3, start=2)
    drive([spout], lambda: all(o.latest == 5 for o in spout.partition_offsets().values()))
    assert len(out.emitted) == 8, "a paused partition was read"
    assert [(o.committed, o.lag) for o in spout.partition_offsets().values()] == [(0, 5)] * MOCK_PARTITIONS
    spout.close()


def test_assigning_a_missing_topic_is_a_config_error(cluster):
    conf = {"kafka.topics": "never-produced", "kafka.subscription": "assign",
            "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": "g"}}
    with pytest.raises(ConfigError, match="kafka.topics: topic 'never-produced' does not exist"):
        open_spout(conf)
    with pytest.raises(ConfigError, match="kafka.topics: '.never.*' is a pattern, which only kafka.subscription: "
                                          "subscribe reads"):
        open_spout({**conf, "kafka.topics": "^never.*"})


def test_max_uncommitted_offsets_pauses_kafka_partitions_and_resumes_where_they_stopped(cluster):
    topic = "limited"
    cluster.produce(topic, 4)
    conf = {"kafka.topics": topic, "kafka.subscription": "assign", "max.uncommitted.offsets": 2,
            "poll.max.records": 1, "offset.commit.period.ms": 3_600_000,
            "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": "limited-group"}}
    spout, out = open_spout(conf)
    drive([spout], lambda: len(out.emitted) == 8)
    # A witness in another group reads every record meanwhile, so they were there to be read.
    witness, witnessed = open_spout({**conf, "max.uncommitted.offsets": 100,
                                     "kafka.config": {**conf["kafka.config"], "group.id": "witness"}})
    drive([spout, witness], lambda: len(witnessed.emitted) == 16)
    witness.close()
    assert sorted((m.partition, m.offset) for m in ids(out)) == [(p, o) for p in range(4) for o in (0, 1)], \
        "a partition at max.uncommitted.offsets was read"

    for m in ids(out):
        spout.ack(m)
    spout.deactivate()  # the commit frees the limit: reading resumes where each partition stopped
    drive([spout], lambda: len(out.emitted) == 16)
    assert sorted((m.partition, m.offset) for m in ids(out)) == [(p, o) for p in range(4) for o in range(4)]
    spout.close()


def test_partitions_paused_at_their_limit_are_read_again_once_a_rebalance_gives_them_back(cluster):
    """librdkafka keeps a partition paused across an eager rebalance. The spout forgot that it had paused
    the partitions a rebalance revoked, so those given back to it were never read again: its lag grew for
    good (found by the offset-spout audit)."""
    topic = "paused-rebalance"
    cluster.produce(topic, 4)
    conf = {"kafka.topics": [topic], "max.uncommitted.offsets": 2, "poll.max.records": 1,
            "offset.commit.period.ms": 3_600_000,
            "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": "paused-group",
                             "session.timeout.ms": 4000, "heartbeat.interval.ms": 300}}
    a, a_out = open_spout(conf, tasks=2, index=0)
    drive([a], lambda: len(a_out.emitted) == 2 * MOCK_PARTITIONS)  # then every partition is at its limit
    seen = len(a_out.emitted)
    b, _ = open_spout(conf, tasks=2, index=1)
    drive([a, b], lambda: a.core.assigned and b.core.assigned and len(a.core.assigned | b.core.assigned) == 4
          and not (a.core.assigned & b.core.assigned))
    # nothing was acked, so nothing committed: each partition the first spout kept is read from 0 again
    kept = {tp.partition for tp in a.core.assigned}
    drive([a, b], lambda: {(m.partition, m.offset) for m in ids(a_out)[seen:]} >= {(p, 0) for p in kept})
    for spout in (a, b):
        spout.close()


def test_subscribe_rebalance_replays_from_the_committed_offsets_and_ignores_late_acks(cluster):
    """Two spouts in one group: the second joining makes the first give partitions up.

    The spout commits acked offsets when partitions are revoked. A real broker accepts that commit;
    librdkafka's mock refuses commits while the group is joining (REBALANCE_IN_PROGRESS), so here
    the commit may fail, is reported, and the acked records are replayed: at least once either way.
    """
    topic, group = "subscribed", "subscribe-group"
    cluster.produce(topic, 3)
    conf = {"kafka.topics": [topic], "offset.commit.period.ms": 3_600_000,
            "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": group,
                             "session.timeout.ms": 4000, "heartbeat.interval.ms": 300}}
    a, a_out = open_spout(conf, tasks=2, index=0)
    drive([a], lambda: len(a_out.emitted) == 12)
    assert len(a.core.assigned) == MOCK_PARTITIONS
    held = next(m for m in ids(a_out) if m.partition == 0 and m.offset == 2)
    for m in ids(a_out):
        if m != held:
            a.ack(m)
    a_seen = len(a_out.emitted)

    b, b_out = open_spout(conf, tasks=2, index=1)
    # Settled when both own partitions (a group may first form without a member that is slow to rejoin).
    drive([a, b], lambda: a.core.assigned and b.core.assigned and len(a.core.assigned | b.core.assigned) == 4
          and not (a.core.assigned & b.core.assigned))
    committed = {p: offset for p, (offset, _) in cluster.committed(group, topic).items()}
    assert committed in ({}, {0: 2, 1: 3, 2: 3, 3: 3})

    # A partition new to its owner is read again from the committed offset; one the first spout kept, from
    # where it left it (its first offset not acked), whether its commit went through or not: the held record.
    owner_of = {tp.partition: name for name, s in (("a", a), ("b", b)) for tp in s.core.assigned}
    start = {p: (2 if p == 0 else 3) if owner_of[p] == "a" else committed.get(p, 0) for p in range(4)}
    expected = {(owner_of[p], p, o) for p in range(4) for o in range(start[p], 3)}

    def replayed():
        return {("a", m.partition, m.offset) for m in ids(a_out)[a_seen:]} | {
            ("b", m.partition, m.offset) for m in ids(b_out)}

    drive([a, b], lambda: replayed() == expected)
    assert (owner_of[0], 0, 2) in replayed()

    if owner_of[0] == "b":
        a.ack(held)  # a late ack for a partition a no longer owns: ignored, nothing breaks
    for m in ids(a_out)[a_seen:]:
        a.ack(m)
    for m in ids(b_out):
        b.ack(m)
    acked = {"a": len(a_out.emitted), "b": len(b_out.emitted)}
    cluster.produce(topic, 1, start=3)
    drive([a, b], lambda: sum(1 for c in (a_out, b_out) for m in ids(c) if m.offset == 3) == 4)
    for name, spout, out in (("a", a, a_out), ("b", b, b_out)):
        fresh = [m for m in ids(out) if m.offset == 3]
        mine = {tp.partition for tp in spout.core.assigned}
        assert all(m.partition in mine for m in fresh)
        # Everything emitted since the acks above, not only offset 3: the group may have gone through
        # more generations while the second member joined, and the sets compared above also hold
        # records a spout emitted in a generation since revoked. Such a record (acked then, ignored as
        # no longer in flight) is emitted again in the current one, before offset 3, and waits for its ack.
        for m in ids(out)[acked[name]:]:
            spout.ack(m)
    # Both commit (deactivate) before either leaves the group: a member leaving starts a rebalance,
    # during which the mock refuses the other's commit.
    for spout in (a, b):
        spout.deactivate()
    committed = cluster.committed(group, topic)
    assert {p: offset for p, (offset, _) in committed.items()} == dict.fromkeys(range(4), 4)
    for spout in (a, b):
        spout.close()


def test_a_log_recreated_behind_the_committed_offset_is_read_again_not_dropped(cluster, caplog):
    """The group committed offset 100 (this topology's), then the topic was recreated with 2 records a
    partition: librdkafka finds 100 out of range and, by ``auto.offset.reset=earliest``, reads from 0.
    Before, every record below the committed offset was taken for a re-read and dropped, silently, and
    the commit later went past them. Found by the offset spouts audit."""
    topic, group = "recreated", "recreated-group"
    cluster.produce(topic, 2)
    committer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "logger": quiet})
    committer.commit(offsets=[ck.TopicPartition(topic, p, 100, metadata='{"topology":"topo","task":0}')
                              for p in range(MOCK_PARTITIONS)], asynchronous=False)
    committer.close()
    conf = {"kafka.topics": topic, "kafka.subscription": "assign", "offset.commit.period.ms": 3_600_000,
            "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": group}}
    spout, out = open_spout(conf)
    with caplog.at_level(logging.WARNING, logger="squall.spouts"):
        drive([spout], lambda: len(out.emitted) == 2 * MOCK_PARTITIONS)
    assert sorted((m.partition, m.offset) for m in ids(out)) == [(p, o) for p in range(MOCK_PARTITIONS) for o in (0, 1)]
    assert "went back to offset 0, below the committed offset 100" in caplog.text
    for m in ids(out):
        spout.ack(m)
    spout.close()
    assert {p: offset for p, (offset, _) in cluster.committed(group, topic).items()} == \
        dict.fromkeys(range(MOCK_PARTITIONS), 2)


def test_a_start_lookup_that_fails_at_assignment_is_asked_again_and_loses_nothing(cluster, monkeypatch):
    """The committed offsets cannot be read when partitions are assigned (a broker timeout). Raised into
    confluent-kafka's assignment callback, the error made the client assign the partitions itself: it
    read them, and the core, which never tracked them, dropped every record until some later rebalance.
    Now the core asks again at the next poll. Found by the offset spouts audit."""
    topic, group = "lookup", "lookup-group"
    cluster.produce(topic, 2)
    real = kafka.KafkaSource.committed
    calls = []

    def flaky(self, partitions):
        calls.append(time.monotonic())
        if len(calls) <= 3:
            raise ck.KafkaException(ck.KafkaError(ck.KafkaError._TIMED_OUT))
        return real(self, partitions)

    monkeypatch.setattr(kafka.KafkaSource, "committed", flaky)
    conf = {"kafka.topics": [topic], "offset.commit.period.ms": 3_600_000,
            "kafka.config": {"bootstrap.servers": cluster.bootstrap, "group.id": group,
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}}
    spout, out = open_spout(conf)
    drive([spout], lambda: len(out.emitted) == 2 * MOCK_PARTITIONS)
    assert len(calls) == 4 and len(spout.core.assigned) == MOCK_PARTITIONS
    # asked again after 1 s, then 2 s: not at every next_tuple, each of which may wait for the broker
    assert all(b - a >= delay for a, b, delay in zip(calls[:-1], calls[1:], (1, 2, 4), strict=True))
    assert sorted((m.partition, m.offset) for m in ids(out)) == [(p, o) for p in range(MOCK_PARTITIONS) for o in (0, 1)]
    spout.close()
