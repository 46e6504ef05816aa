"""Word-count benchmark: prints one table of figures and the issue's target ratios; never fails.

Sentences of 8 words from a fixed 1,000-word vocabulary; a spout with message ids (acking on);
shuffle → split → fields → count. Cases, measured one after another in one run:

- ceiling: the same work in one hand-written Python loop with Storm's XOR acking (one random
  64-bit id per edge, XORed into a dict entry per root; a tree is complete when it returns to 0);
- API floor: the same spout and bolts called through Storm's API by a compiled loop with no engine
  behind it (no ids, no acking, no routing, no queues; ``bench/api_floor.pyx``): the least any
  engine of this API can cost in CPython for this user code, so the most ``in-process ÷ ceiling``
  could reach;
- in-process (``LocalCluster``), and with the count a stateful bolt whose counts are written to the
  embedded store at each checkpoint (every 200 ms; with the checkpoint trees' latency), and with the
  count over a sliding window of 10,000 words by 1,000 (a ``WindowedBolt``; what windowing adds to a word); 1 worker + 1
  acker, and throttled to 80 % of the maximum it just
  measured (for latency); 2 workers + 2 ackers (``squall run``'s processes), also with plaintext
  gRPC, with no word crossing workers (split → count local-or-shuffle: what the crossing tuples
  cost), pinned (``squall run --pin``), and throttled to 10,000 trees/s (far below its maximum,
  where frames, not tuples, are what the processes pay for: the flush interval's trade).

CPU µs per acked tree sums utime + stime from ``/proc/<pid>/stat`` over every process: this one
(it runs the in-process case and supervises the others) and every worker and acker. The machine
may be shared: compare the ratios of one run, and the ceiling measured first and last says how
much the machine's speed drifted meanwhile. The cases run ``--rounds`` times (3 by default), one
round after another, and each target is the median of its per-round ratios, printed with their range:
on a shared machine a single round's ratio moves by a quarter or more. Latency percentiles come
from every recorded sample (an HDR histogram: within 0.8 % above the true value). Acker bytes per
tree: the bytes of acker messages and verdicts that crossed processes, from the transport's byte
counters.

    python bench/wordcount.py [--seconds 10] [--rounds 3]
                              [--cases ceiling,floor,local,local-stateful,local-windowed,1w1a,80pct,2w2a,2w2a-plain,
                                       2w2a-local,2w2a-pin,2w2a-light]
                              [--pin]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from squall import BasicBolt, Bolt, Spout, StatefulBolt, WindowedBolt  # noqa: E402
from squall.acker import Acker  # noqa: E402
from squall.executor.hdr import HdrHistogram  # noqa: E402
from squall.metrics.scrape import fetch  # noqa: E402
from squall.process.supervisor import Supervisor  # noqa: E402
from squall.system import CHECKPOINT_COMPONENT  # noqa: E402
from squall.testing import LocalCluster  # noqa: E402
from squall.topology import TopologySpec  # noqa: E402

VOCABULARY = [f"w{i:03d}" for i in range(1000)]
WORDS = 8
MAX_PENDING = 1000
CLK_TCK = os.sysconf("SC_CLK_TCK")


class SentenceSpout(Spout):
    """Random 8-word sentences with message ids; ``bench.rate`` (trees/s per task) throttles it."""

    outputs = ["sentence"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(context.task_id)
        self.n = 0
        self.rate = conf.get("bench.rate")
        self.start = time.monotonic()

    def next_tuple(self):
        if self.rate and self.n >= self.rate * (time.monotonic() - self.start):
            return
        self.n += 1
        self.collector.emit([" ".join(self.rng.choices(VOCABULARY, k=WORDS))], msg_id=self.n)


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup.values[0].split():
            collector.emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = {}

    def execute(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.ack(tup)


class StatefulCount(StatefulBolt):
    """:class:`Count` with its counts in a checkpointed state (acked at each checkpoint's commit)."""

    outputs = ["word", "count"]

    def execute(self, tup):
        word = tup.values[0]
        self.state.put(word, self.state.get(word, 0) + 1)


#: The stateful cases: checkpoints every 200 ms, and room for the trees in flight until their commit
STATEFUL = {"config": {"topology.state.checkpoint.interval.ms": 200}, "maxSpoutPending": 50_000}


class WindowedCount(WindowedBolt):
    """:class:`Count`'s words over a window of 10,000 sliding every 1,000 (:data:`WINDOW`): the counts follow
    the window, its new words in and its expired ones out; a word is acked when it leaves the window."""

    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = {}

    def execute(self, window):
        counts = self.counts
        for tup in window.get_new():
            word = tup.values[0]
            counts[word] = counts.get(word, 0) + 1
        for tup in window.get_expired():
            word = tup.values[0]
            counts[word] -= 1


#: The windowed case's window, and room for the trees its words keep in flight (validation asks a tree per word)
WINDOW = {"window": {"length": {"count": 10_000}, "slidingInterval": {"count": 1_000}}, "maxSpoutPending": 50_000}


def spec(*, workers: int, ackers: int, rate: float | None = None, cross: bool = True,
         flush_ms: float | None = None, max_pending: int = MAX_PENDING, stateful: bool = False,
         windowed: bool = False) -> dict:
    """The word count; ``cross`` False gives every word to a count task of its own worker (local or
    shuffle instead of fields: no longer a word count, but the same work without tuples crossing);
    ``flush_ms`` sets ``transfer.flushIntervalMs``, ``max_pending`` ``maxSpoutPending``; ``stateful``
    counts in a :class:`StatefulCount` (:data:`STATEFUL`'s settings; its state where the run puts it);
    ``windowed`` in a :class:`WindowedCount` (:data:`WINDOW`)."""
    count_grouping = {"type": "fields", "fields": ["word"]} if cross else {"type": "localOrShuffle"}
    doc = {
        **({"transfer": {"flushIntervalMs": flush_ms}} if flush_ms is not None else {}),
        "name": "bench", "workers": workers, "ackers": ackers, "maxSpoutPending": max_pending,
        "config": {"bench.rate": rate} if rate else {},
        "spouts": [{"name": "sentences", "className": "bench.wordcount:SentenceSpout", "parallelism": workers}],
        "bolts": [
            {"name": "split", "className": "bench.wordcount:Split", "parallelism": workers,
             "inputs": [{"component": "sentences", "grouping": {"type": "shuffle"}}]},
            {"name": "count", "className": "bench.wordcount:Count", "parallelism": workers,
             "inputs": [{"component": "split", "grouping": count_grouping}]},
        ],
    }
    if stateful:
        doc["bolts"][1].update(className="bench.wordcount:StatefulCount", stateful=True)
        doc["config"].update(STATEFUL["config"])
        doc["maxSpoutPending"] = STATEFUL["maxSpoutPending"]
    if windowed:
        doc["bolts"][1].update(className="bench.wordcount:WindowedCount", window=WINDOW["window"])
        doc["maxSpoutPending"] = WINDOW["maxSpoutPending"]
    return doc


@dataclass
class Result:
    label: str
    trees: int
    seconds: float  # wall clock of the window
    cpu: float  # CPU seconds of every process in the window
    latency: HdrHistogram | None = None
    acker_bytes: float | None = None
    acker_cpu: float | None = None  # CPU seconds of the acker processes, part of ``cpu``
    frames: float | None = None  # frames sent between processes per tree
    asked: float | None = None  # the trees/s a throttled case was asked for
    probe: float | None = None  # CPU µs/tree of the ceiling on every core at once, just before
    checkpoints: HdrHistogram | None = None  # a stateful case: the checkpoint trees' complete latency

    @property
    def rate(self) -> float:
        return self.trees / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu / max(self.trees, 1) * 1e6


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` (every thread of each), from /proc/<pid>/stat."""
    return sum(user_system(pids))


def user_system(pids: list[int]) -> tuple[float, float]:
    """utime and stime of ``pids`` (every thread of each), from /proc/<pid>/stat."""
    user = system = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        user += int(fields[11])  # fields 14 and 15 of proc(5), counted from 3
        system += int(fields[12])
    return user / CLK_TCK, system / CLK_TCK


def ceiling(seconds: float) -> Result:
    """The work itself with Storm's acking, hand-written: stages run a batch of MAX_PENDING trees
    at a time, so the pending dict holds as many roots as the spout may have in flight."""
    rng = random.Random(1)
    bits, choices = rng.getrandbits, rng.choices
    pending: dict[int, int] = {}
    counts: dict[str, int] = {}
    acked = 0
    cpu0, t0 = cpu_seconds([os.getpid()]), time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        # spout: a root id, the first edge's id, the acker's init
        sentences = []
        for _ in range(MAX_PENDING):
            root, edge = bits(64), bits(64)
            pending[root] = edge
            sentences.append((root, edge, " ".join(choices(VOCABULARY, k=WORDS))))
        # split: a new edge id per word; its ack XORs the input edge and every child edge
        words = []
        for root, edge, sentence in sentences:
            xor = edge
            for word in sentence.split():
                child = bits(64)
                xor ^= child
                words.append((root, child, word))
            pending[root] ^= xor
        # count: count the word, ack it; the tree is complete when its value returns to 0
        for root, child, word in words:
            counts[word] = counts.get(word, 0) + 1
            val = pending[root] ^ child
            if val:
                pending[root] = val
            else:
                del pending[root]
                acked += 1
    return Result("ceiling: hand-written loop", acked, time.monotonic() - t0, cpu_seconds([os.getpid()]) - cpu0)


def floor_components() -> tuple[Callable[..., None], SentenceSpout, Split, Count, object]:
    """``bench/api_floor.pyx``'s loop (compiled by pyximport into ``build/bench``), and the bench's
    spout and bolts opened on its collector."""
    import pyximport  # Cython's, a development dependency like the rest of bench/

    hooks = pyximport.install(build_dir=str(Path(__file__).resolve().parent.parent / "build" / "bench"),
                              language_level=3)
    try:
        from bench import api_floor
    finally:
        pyximport.uninstall(*hooks)  # the one module it is for: no import hook left behind

    collector, context = api_floor.Collector(), SimpleNamespace(task_id=1)
    spout, split, count = SentenceSpout(), Split(), Count()
    spout.open({}, context, collector)
    count.prepare({}, context, collector)
    return api_floor.trees, spout, split, count, collector


def api_floor(seconds: float) -> Result:
    """The bench's spout and bolts through Storm's API with nothing behind it: what the user code and
    its calls cost without an engine."""
    run, spout, split, count, collector = floor_components()
    trees = 0
    cpu0, t0 = cpu_seconds([os.getpid()]), time.monotonic()
    while time.monotonic() < t0 + seconds:
        run(spout, split, count, collector, MAX_PENDING)
        trees += MAX_PENDING
    return Result("API floor: user code, no engine", trees, time.monotonic() - t0,
                  cpu_seconds([os.getpid()]) - cpu0)


def _ceiling_cost(seconds: float) -> float:
    return ceiling(seconds).cpu_us


def every_core(seconds: float = 2.0) -> float:
    """CPU µs per tree of the ceiling loop run on every core at once (the mean): how fast this machine
    runs Python just then with all its cores busy, as 2 + 2 keeps them. On a shared machine that can
    be slower than with one core busy (neighbours on the same physical cores): a one-core case never
    meets it."""
    cores = os.cpu_count() or 1
    with multiprocessing.get_context("fork").Pool(cores) as pool:
        return sum(pool.map(_ceiling_cost, [seconds] * cores)) / cores


def in_process(seconds: float, *, stateful: bool = False, windowed: bool = False) -> Result:
    """The word count in this process; ``stateful``: its counts in the embedded store, in a temporary
    directory (a SQLite file per task, written at each commit); ``windowed``: over a sliding window."""
    with tempfile.TemporaryDirectory() as tmp:
        doc = spec(workers=1, ackers=1, stateful=stateful, windowed=windowed)
        if stateful:
            doc["config"]["topology.state.dir"] = tmp
        with LocalCluster(TopologySpec.from_dict(doc)) as cluster:
            cluster.run(seconds=1)  # warm up
            before, lat0 = cluster.trees_acked(), cluster.recorded_latency("sentences")
            cpu0, t0 = cpu_seconds([os.getpid()]), time.monotonic()
            cluster.run(seconds=seconds)
            t1, cpu1 = time.monotonic(), cpu_seconds([os.getpid()])
            label = ("in-process, stateful count" if stateful else "in-process, windowed count" if windowed
                     else "in-process (LocalCluster)")
            result = Result(label, cluster.trees_acked() - before, t1 - t0, cpu1 - cpu0,
                            cluster.recorded_latency("sentences").minus(lat0))
            if stateful:  # a checkpoint's trees: its PREPARE's and its COMMIT's
                result.checkpoints = cluster.recorded_latency(CHECKPOINT_COMPONENT)
            return result


def transport_counts(sup: Supervisor) -> np.ndarray:
    """[bytes of acker traffic (acker messages to ackers, verdicts from them), frames sent]."""
    total = np.zeros(2)
    for child in sup.children:
        for family in text_string_to_metric_families(fetch(f"http://127.0.0.1:{child.metrics_port}/metrics")):
            for s in family.samples:
                if s.name == "squall_transport_bytes_sent_total" and s.labels["lane"] == "control" \
                        and (child.role == "acker" or s.labels["peer"].startswith("acker-")):
                    total[0] += s.value
                elif s.name == "squall_transport_batches_sent_total":
                    total[1] += s.value
    return total


@contextmanager
def running(*, workers: int, ackers: int, rate: float | None = None, pin: bool = False,
            insecure: bool = False, cross: bool = True, flush_ms: float | None = None,
            max_pending: int = MAX_PENDING) -> Iterator[Supervisor]:
    """``squall run``'s processes running the word count, warmed up; stopped on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        doc = spec(workers=workers, ackers=ackers, rate=rate, cross=cross, flush_ms=flush_ms, max_pending=max_pending)
        path.write_text(yaml.safe_dump(doc))
        sup = Supervisor(spec_path=path, spec=TopologySpec.from_dict(doc), run_dir=Path(tmp) / "run",
                         insecure=insecure, pin=pin)
        sup.start()
        try:
            deadline = time.monotonic() + 60
            while sup.scrape().acked["sentences"] == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2)  # warm up
            yield sup
        finally:
            sup.stop()


def processes(label: str, seconds: float, *, workers: int, ackers: int, rate: float | None = None,
              pin: bool = False, profile: Path | None = None, insecure: bool = False, cross: bool = True) -> Result:
    with running(workers=workers, ackers=ackers, rate=rate, pin=pin, insecure=insecure, cross=cross) as sup:
        pids = [os.getpid()] + [c.proc.pid for c in sup.children]
        # --native shows the compiled modules' frames; it pauses a process for each sample (py-spy
        # cannot read native stacks without), so a profiled run's figures are a little worse
        spies = [] if profile is None else [subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--gil", "--native", "--rate", "200",
             "--format", "raw", "--duration", str(int(seconds)), "--pid", str(c.proc.pid), "--output",
             str(profile / f"{workers}w-{c.name}.txt")], stdout=subprocess.DEVNULL) for c in sup.children]
        ackers = [c.proc.pid for c in sup.children if c.role == "acker"]
        acker0 = cpu_seconds(ackers)
        first, counts0, cpu0, t0 = sup.scrape(), transport_counts(sup), cpu_seconds(pids), time.monotonic()
        time.sleep(seconds)
        for spy in spies:
            spy.wait()
        last, counts1, cpu1, t1 = sup.scrape(), transport_counts(sup), cpu_seconds(pids), time.monotonic()
        acker1 = cpu_seconds(ackers)
    trees = int(last.acked["sentences"] - first.acked["sentences"])
    per_tree = (counts1 - counts0) / max(trees, 1)
    return Result(label, trees, t1 - t0, cpu1 - cpu0, last.recorded.minus(first.recorded), per_tree[0],
                  acker1 - acker0, per_tree[1])


def acker_bytes_per_tree(trees: int = 1_000_000) -> tuple[float, float]:
    """(table bytes per tree, process RSS growth per tree) with ``trees`` pending in one acker."""
    gc.collect()
    rss0 = psutil.Process(os.getpid()).memory_info().rss
    acker = Acker()
    rng = np.random.default_rng(1)
    batch = 4096
    for start in range(0, trees, batch):
        n = min(batch, trees - start)
        roots = rng.integers(2, 2**64 - 1, n, dtype=np.uint64, endpoint=True).tolist()
        vals = rng.integers(1, 2**64 - 1, n, dtype=np.uint64, endpoint=True).tolist()
        acker.process_messages(zip([0] * n, roots, vals, [7] * n, strict=True))
    rss1 = psutil.Process(os.getpid()).memory_info().rss
    return acker.trees.nbytes / acker.pending, (rss1 - rss0) / acker.pending


def ms(h: HdrHistogram | None, q: float) -> str:
    return f"{h.quantile(q) * 1000:.1f}" if h is not None and h.count else "—"


def table(results: list[Result]) -> None:
    head = ("case", "trees/s", "CPU µs/tree", "of it ackers", "cores busy", "p50 ms", "p99 ms", "p99.9 ms",
            "acker B/tree", "frames/tree")
    rows = [head] + [(r.label, f"{r.rate:,.0f}", f"{r.cpu_us:,.1f}",
                      "—" if r.acker_cpu is None else f"{r.acker_cpu / max(r.trees, 1) * 1e6:,.1f}",
                      f"{r.cpu / r.seconds:.2f}", ms(r.latency, 0.5),
                      ms(r.latency, 0.99), ms(r.latency, 0.999),
                      "—" if r.acker_bytes is None else f"{r.acker_bytes:.1f}",
                      "—" if r.frames is None else f"{r.frames:.3f}") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for i, row in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in
                                enumerate(zip(row, widths, strict=True))) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 1) + (":" if j else "-") for j, w in enumerate(widths)) + "|")


# The targets: what, the cases it needs, its value from one round's results, the target (in
# parentheses: a figure to read, not a target) and whether a value meets it.
TARGETS: list[tuple[str, tuple[str, ...], Callable[[dict[str, Result]], float], str, Callable[[float], bool]]] = [
    ("in-process trees/s ÷ ceiling trees/s", ("local", "ceiling"),
     lambda by: by["local"].rate / by["ceiling"].rate, "≥ 1.0", lambda v: v >= 1.0),
    ("API floor trees/s ÷ ceiling trees/s", ("floor", "ceiling"),
     lambda by: by["floor"].rate / by["ceiling"].rate, "(the most in-process ÷ ceiling can be)", lambda v: True),
    ("in-process trees/s ÷ API floor trees/s", ("local", "floor"),
     lambda by: by["local"].rate / by["floor"].rate, "(how near Squall comes)", lambda v: True),
    ("CPU µs/tree: 1 worker + 1 acker ÷ in-process", ("1w1a", "local"),
     lambda by: by["1w1a"].cpu_us / by["local"].cpu_us, "≤ 1.3", lambda v: v <= 1.3),
    ("CPU µs/tree: 2 workers + 2 ackers ÷ in-process", ("2w2a", "local"),
     lambda by: by["2w2a"].cpu_us / by["local"].cpu_us, "≤ 1.6", lambda v: v <= 1.6),
    ("CPU µs/tree: 2 workers + 2 ackers, mutual TLS ÷ plaintext", ("2w2a", "2w2a-plain"),
     lambda by: by["2w2a"].cpu_us / by["2w2a-plain"].cpu_us, "(what TLS costs)", lambda v: True),
    ("CPU µs/tree: 2w + 2a, no word crossing workers ÷ in-process", ("2w2a-local", "local"),
     lambda by: by["2w2a-local"].cpu_us / by["local"].cpu_us, "(without crossing)", lambda v: True),
    ("CPU µs/tree: 2 workers + 2 ackers pinned (--pin) ÷ in-process", ("2w2a-pin", "local"),
     lambda by: by["2w2a-pin"].cpu_us / by["local"].cpu_us, "(an option)", lambda v: True),
    ("trees/s: 2 workers + 2 ackers ÷ 1 worker + 1 acker", ("2w2a", "1w1a"),
     lambda by: by["2w2a"].rate / by["1w1a"].rate, "≥ 1.0", lambda v: v >= 1.0),
    ("p99 ms at 80 % of 1 worker + 1 acker's maximum", ("80pct",),
     lambda by: by["80pct"].latency.quantile(0.99) * 1000, "≤ 20", lambda v: v <= 20),
    ("p50 ms at 80 % of 1 worker + 1 acker's maximum", ("80pct",),
     lambda by: by["80pct"].latency.quantile(0.5) * 1000, "≤ 5", lambda v: v <= 5),
    ("CPU µs/tree: stateful count ÷ count, in-process", ("local-stateful", "local"),
     lambda by: by["local-stateful"].cpu_us / by["local"].cpu_us, "(what durable state costs)", lambda v: True),
    ("checkpoint tree p50 ms, in-process stateful count", ("local-stateful",),
     lambda by: by["local-stateful"].checkpoints.quantile(0.5) * 1000, "(PREPARE or COMMIT)", lambda v: True),
    ("checkpoint tree p99 ms, in-process stateful count", ("local-stateful",),
     lambda by: by["local-stateful"].checkpoints.quantile(0.99) * 1000, "(PREPARE or COMMIT)", lambda v: True),
    ("CPU µs/tree: windowed count ÷ count, in-process", ("local-windowed", "local"),
     lambda by: by["local-windowed"].cpu_us / by["local"].cpu_us, "(a window of 10,000 words by 1,000)",
     lambda v: True),
    ("CPU µs per word: windowed count - count, in-process", ("local-windowed", "local"),
     lambda by: (by["local-windowed"].cpu_us - by["local"].cpu_us) / 8, "(what windowing adds to a word)",
     lambda v: True),
]


def targets(rounds: list[dict[str, Result]]) -> None:
    """Each target as the median of its ratio over the rounds (a round's cases ran one after another, a
    minute apart), with their range: on a shared machine one round can land anywhere in it."""
    for what, needs, ratio, target, met in TARGETS:
        values = sorted(ratio(by) for by in rounds if all(k in by for k in needs))
        if not values:
            continue
        mid = statistics.median(values)
        spread = f"{values[0]:.2f}–{values[-1]:.2f}" if len(values) > 1 else ""
        if target.startswith("("):
            print(f"  {what:<62} {mid:6.2f}  {spread:>11}  {target}")
        else:
            print(f"  {what:<62} {mid:6.2f}  {spread:>11}  target {target:<6} {'met' if met(mid) else 'NOT met'}")


def median_round(results: list[Result]) -> Result:
    """Of one case's rounds, the one with the median CPU per tree: a row of figures measured together."""
    return sorted(results, key=lambda r: r.cpu_us)[len(results) // 2]


def run_round(cases: list[str], args: argparse.Namespace, index: int) -> dict[str, Result]:
    """Every case once, one after another."""
    if args.rounds > 1:
        print(f"round {index + 1} of {args.rounds} ...", flush=True)
    by: dict[str, Result] = {}
    if "ceiling" in cases:
        by["ceiling"] = ceiling(args.seconds / 2)
    if "floor" in cases:
        by["floor"] = api_floor(args.seconds / 2)
    if "local" in cases:
        by["local"] = in_process(args.seconds)
    if "local-stateful" in cases:
        by["local-stateful"] = in_process(args.seconds, stateful=True)
    if "local-windowed" in cases:
        by["local-windowed"] = in_process(args.seconds, windowed=True)
    if "1w1a" in cases:
        by["1w1a"] = processes("1 worker + 1 acker", args.seconds, workers=1, ackers=1, pin=args.pin,
                               profile=args.profile and args.profile / f"round{index + 1}")
    if "80pct" in cases:
        # 80 % of the maximum just measured: run later in the round, a machine that slowed meanwhile
        # (the ceiling drifts by up to 1.6x in a run) made "80 %" a saturated run, its latency a queue's
        rate = 0.8 * by["1w1a"].rate
        by["80pct"] = processes("1w + 1a at 80 %", args.seconds, workers=1, ackers=1, rate=rate, pin=args.pin)
        by["80pct"].asked = rate
    if "2w2a" in cases:
        probe = every_core()
        by["2w2a"] = processes("2 workers + 2 ackers", args.seconds, workers=2, ackers=2, pin=args.pin,
                               profile=args.profile and args.profile / f"round{index + 1}")
        by["2w2a"].probe = probe
    if "2w2a-plain" in cases:  # the cost of mutual TLS, side by side
        by["2w2a-plain"] = processes("2w + 2a, plaintext gRPC", args.seconds, workers=2, ackers=2, pin=args.pin,
                                     insecure=True)
    if "2w2a-local" in cases:  # what the words crossing workers cost: the same work with none crossing
        by["2w2a-local"] = processes("2w + 2a, no word crossing", args.seconds, workers=2, ackers=2, pin=args.pin,
                                     cross=False)
    if "2w2a-pin" in cases:  # squall run --pin: every process on one core, side by side
        by["2w2a-pin"] = processes("2w + 2a, pinned (--pin)", args.seconds, workers=2, ackers=2, pin=True)
    if "2w2a-light" in cases:  # far below the maximum, frames (not tuples) are what the processes pay for
        by["2w2a-light"] = processes(f"2w + 2a at {LIGHT:,} trees/s", args.seconds, workers=2, ackers=2,
                                     pin=args.pin, rate=LIGHT / 2)
        by["2w2a-light"].asked = LIGHT
    return by


LIGHT = 10_000  # trees/s of the light-load case, over both spout tasks
CASES = ("ceiling", "floor", "local", "local-stateful", "local-windowed", "1w1a", "80pct", "2w2a", "2w2a-plain",
         "2w2a-local", "2w2a-pin", "2w2a-light")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement window per case")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run every case this many times, one round after another; the targets are the "
                             "medians over the rounds (default 3)")
    parser.add_argument("--pin", action="store_true", help="pin each process (every thread of it) to one core")
    parser.add_argument("--no-memory", action="store_true", help="skip the acker table's memory figure")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="py-spy --gil --native each worker and acker during the 1w1a and 2w2a windows "
                             "(raw stacks into DIR)")
    args = parser.parse_args()
    cases = args.cases.split(",")
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"--cases: unknown {sorted(unknown)}; choose from {','.join(CASES)}")
    if args.profile and not (Path(sys.executable).parent / "py-spy").exists():
        parser.error("--profile needs py-spy in this Python's environment: pip install py-spy")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if "80pct" in cases and "1w1a" not in cases:
        parser.error("--cases: 80pct needs 1w1a (its rate is 80 % of 1w1a's)")
    print(f"word count: {WORDS}-word sentences, 1,000-word vocabulary, acking on, maxSpoutPending {MAX_PENDING}; "
          f"{os.cpu_count()} cores; {args.seconds:g} s per case, {args.rounds} round{'s' * (args.rounds > 1)}; "
          f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    if args.profile:
        for i in range(args.rounds):
            (args.profile / f"round{i + 1}").mkdir(parents=True, exist_ok=True)
    rounds = [run_round(cases, args, i) for i in range(args.rounds)]
    last_ceiling = ceiling(args.seconds / 2) if "ceiling" in cases else None
    print()
    table([median_round([by[case] for by in rounds]) for case in rounds[0]])
    if args.rounds > 1:
        print(f"(each row: the round of {args.rounds} with the median CPU µs/tree)")
    print(f"\ntargets ({'the median over the rounds, and the range' if args.rounds > 1 else 'ratios of this run'}):")
    targets(rounds)
    if last_ceiling:
        first = rounds[0]["ceiling"].cpu_us
        print(f"\nnoise: the ceiling took {first:.1f} CPU µs/tree first and {last_ceiling.cpu_us:.1f} "
              f"last ({last_ceiling.cpu_us / first:.2f}×); load average {os.getloadavg()[0]:.2f} at the end")
    for i, by in enumerate(rounds):
        if (r := by.get("2w2a")) is not None and r.probe and "ceiling" in by:
            # the in-process case runs on one core, 2 + 2 on both: a machine slower with both busy
            # raises 2 + 2's ratio without any change in the engine (bench/threads.py --rounds)
            print(f"machine, round {i + 1}: the ceiling took {by['ceiling'].cpu_us:.1f} CPU µs/tree on one core, "
                  f"{r.probe:.1f} on every core at once just before 2 + 2 ({r.probe / by['ceiling'].cpu_us:.2f}×); "
                  f"2 + 2 took {r.cpu_us:.1f}")
        if (r := by.get("80pct")) is not None and r.latency is not None and r.latency.count:
            # Little's law with the median for the mean: near max spout pending, the run was a queue at
            # its limit (the machine slowed, or 80 % was more than the worker could do), not 80 % load
            flight = r.rate * r.latency.quantile(0.5)
            print(f"80 % case, round {i + 1}: {r.rate:,.0f} of the {r.asked:,.0f} trees/s asked, about "
                  f"{flight:,.0f} trees in flight (rate × p50) of max spout pending {MAX_PENDING:,}")
    if not args.no_memory:
        table_bytes, rss = acker_bytes_per_tree()
        print(f"acker memory, 1,000,000 trees pending: {table_bytes:.1f} bytes/tree in the table, "
              f"{rss:.1f} bytes/tree of process RSS growth")


if __name__ == "__main__":
    main()
