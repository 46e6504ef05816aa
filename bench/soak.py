"""Soak: a topology at half its maximum rate for minutes, with failing and timing-out tuples; does
anything grow or get lost?

Records are appended to the embedded durable log while the topology reads them
(``examples/logcount.yaml``: a LogSpout with two tasks, at least once) into ``SoakSink``, a
``CountSink`` that fails ``--fail`` of its input (5 %) and never acks ``--drop`` of it (1 %), so those
trees fail or time out and are replayed; 2 workers and 2 ackers. First the maximum rate is measured
on a backlog (unless ``--rate`` gives one), then records are appended at half of it for
``--minutes``. Every ``--every`` seconds a line gives each process's RSS, the trees acked, failed
and timed out and the p99 complete latency of that interval, and how far the sink is behind. In the
end: records lost (appended, never counted), RSS growth of each process after the warm-up.

    python bench/soak.py [--minutes 10] [--rate RECORDS_PER_S] [--fail 0.05] [--drop 0.01] [--warm-up 120]

A benchmark prints figures and never fails.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from examples.logcount import TOPIC, CountSink, _fresh, _produce, _spec_file, read_counts  # noqa: E402

TIMEOUT = 5  # messageTimeoutSeconds: a dropped tree times out after 5 to 10 s


class SoakSink(CountSink):
    """Counts what it processes (a :class:`CountSink`), except ``soak.fail`` of its input, which it
    fails, and ``soak.drop`` of it, which it never acks (those trees time out)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.fail_share = float(conf.get("soak.fail", 0.05))
        self.drop_share = float(conf.get("soak.drop", 0.01))
        self.rng = random.Random()

    def execute(self, tup):
        if not tup.is_tick:
            draw = self.rng.random()
            if draw < self.fail_share:
                self.collector.fail(tup)
                return
            if draw < self.fail_share + self.drop_share:
                return  # never acked: its tree times out
        super().execute(tup)


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Appender:
    """Appends records ``{"n": ...}`` to the log's topic at a steady rate: each call appends what is due."""

    def __init__(self, log, *, first: int, rate: float) -> None:
        self.log, self.next, self.rate = log, first, rate
        self.began = time.monotonic()
        self.first = first

    def catch_up(self) -> None:
        due = self.first + int((time.monotonic() - self.began) * self.rate)
        if due > self.next:
            self.log.append(TOPIC, [(None, {"n": n}) for n in range(self.next, due)])
            self.next = due


def run(*, directory: Path, minutes: float, rate: float | None, fail: float, drop: float, every: float,
        warm_up: float = 120.0, calibrate: int = 60_000, finish_within: float = 120.0, say=print) -> int:
    """Run the soak; returns the records lost."""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)
    from squall.metrics.scrape import Totals
    from squall.process.supervisor import Supervisor
    from squall.spouts.log import DurableLog
    from squall.topology import load_spec

    directory = directory.resolve()
    _fresh(directory)
    log_path = directory / "log.db"
    backlog = 0 if rate else calibrate
    _produce(log_path, backlog)  # creates the topic; the backlog measures the maximum rate
    spec_path = _spec_file(directory, log_path)
    doc = yaml.safe_load(spec_path.read_text())
    doc.update(workers=2, ackers=2, messageTimeoutSeconds=TIMEOUT)
    doc["bolts"][0]["className"] = "bench.soak:SoakSink"
    doc["bolts"][0]["config"].update({"soak.fail": fail, "soak.drop": drop})
    spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_spec(spec_path)
    spouts = [s.name for s in spec.spouts]
    sup = Supervisor(spec_path=spec_path, spec=spec, run_dir=directory / "run")
    log = DurableLog(log_path)
    sup.start()
    try:
        if rate is None:
            rate = _max_rate(sup, directory, backlog)
            say(f"maximum rate: {rate:,.0f} records/s (a backlog of {backlog:,}, {fail:.0%} failed, "
                f"{drop:.0%} timing out); soaking at half of it")
            rate /= 2
        appender = Appender(log, first=backlog, rate=rate)
        say(f"soak: {rate:,.0f} records/s for {minutes:g} min, {fail:.0%} failed, {drop:.0%} timing out "
            f"(T = {TIMEOUT} s), 2 workers + 2 ackers; a line every {every:g} s")
        names = [c.name for c in sup.children]
        say("| s | " + " | ".join(f"{n} MiB" for n in names) + " | acked | failed | timed out | p99 ms | behind |")
        say("|--:|" + "--:|" * (len(names) + 5))
        began = time.monotonic()
        last, next_line = sup.scrape(), began + every
        samples: list[tuple[float, list[float]]] = []
        while (now := time.monotonic()) < began + minutes * 60:
            for event in sup.check():
                say(event)
            appender.catch_up()
            if now >= next_line:
                totals = sup.scrape()
                rss = [rss_mb(c.proc.pid) for c in sup.children]
                samples.append((now - began, rss))
                counted, _ = read_counts(directory)
                say(f"| {now - began:.0f} | " + " | ".join(f"{r:.0f}" for r in rss) + " | "
                    + " | ".join(f"{_delta(totals, last, field, spouts):,.0f}"
                                 for field in ("acked", "failed", "timed_out"))
                    + f" | {totals.recorded.minus(last.recorded).quantile(0.99) * 1000:,.0f}"
                    + f" | {appender.next - counted:,} |")
                last, next_line = totals, next_line + every
            time.sleep(0.02)
        appended = appender.next
        # Let the replays of the last failed and timed-out trees finish.
        deadline = time.monotonic() + finish_within
        while read_counts(directory)[0] < appended and time.monotonic() < deadline:
            sup.check()
            time.sleep(0.2)
    finally:
        sup.stop()
        log.close()
    counted, twice = read_counts(directory)
    totals: Totals = sup.final_totals()
    lost = appended - counted
    say(f"records appended {appended:,}; lost {lost:,}; counted twice {twice:,}; trees acked "
        f"{sum(totals.acked[s] for s in spouts):,.0f}, failed {sum(totals.failed[s] for s in spouts):,.0f}, "
        f"timed out {sum(totals.timed_out[s] for s in spouts):,.0f}; "
        f"p99 over the whole run {totals.recorded.quantile(0.99) * 1000:,.0f} ms")
    warm = next((rss for t, rss in samples if t >= warm_up), None)
    if warm is not None:
        end = samples[-1][1]
        say(f"RSS growth after the warm-up (first sample after {warm_up:.0f} s to the last): "
            + ", ".join(f"{n} {w:.0f} -> {e:.0f} MiB ({(e - w) / w:+.1%})"
                        for n, w, e in zip(names, warm, end, strict=True)))
    return lost


def _delta(now, before, field: str, spouts: list[str]) -> float:
    """The increase of a spouts' counter between two scrapes."""
    return sum(getattr(now, field)[c] - getattr(before, field)[c] for c in spouts)


def _max_rate(sup, directory: Path, backlog: int) -> float:
    """Records counted per second between 10 % and 90 % of the backlog."""
    low = high = None
    while high is None:
        sup.check()
        counted, _ = read_counts(directory)
        now = time.monotonic()
        if low is None and counted >= backlog * 0.1:
            low = (now, counted)
        elif low is not None and counted >= backlog * 0.9:
            high = (now, counted)
        time.sleep(0.05)
    return (high[1] - low[1]) / (high[0] - low[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, help="records per second (default: half the measured maximum)")
    parser.add_argument("--fail", type=float, default=0.05, help="share of tuples the sink fails")
    parser.add_argument("--drop", type=float, default=0.01, help="share of tuples the sink never acks")
    parser.add_argument("--every", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--warm-up", type=float, default=120.0, metavar="SECONDS",
                        help="RSS growth is measured from the first line after this")
    parser.add_argument("--dir", default=".squall/soak")
    args = parser.parse_args(argv)
    run(directory=Path(args.dir), minutes=args.minutes, rate=args.rate, fail=args.fail, drop=args.drop,
        every=args.every, warm_up=args.warm_up)
    return 0


if __name__ == "__main__":
    sys.exit(main())
