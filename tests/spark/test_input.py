"""How a batch crosses into Spark: as Arrow columns where ``schema`` types them, with exactly what Spark's own
row check accepts; as rows otherwise."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyspark.sql import functions as F

from squall import TopologyBuilder
from squall.spark import SparkBolt
from squall.spark.bolt import _InputSchema
from squall.testing import LocalCluster, TestingSpout

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

DEADLINE = 180.0  # an event wait: a pass ends on its condition


def tuples(*rows):
    return [SimpleNamespace(values=list(row)) for row in rows]


def test_flat_typed_columns_cross_as_arrow_in_one_record_batch_per_partition():
    schema = _InputSchema.parse("user STRING, ts BIGINT, score DOUBLE, ok BOOLEAN, raw BINARY",
                                component="c", fields=["user", "ts", "score", "ok", "raw"])
    table = schema.arrow_table(tuples(*[("a", i, 0.5, True, b"x") for i in range(5)], ("b", None, None, None, None)),
                               slices=2)
    assert table is not None
    assert [str(t) for t in table.schema.types] == ["string", "int64", "double", "bool", "binary"]
    assert [b.num_rows for b in table.to_batches()] == [3, 3]
    assert table.column("ts").to_pylist() == [0, 1, 2, 3, 4, None]


@pytest.mark.parametrize(("ddl", "row"), [
    ("x DOUBLE", (1,)),  # Spark's check takes only floats for DOUBLE: Arrow would have cast the int
    ("x BIGINT", (True,)),  # ... and only ints, not bools, for BIGINT
    ("x STRING", (b"x",)),
    ("x BIGINT NOT NULL", (None,)),
    ("x INT", (2**40,)),  # out of the column's range
    ("x ARRAY<BIGINT>", ([1, 2],)),  # not a flat column: rows, which Spark converts itself
    ("x MAP<STRING, BIGINT>", ({"a": 1},)),
])
def test_a_column_arrow_would_take_otherwise_than_spark_goes_as_rows(ddl, row):
    schema = _InputSchema.parse(ddl, component="c", fields=["x"])
    assert schema.arrow_table(tuples(row), slices=2) is None


class Total(SparkBolt):
    schema = "id BIGINT, x DOUBLE"
    outputs = ["total"]

    def process(self, df):
        return df.agg(F.sum("x").alias("total"))


class Pairs(TestingSpout):
    outputs = ["id", "x"]


def run(items):
    builder = TopologyBuilder("spark-input")
    builder.set_spout("spout", Pairs, config={"testing.items": items})
    builder.set_bolt("spark", Total, config={"spark.batch.size": len(items)}).shuffle_grouping("spout")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        cluster.run_until(lambda: len(spout.acked) + len(spout.failed) >= len(items), seconds=DEADLINE)
        return spout, cluster.errors("spark")


def test_a_typed_batch_is_processed_and_acked():
    spout, errors = run([[0, 1.5], [1, 2.5], [2, None]])
    assert sorted(spout.acked) == [0, 1, 2] and not spout.failed and not errors


def test_a_value_sparks_row_check_refuses_fails_its_batch_with_sparks_message():
    spout, errors = run([[0, 1.5], [1, 2]])
    assert sorted(spout.failed) == [0, 1] and not spout.acked
    assert "DoubleType() can not accept object 2" in errors[0].error
