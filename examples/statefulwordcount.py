"""Word count with durable counts: the sentences and split of :mod:`examples.wordcount`, and a count that is a
``StatefulBolt``. Its counts live in a ``KeyValueState`` that Squall checkpoints every second (under ``squall
run``, in a SQLite file per task below the run directory), so a killed worker's count tasks resume from
their last commit, and the sentences that commit lacked are replayed: every word is counted at least once.

Run it, then read the committed counts (during the run or after it)::

    squall run examples/statefulwordcount.yaml --duration 30
    squall state show examples/statefulwordcount.yaml --sum
"""

from __future__ import annotations

from squall import StatefulBolt


class WordCount(StatefulBolt):
    """Counts words in ``self.state`` (the task's committed counts when it starts); emits each new count."""

    outputs = ["word", "count"]

    def execute(self, tup):
        word = tup["word"]
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        # anchored to the input, which is acked when the checkpoint holding this count commits
        self.collector.emit([word, count])
