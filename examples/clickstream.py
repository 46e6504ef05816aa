"""Click stream sessions on Spark: a reliable click spout, a SparkBolt, a printing bolt.

``ClickSpout`` emits click events ``(user, page, ts)`` with message ids and replays any that fail.
``SessionStats`` is a :class:`~squall.spark.SparkBolt`: per micro-batch, with DataFrame operations,
it counts each user's clicks and sessions (a session ends after 30 minutes without a click) and
finds the user's top pages; each result row is anchored to the clicks of its user in the batch
(``anchor_by``), so a row failed downstream replays only its user's clicks.
``PrintStats`` prints the rows.

Run it (Spark takes a few seconds to start): ``squall run examples/clickstream.yaml --duration 40``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from squall import Bolt
from squall.spark import SparkBolt
from squall.testing import TestingSpout

PAGES = ["/", "/search", "/cart", "/checkout", "/help"] + [f"/product/{i}" for i in range(10)]
SESSION_GAP = 30 * 60  # seconds without a click that end a session
TOP_PAGES = 3


def clicks(*, seed: int, users: int) -> Iterator[tuple[str, str, int]]:
    """An endless, reproducible stream of ``(user, page, ts)``; each user's ``ts`` (seconds) only grows."""
    rng = random.Random(seed)
    clock = dict.fromkeys((f"user{i}" for i in range(users)), 1_700_000_000)
    names = list(clock)
    while True:
        user = rng.choice(names)
        # mostly a click a few seconds after the last; now and then a pause that starts a new session
        clock[user] += rng.randint(1, 120) if rng.random() < 0.9 else rng.randint(SESSION_GAP + 1, 4 * 3600)
        yield user, rng.choice(PAGES), clock[user]


class ClickSpout(TestingSpout):
    """Emits clicks with message ids (``clickstream.clicks`` of them, or forever); each is kept until it
    is acked and emitted again when its tree fails or times out."""

    outputs = ["user", "page", "ts"]

    def items(self):
        source = clicks(seed=self.context.task_id, users=self.conf.get("clickstream.users", 8))
        limit = self.conf.get("clickstream.clicks")  # None: forever
        return source if limit is None else itertools.islice(source, limit)


class SessionStats(SparkBolt):
    """Per user and micro-batch: clicks, sessions and the most visited pages (ties: by page name)."""

    schema = "user STRING, page STRING, ts BIGINT"
    outputs = ["user", "clicks", "sessions", "top_pages"]
    anchor_by = "user"  # a row derives from its user's clicks only

    def process(self, df: DataFrame) -> DataFrame:
        by_time = Window.partitionBy("user").orderBy("ts")
        gap = F.col("ts") - F.lag("ts").over(by_time)
        starts = df.withColumn("starts", F.when(gap.isNull() | (gap > SESSION_GAP), 1).otherwise(0))
        per_user = starts.groupBy("user").agg(F.count("*").alias("clicks"), F.sum("starts").alias("sessions"))

        by_views = Window.partitionBy("user").orderBy(F.desc("views"), F.asc("page"))
        ranked = (df.groupBy("user", "page").agg(F.count("*").alias("views"))
                  .withColumn("rank", F.row_number().over(by_views))
                  .where(F.col("rank") <= TOP_PAGES))
        top = (ranked.groupBy("user")
               .agg(F.sort_array(F.collect_list(F.struct("rank", "page"))).alias("ranked"))
               .select("user", F.col("ranked.page").alias("top_pages")))
        return per_user.join(top, "user")


class PrintStats(Bolt):
    outputs = []

    def execute(self, tup):
        print(f"{tup['user']}: {tup['clicks']} clicks in {tup['sessions']} session(s); "
              f"top pages {', '.join(tup['top_pages'])}", flush=True)
        self.collector.ack(tup)
