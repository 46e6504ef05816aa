"""Word count, the classic: a reliable sentence spout, a BasicBolt split, a fields-grouped count.

Run it: ``squall run examples/wordcount.yaml``.
"""

from __future__ import annotations

import itertools
import random

from squall import BasicBolt, Bolt, Spout

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SentenceSpout(Spout):
    """Emits sentences with message ids, keeps each until it is acked, and replays it on fail."""

    outputs = ["sentence"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.pending: dict[int, str] = {}
        self.replay: list[int] = []
        self.ids = itertools.count()
        self.limit = conf.get("wordcount.sentences")  # None: emit forever
        self.emitted = 0
        self.rng = random.Random(context.task_id)

    def next_tuple(self):
        if self.replay:
            msg_id = self.replay.pop()
        elif self.limit is None or self.emitted < self.limit:
            msg_id = next(self.ids)
            self.pending[msg_id] = self.rng.choice(SENTENCES)
            self.emitted += 1
        else:
            return
        self.collector.emit([self.pending[msg_id]], msg_id=msg_id)

    def ack(self, msg_id):
        del self.pending[msg_id]

    def fail(self, msg_id):
        self.replay.append(msg_id)


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
