"""squall.testing.DurableSink: an input is acked only once its row is on disk, full batches and ticks
both write, and ``query`` reads every task's file."""

from __future__ import annotations

from squall import TopologyBuilder
from squall.testing import DurableSink, LocalCluster, TestingSpout

ITEMS = 25


class Numbers(TestingSpout):
    outputs = ["n"]

    def items(self):
        return ([n] for n in range(ITEMS))

    def ack(self, msg_id):
        # The tree of item msg_id completes only after the sink wrote its row and committed it.
        written = {n for (n,) in NumberSink.query(self.conf["sink.dir"], "SELECT n FROM numbers")}
        assert msg_id in written, f"item {msg_id} acked before its row was written"
        super().ack(msg_id)


class NumberSink(DurableSink):
    file_prefix = "numbers"
    schema = "CREATE TABLE IF NOT EXISTS numbers (n INTEGER NOT NULL)"
    insert = "INSERT INTO numbers VALUES (?)"

    def row(self, tup):
        return (tup["n"],)


def test_rows_are_written_before_their_inputs_are_acked_and_a_tick_writes_a_partial_batch(tmp_path):
    builder = TopologyBuilder("durable")
    builder.set_spout("numbers", Numbers, config={"sink.dir": str(tmp_path)})
    # 25 items in batches of 4 on two tasks: the last partial batch of each task is written on a tick.
    builder.set_bolt("sink", NumberSink, parallelism=2, tick_frequency_seconds=0.05,
                     config={"sink.dir": str(tmp_path), "sink.batch": 4}).shuffle_grouping("numbers")
    with LocalCluster(builder.build()) as cluster:
        result = cluster.run(trees=ITEMS, seconds=30)
        spout = cluster.instances("numbers")[0]
    assert result.reason == "trees"
    assert sorted(spout.acked) == list(range(ITEMS)) and not spout.failed
    assert sorted(NumberSink.query(tmp_path, "SELECT n FROM numbers")) == [(n,) for n in range(ITEMS)]
    assert len(list(tmp_path.glob("numbers-*.db"))) == 2  # one file per task
