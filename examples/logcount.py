"""Log count: every record of the embedded log counted at least once, even when a worker is killed.

``python -m examples.logcount`` (from the repository root):

1. produces 100,000 records (``--records``) into topic ``records`` (4 partitions) of a fresh log
   ``.squall/logcount/log.db`` (``--dir``);
2. runs ``examples/logcount.yaml`` as worker and acker processes (``Supervisor``, as ``squall
   run`` does): two LogSpout tasks, at least once, into two ``CountSink`` tasks;
3. kills the worker running spout task 0 with SIGKILL once 30 % of the records were counted
   (``--kill-at``), and lets the supervisor restart it: the restarted spout resumes at its
   committed offsets, and the tuples lost with the worker time out and are replayed;
4. waits until every record was counted and every offset committed, stops the processes (SIGTERM:
   they drain) and prints how many records were counted at least once and how many twice or more.

``CountSink`` counts how often it processed each record in ``counts-<task>.db`` (SQLite) and acks a
tuple only once the count is on disk, so what it counted survives its own process being killed
(a :class:`squall.testing.DurableSink`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import yaml

from squall import StatefulBolt
from squall.testing import DurableSink

SCHEMA = ("CREATE TABLE IF NOT EXISTS counted (partition INTEGER NOT NULL, off INTEGER NOT NULL,"
          " times INTEGER NOT NULL, PRIMARY KEY (partition, off)) WITHOUT ROWID")
UPSERT = ("INSERT INTO counted VALUES (?, ?, 1)"
          " ON CONFLICT (partition, off) DO UPDATE SET times = times + 1")


class CountSink(DurableSink):
    """Counts each ``(partition, offset)`` it processes in its own SQLite file, then acks.

    A :class:`~squall.testing.DurableSink`: tuples are written in one synced transaction per
    ``sink.batch`` of them (default 200) or per tick, and acked only then. A record processed again
    (replayed after a failure) has its count go up: ``times`` is how often it was counted.
    """

    file_prefix = "counts"
    schema = ("CREATE TABLE IF NOT EXISTS counted (partition INTEGER NOT NULL, off INTEGER NOT NULL,"
              " times INTEGER NOT NULL, PRIMARY KEY (partition, off)) WITHOUT ROWID")
    insert = ("INSERT INTO counted VALUES (?, ?, 1)"
              " ON CONFLICT (partition, off) DO UPDATE SET times = times + 1")

    def row(self, tup):
        return tup["partition"], tup["offset"]


#: How many keys StatefulCount counts the records by (a word count's vocabulary)
KEYS = 1000


class StatefulCount(StatefulBolt):
    """Counts the records by key (``n % KEYS``, as a word count counts words) in its checkpointed state: a
    record's count is committed at the checkpoint after it, and only then is the record acked."""

    outputs = []

    def execute(self, tup):
        key = str(tup["value"]["n"] % KEYS)
        self.state.put(key, self.state.get(key, 0) + 1)


def true_counts(records: int) -> dict[str, int]:
    """What StatefulCount's counts are, with each of ``records`` records counted once."""
    counts = dict.fromkeys(map(str, range(min(KEYS, records))), records // KEYS)
    for n in range(records // KEYS * KEYS, records):
        counts[str(n % KEYS)] += 1
    return counts


def read_counts(directory: Path) -> tuple[int, int]:
    """(records counted at least once, records counted twice or more) over every task's file.

    The fields grouping sends a record to the same task every time, so the files do not overlap.
    """
    rows = CountSink.query(directory, "SELECT count(*), coalesce(sum(times > 1), 0) FROM counted")
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


# ---- the runner -------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
YAML = Path(__file__).with_suffix(".yaml")
TOPIC, PARTITIONS = "records", 4


def _say(text: str) -> None:
    print(text, flush=True)


def _fresh(directory: Path) -> None:
    """Remove what an earlier run left in ``directory`` (only the files this example writes)."""
    directory.mkdir(parents=True, exist_ok=True)
    for pattern in ("log.db*", "counts-*.db*", "logcount.yaml"):
        for path in directory.glob(pattern):
            path.unlink()
    shutil.rmtree(directory / "run", ignore_errors=True)


def _produce(path: Path, records: int) -> dict[int, int]:
    """Append ``records`` records ``{"n": 0}``, ``{"n": 1}``, ... round-robin; the partitions' end offsets."""
    from squall.spouts.log import DurableLog

    log = DurableLog(path, create=True)
    try:
        log.create_topic(TOPIC, partitions=PARTITIONS)
        for start in range(0, records, 10_000):
            log.append(TOPIC, [(None, {"n": n}) for n in range(start, min(start + 10_000, records))])
        return {p: log.watermarks(TOPIC, p)[1] for p in range(PARTITIONS)}
    finally:
        log.close()


def _spec_file(directory: Path, log_path: Path) -> Path:
    """examples/logcount.yaml with the log and the counts in ``directory`` (absolute paths)."""
    doc = yaml.safe_load(YAML.read_text())
    for spout in doc["spouts"]:
        spout["config"]["log.path"] = str(log_path)
    for bolt in doc["bolts"]:
        bolt["config"]["sink.dir"] = str(directory)
    path = directory / "logcount.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _tail_logs(sup) -> str:
    return "\n".join(f"--- {c.name} ({c.log_path})\n{c.log_path.read_text()[-2000:]}"
                     for c in sup.children if c.log_path.exists())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.logcount", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records to produce (default 100,000)")
    parser.add_argument("--dir", default=".squall/logcount",
                        help="where the log, the counts and the process logs go (default .squall/logcount)")
    parser.add_argument("--kill-at", type=float, default=0.3, metavar="FRACTION",
                        help="kill a worker once this share of the records was counted (default 0.3)")
    parser.add_argument("--timeout", type=float, default=300, metavar="SECONDS",
                        help="give up if counting takes longer (default 300)")
    args = parser.parse_args(argv)
    if args.records < 1 or not 0 < args.kill_at < 1:
        parser.error("--records must be >= 1 and --kill-at between 0 and 1")

    # The workers import examples.logcount:CountSink: make the repository importable wherever we run.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)
    from squall.process.supervisor import Supervisor
    from squall.spouts.log import DurableLog
    from squall.topology import load_spec, validate
    from squall.topology.assignment import assign
    from squall.topology.plan import Plan

    directory = Path(args.dir).resolve()
    log_path = directory / "log.db"
    began = time.monotonic()
    _fresh(directory)
    ends = _produce(log_path, args.records)
    produced_in = time.monotonic() - began
    _say(f"produced {args.records:,} records into {PARTITIONS} partitions of topic {TOPIC!r} in {log_path} "
         f"({produced_in:.1f} s)")

    spec_path = _spec_file(directory, log_path)
    spec = load_spec(spec_path)
    validate(spec)
    spout = spec.spouts[0]
    group = spout.config["log.group"]
    plan = Plan(spec)
    victim_name = assign(plan.layout).task_owner()[plan.component_tasks[spout.name][0]]
    sup = Supervisor(spec_path=spec_path, spec=spec, run_dir=directory / "run")
    _say(f"running {spec.name!r}: {spec.workers} workers, {spec.num_ackers} acker(s), "
         f"{spout.config['processing.guarantee']}; process logs in {sup.run_dir}/")
    counting_began = time.monotonic()
    sup.start()
    victim = sup.child(victim_name)
    # Spout task i of n reads the partitions p with p % n == i.
    victim_partitions = [p for p in range(PARTITIONS) if p % spout.num_tasks == 0]
    log = DurableLog(log_path)
    killed = False
    last_line = last_counted = 0.0
    deadline = counting_began + args.timeout
    try:
        while True:
            for event in sup.check():
                _say(event)
            counted, twice = read_counts(directory)
            committed = {p: c.offset for p, c in log.committed(group, TOPIC).items()}
            now = time.monotonic()
            # Kill once the share is counted and the victim task has committed on each of its
            # partitions, so its restart has committed offsets to resume from.
            if (not killed and counted >= args.kill_at * args.records
                    and all(committed.get(p, 0) > 0 for p in victim_partitions)):
                killed = True
                if counted >= args.records:
                    _say("every record was counted before the kill point; not killing a worker")
                else:
                    os.kill(victim.proc.pid, signal.SIGKILL)
                    victim.proc.wait()
                    at_kill = {p: c.offset for p, c in log.committed(group, TOPIC).items()
                               if p in victim_partitions}
                    _say(f"killed {victim.name} (pid {victim.proc.pid}, runs spout task 0 of {spout.name!r}) "
                         f"with SIGKILL after {counted:,} of {args.records:,} records were counted")
                    _say("  committed offsets of its partitions: " + ", ".join(
                        f"{TOPIC}/{p} at {offset:,}" for p, offset in sorted(at_kill.items()))
                        + "; the restarted spout task resumes reading there")
                continue  # the next round restarts it
            if now - last_line >= 1.0:
                rate = (counted - last_counted) / (now - last_line) if last_line else 0.0
                _say(f"{now - counting_began:6.1f} s  counted {counted:>9,} / {args.records:,}  "
                     f"{rate:>8,.0f}/s  twice or more {twice:>6,}")
                last_line, last_counted = now, counted
            if counted >= args.records and all(committed.get(p) == ends[p] for p in range(PARTITIONS)):
                break  # every record counted, every offset committed
            if now > deadline:
                _say(f"gave up after {args.timeout:.0f} s: {counted:,} of {args.records:,} records counted\n"
                     f"{_tail_logs(sup)}")
                return 1
            time.sleep(0.05)
    finally:
        _say("stopping: spouts deactivate, in-flight tuples drain...")
        codes = sup.stop()
        log.close()

    counted, twice = read_counts(directory)
    elapsed = time.monotonic() - began
    bad = {name: code for name, code in codes.items() if code != 0}
    every = counted == args.records
    _say("")
    _say(f"records produced:       {args.records:>10,}")
    _say(f"counted at least once:  {counted:>10,}  ({'every record' if every else 'RECORDS MISSING'})")
    _say(f"counted twice or more:  {twice:>10,}  (replayed after the kill: at least once, not exactly once)")
    _say(f"worker restarts:        {sum(c.restarts for c in sup.children):>10,}")
    _say(f"elapsed:                {elapsed:>10.1f} s  (producing {produced_in:.1f} s, "
         f"counting and stopping {elapsed - produced_in:.1f} s)")
    if bad:
        _say(f"processes that did not exit cleanly: {bad}; see their logs in {sup.run_dir}/")
    return 0 if every and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
