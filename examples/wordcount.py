"""Word count, the classic: a reliable sentence spout, a BasicBolt split, a fields-grouped count.

Run it: ``squall run examples/wordcount.yaml``.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import deque

from squall import BasicBolt, Bolt, Spout

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SentenceSpout(Spout):
    """Emits random sentences with message ids (``wordcount.sentences`` of them per task, or forever;
    at most ``wordcount.rate`` new ones per second, or as fast as it can). Each is kept until it is
    acked and emitted again when its tree fails or times out; it keeps nothing once acked, so it runs
    for as long as you like."""

    outputs = ["sentence"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        rng = random.Random(context.task_id)
        limit = conf.get("wordcount.sentences")  # None: forever
        self.source = ([rng.choice(SENTENCES)] for _ in (itertools.count() if limit is None else range(limit)))
        self.rate = conf.get("wordcount.rate")  # None: unthrottled
        self.started = time.monotonic()
        self.emitted = 0
        self.pending: dict[int, list[str]] = {}
        self.replays: deque[int] = deque()

    def next_tuple(self):
        if self.replays:
            msg_id = self.replays.popleft()
        elif self.rate is not None and self.emitted >= (time.monotonic() - self.started) * self.rate:
            return
        else:
            values = next(self.source, None)
            if values is None:
                return
            msg_id, self.emitted = self.emitted, self.emitted + 1
            self.pending[msg_id] = values
        self.collector.emit(self.pending[msg_id], msg_id=msg_id)

    def ack(self, msg_id):
        del self.pending[msg_id]

    def fail(self, msg_id):
        self.replays.append(msg_id)


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
