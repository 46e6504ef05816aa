"""Top pages per user over the last 5 minutes, every minute, on event time: a windowed bolt.

``ClickSpout`` emits click events ``(user, page, ts)`` with message ids, ``ts`` in milliseconds on a
simulated clock that runs ``toppages.speedup`` times faster than the wall's (so a run of a minute
shows windows of hours), a little out of order, and now and then a click that comes half a minute late.
``TopPages`` is a :class:`~squall.WindowedBolt` over a 5-minute window sliding every minute on the
clicks' own timestamps (``window:`` in ``toppages.yaml``): per window it emits each user's clicks and
top pages, anchored to the window's clicks. Late clicks go to the ``late`` stream, which ``PrintLate``
reads. Each click is acked once the last window that can hold it was computed.

Run it: ``squall run examples/toppages.yaml --duration 30``.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime

from squall import Bolt, WindowedBolt
from squall.testing import TestingSpout

PAGES = ["/", "/search", "/cart", "/checkout", "/help"] + [f"/product/{i}" for i in range(10)]
TOP_PAGES = 3
START = 1_700_000_000_000  # ms since the epoch: 2023-11-14 22:13:20 UTC


def clicks(*, seed: int, users: int) -> Iterator[tuple[str, str, int]]:
    """An endless, reproducible stream of ``(user, page, ts)``: a click every 0.5 s on average on the
    simulated clock, each up to 3 s out of order, and one in a hundred 30 s late."""
    rng = random.Random(seed)
    names = [f"user{i}" for i in range(users)]
    clock = START
    while True:
        clock += rng.randint(1, 1000)
        delay = 30_000 if rng.random() < 0.01 else rng.randint(0, 3000)
        yield rng.choice(names), rng.choice(PAGES), clock - delay


class ClickSpout(TestingSpout):
    """Emits clicks with message ids (``toppages.clicks`` of them, or forever) at ``toppages.rate`` a second;
    each is kept until it is acked and emitted again when its tree fails or times out."""

    outputs = ["user", "page", "ts"]

    def items(self):
        self.rate = self.conf.get("toppages.rate", 200)
        self.started = time.monotonic()
        source = clicks(seed=self.context.task_id, users=self.conf.get("toppages.users", 8))
        limit = self.conf.get("toppages.clicks")  # None: forever
        return source if limit is None else itertools.islice(source, limit)

    def ready(self) -> bool:
        return self.rate is None or self.emitted < (time.monotonic() - self.started) * self.rate


class TopPages(WindowedBolt):
    """Per window and user: the clicks, and the most visited pages (ties: by page name)."""

    outputs = ["user", "clicks", "top_pages", "start", "end"]

    def execute(self, window):
        pages: defaultdict[str, Counter] = defaultdict(Counter)
        for click in window:
            pages[click["user"]][click["page"]] += 1
        for user in sorted(pages):
            views = pages[user]
            top = sorted(views, key=lambda page: (-views[page], page))[:TOP_PAGES]
            self.collector.emit([user, sum(views.values()), top, window.start_timestamp, window.end_timestamp])


class TopWords(WindowedBolt):
    """The ten most frequent words of each window, in one tuple: one emit per window, anchored once to the
    window's tuples (an emit per word would pay for the anchors ten times)."""

    outputs = ["words"]

    def execute(self, window):
        self.collector.emit([[word for word, _ in Counter(t["word"] for t in window).most_common(10)]])


def clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


class PrintTop(Bolt):
    outputs = []

    def execute(self, tup):
        print(f"{clock(tup['start'])}-{clock(tup['end'])} {tup['user']}: {tup['clicks']} clicks, top pages "
              f"{', '.join(tup['top_pages'])}", flush=True)
        self.collector.ack(tup)


class PrintLate(Bolt):
    outputs = []

    def execute(self, tup):
        print(f"late: {tup['user']} {tup['page']} at {clock(tup['ts'])}", flush=True)
        self.collector.ack(tup)
