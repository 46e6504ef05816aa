"""Word count, the classic: a reliable sentence spout, a BasicBolt split, a fields-grouped count.

Run it: ``squall run examples/wordcount.yaml``.
"""

from __future__ import annotations

import itertools
import random

from squall import BasicBolt, Bolt
from squall.testing import TestingSpout

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SentenceSpout(TestingSpout):
    """Emits random sentences with message ids (``wordcount.sentences`` of them, or forever); each is
    kept until it is acked and emitted again when its tree fails or times out."""

    outputs = ["sentence"]

    def items(self):
        rng = random.Random(self.context.task_id)
        limit = self.conf.get("wordcount.sentences")  # None: forever
        return ([rng.choice(SENTENCES)] for _ in (itertools.count() if limit is None else range(limit)))


class SplitSentence(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


class WordCount(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)
