"""Chaos: kill processes while records flow, and count what was lost and what was counted twice.

Records from the embedded durable log (``examples/logcount.yaml``'s LogSpout, two tasks) go through
2 workers and 2 ackers into ``CountSink``, which durably counts every record it processed before
acking it (``examples.logcount``). While it runs, a random worker or acker is killed with SIGKILL
every ``--kill-every`` seconds (the supervisor restarts it, as Kubernetes would); once a quarter of
the records were counted (or half way through the chaos, if sooner), a process is stopped with
SIGSTOP for two message timeouts; once half were, the link to worker-1 is cut for ``--cut``
seconds: every peer reaches worker-1 through a
relay (:class:`LinkCut`) that stops reading, so their frames to it stall in the sockets, as behind a
process that stops reading. Then the chaos stops, the topology finishes, and the counts are read
back: per guarantee, records lost, duplicates, throughput and p99 latency.

    python bench/chaos.py [--records 1000000] [--minutes 10] [--guarantee both] [--cut 20]
                          [--kill-every 3] [--max-spout-pending 2000] [--max-uncommitted OFFSETS]
                          [--state embedded|redis|both]

With ``--state``, a stateful bolt counts the records by key instead, and ``--guarantee`` is its state's
(at_least_once, exactly_once or both): no key under its true count at least once, every key at it
exactly once.

A benchmark prints figures and never fails; ``tests/procs/test_chaos.py`` runs a short version and
asserts the guarantees (nothing lost at least once, nothing twice at most once, exactly once exact).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from examples.logcount import PARTITIONS, TOPIC, _fresh, _produce, _spec_file, read_counts, true_counts  # noqa: E402

TIMEOUT = 3  # messageTimeoutSeconds: what a kill loses is replayed within 3 to 6 s
CUT = 20.0  # seconds a link stays cut: longer than gRPC keepalive's 10 s + 5 s, so its streams close


class LinkCut:
    """A TCP relay in front of one process's gRPC port, for cutting the link to it.

    While cut, the relay stops reading from both sides of every connection (at most one chunk
    already read goes through): senders fill their socket buffers and stall, and new connections
    are accepted but carry nothing, as across a network partition. :meth:`heal` resumes.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.flowing = threading.Event()
        self.flowing.set()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.5)
        self.port = self._server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="link-cut", daemon=True).start()

    def cut(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self._closed = True
        self.flowing.set()
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:  # the process is down (killed, restarting): as if it refused
                conn.close()
                continue
            upstream.settimeout(None)
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                self.flowing.wait()
                data = src.recv(65536)
                self.flowing.wait()  # a chunk read just before the cut waits for the heal
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


@dataclass(frozen=True)
class ChaosResult:
    guarantee: str
    records: int
    counted: int  # records counted at least once
    twice: int  # records counted twice or more
    kills: int
    stops: int
    cuts: int
    seconds: float
    p99_ms: float | None  # None when no tree was tracked (at most once emits untracked tuples)

    @property
    def lost(self) -> int:
        return self.records - self.counted


def _stateful(doc: dict, state: str, redis_url: str | None, state_guarantee: str) -> None:
    """The topology counts the records by key in a stateful bolt whose state is in ``state`` (embedded or
    redis) instead of counting each record in CountSink's files, with ``state_guarantee``."""
    sink = doc["bolts"][0]
    doc["bolts"][0] = {"name": sink["name"], "className": "examples.logcount:StatefulCount",
                       "parallelism": sink["parallelism"], "stateful": True, "inputs": sink["inputs"]}
    doc.setdefault("config", {})["topology.state.provider"] = state
    doc["config"]["topology.state.guarantee"] = state_guarantee
    if redis_url:
        doc["config"]["topology.state.redis.url"] = redis_url


def committed_counts(spec, directory: Path) -> dict[str, int]:
    """The stateful count's committed counts, over its tasks' stores (run/state/ for the embedded store)."""
    from squall.state.config import DIR_KEY
    from squall.state.stores import open_store
    from squall.topology.assignment import layout

    conf = {**spec.config, DIR_KEY: str(directory / "run" / "state")}
    counts: dict[str, int] = {}
    for task in layout(spec).component_tasks[spec.bolts[0].name]:
        store = open_store(conf, topology=spec.name, component=spec.bolts[0].name, task=task)
        try:
            for key, count in store.load()[1].items():  # a key is counted by every task its records go to
                counts[key] = counts.get(key, 0) + count
        finally:
            store.close()
    return counts


def run(*, directory: Path, records: int, seconds: float, guarantee: str, kill_every: float = 3.0,
        cut: float = CUT, max_spout_pending: int = 2000, max_uncommitted: int | None = None,
        finish_within: float = 300.0, seed: int = 1, state: str | None = None, redis_url: str | None = None,
        say=print) -> ChaosResult:
    """Run the chaos for ``seconds`` (or until every record is done), then let the topology finish.

    ``state`` (embedded or redis): the records are counted by key in a stateful bolt, with ``guarantee``
    (at_least_once or exactly_once) as the state's guarantee, and ``counted``/``twice`` are read from its
    committed counts against the true ones (a key under its true count lost records; what is over it was
    counted twice)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)
    from squall import contract
    from squall.process.supervisor import QUICK_EXIT, Supervisor
    from squall.spouts.log import DurableLog
    from squall.topology import load_spec

    rng = random.Random(seed)
    directory = directory.resolve()
    _fresh(directory)
    log_path = directory / "log.db"
    ends = _produce(log_path, records)
    spec_path = _spec_file(directory, log_path)
    doc = yaml.safe_load(spec_path.read_text())
    doc.update(workers=2, ackers=2, messageTimeoutSeconds=TIMEOUT, maxSpoutPending=max_spout_pending)
    if state is None:
        doc["spouts"][0]["config"]["processing.guarantee"] = guarantee
    if max_uncommitted is not None:
        doc["spouts"][0]["config"]["max.uncommitted.offsets"] = max_uncommitted
    if state is not None:
        _stateful(doc, state, redis_url, guarantee)
    spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_spec(spec_path)
    truth = true_counts(records)

    def read() -> tuple[int, int]:
        if state is None:
            return read_counts(directory)
        counts = committed_counts(spec, directory)
        return (sum(min(counts.get(k, 0), n) for k, n in truth.items()),
                sum(max(counts.get(k, 0) - n, 0) for k, n in truth.items()))
    group = spec.spouts[0].config["log.group"]
    sup = Supervisor(spec_path=spec_path, spec=spec, run_dir=directory / "run")
    # Every peer reaches worker-1 through the relay; its own port is the real one.
    cut_worker = sup.child(contract.process_name(contract.WORKER, 1))
    relay = LinkCut(cut_worker.grpc_port)
    peers = contract.peers_var(contract.WORKER)
    sup.env[peers] = ",".join(f"127.0.0.1:{relay.port}" if a == f"127.0.0.1:{cut_worker.grpc_port}" else a
                              for a in sup.env[peers].split(","))
    log = DurableLog(log_path)
    kills = stops = cuts = 0
    began = time.monotonic()
    chaos_until = began + seconds
    healed_at: float | None = None
    stopped: tuple[object, float] | None = None
    next_kill = began + kill_every
    last_change, last_counted = began, -1
    sup.start()

    def done() -> bool:
        committed = {p: c.offset for p, c in log.committed(group, TOPIC).items()}
        if any(committed.get(p) != ends[p] for p in range(PARTITIONS)):
            return False
        # at least once: every record counted; at most once: what was committed is final once quiet
        return counted >= records if guarantee != "at_most_once" else now - last_change > 2 * TIMEOUT

    try:
        while True:
            sup.check()
            now = time.monotonic()
            counted, twice = read()
            if counted != last_counted:
                last_change, last_counted = now, counted
            if stopped is not None and now >= stopped[1]:
                os.kill(stopped[0].proc.pid, signal.SIGCONT)
                stopped = None
            # One SIGSTOP a quarter of the way through the records (or half way through the chaos, on a
            # machine too busy to count that many by then), one link cut half way: while records flow.
            if cuts == 0 and counted >= records / 2:
                relay.cut()
                cuts, healed_at = 1, now + cut
            if healed_at is not None and now >= healed_at:
                relay.heal()
                healed_at = None
            if now < chaos_until and stopped is None:
                # processes up for a while only: three deaths right after starting is a crash loop
                up = [c for c in sup.children if c.proc and c.proc.poll() is None and now - c.started >= QUICK_EXIT]
                if now >= next_kill and up:
                    victim = rng.choice(up)
                    if victim.proc:
                        victim.proc.kill()
                        victim.proc.wait()
                        kills += 1
                    next_kill = now + kill_every
                elif stops == 0 and (counted >= records / 4 or now >= began + seconds / 2) and up:
                    victim = rng.choice(up)
                    if victim.proc:
                        os.kill(victim.proc.pid, signal.SIGSTOP)
                        stopped, stops = (victim, now + 2 * TIMEOUT), 1
            if now >= chaos_until and stopped is None and healed_at is None and done():
                break
            if now > chaos_until + finish_within:
                say(f"gave up {finish_within:.0f} s after the chaos: {counted:,} of {records:,} records counted")
                break
            time.sleep(0.1)
    finally:
        relay.heal()
        sup.stop()
        relay.close()
        log.close()
    totals = sup.final_totals()  # what every incarnation of every process counted
    counted, twice = read()
    return ChaosResult(guarantee=guarantee if state is None else f"state {state}, {guarantee}", records=records,
                       counted=counted, twice=twice, kills=kills, stops=stops,
                       cuts=cuts, seconds=time.monotonic() - began,
                       p99_ms=totals.recorded.quantile(0.99) * 1000 if totals.recorded.count else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the chaos lasts")
    parser.add_argument("--kill-every", type=float, default=3.0, metavar="SECONDS")
    parser.add_argument("--cut", type=float, default=CUT, metavar="SECONDS", help="how long the link cut lasts")
    parser.add_argument("--max-spout-pending", type=int, default=2000, metavar="TREES", help="per spout task")
    parser.add_argument("--max-uncommitted", type=int, metavar="OFFSETS",
                        help="the spout's max.uncommitted.offsets per partition (default: the spout's, 10,000,000): "
                             "how far past its committed offset a restarted spout may have to replay")
    parser.add_argument("--guarantee", choices=["at_least_once", "at_most_once", "exactly_once", "both"],
                        default="both", help="the spout's processing guarantee; with --state, the state's "
                                             "(at_least_once, exactly_once, or both)")
    parser.add_argument("--state", choices=["embedded", "redis", "both"],
                        help="count the records by key in a stateful bolt, its state in the embedded store, in a "
                             "Redis this starts (redis-server from PATH), or both one after the other: a key under "
                             "its true count lost records, one over counted some twice")
    parser.add_argument("--dir", default=".squall/chaos")
    args = parser.parse_args(argv)
    if args.state:
        return _stateful_runs(args)
    if args.guarantee == "exactly_once":
        parser.error("--guarantee exactly_once is a state's guarantee: give --state too")
    guarantees = ["at_least_once", "at_most_once"] if args.guarantee == "both" else [args.guarantee]
    print(f"chaos: {args.records:,} records, 2 workers + 2 ackers, SIGKILL every {args.kill_every:.0f} s for "
          f"{args.minutes:g} min, one SIGSTOP for {2 * TIMEOUT} s, one link cut for {args.cut:g} s, "
          f"maxSpoutPending {args.max_spout_pending:,}, max.uncommitted.offsets "
          f"{'default' if args.max_uncommitted is None else f'{args.max_uncommitted:,}'}", flush=True)
    print("| guarantee | records | lost | counted twice | SIGKILLs | SIGSTOPs | link cuts | records/s | p99 ms |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for guarantee in guarantees:
        r = run(directory=Path(args.dir) / guarantee, records=args.records, seconds=args.minutes * 60,
                guarantee=guarantee, kill_every=args.kill_every, cut=args.cut,
                max_spout_pending=args.max_spout_pending, max_uncommitted=args.max_uncommitted)
        print(f"| {guarantee} | {r.records:,} | {r.lost:,} ({r.lost / r.records:.2%}) | {r.twice:,} "
              f"({r.twice / r.records:.2%}) | {r.kills} | {r.stops} | {r.cuts} | {r.records / r.seconds:,.0f} | "
              f"{'n/a' if r.p99_ms is None else f'{r.p99_ms:,.0f}'} |", flush=True)
    return 0


def _stateful_runs(args: argparse.Namespace) -> int:
    from squall.testing import RedisServer

    if args.guarantee == "at_most_once":
        raise SystemExit("--state counts at_least_once or exactly_once")
    guarantees = ["at_least_once", "exactly_once"] if args.guarantee == "both" else [args.guarantee]
    print(f"chaos, stateful count: {args.records:,} records counted by key, 2 workers + 2 ackers, "
          f"SIGKILL every {args.kill_every:.0f} s for {args.minutes:g} min, one SIGSTOP, one link cut", flush=True)
    print("| state | guarantee | records | counted under the truth | counted over it | SIGKILLs | records/s | p99 ms |")
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for state in ["embedded", "redis"] if args.state == "both" else [args.state]:
        for guarantee in guarantees:
            directory = Path(args.dir) / f"state-{state}-{guarantee}"
            with RedisServer(directory / "redis") if state == "redis" else contextlib.nullcontext() as redis:
                r = run(directory=directory, records=args.records, seconds=args.minutes * 60, guarantee=guarantee,
                        kill_every=args.kill_every, cut=args.cut, max_spout_pending=args.max_spout_pending,
                        state=state, redis_url=redis.url if redis else None)
            print(f"| {state} | {guarantee} | {r.records:,} | {r.lost:,} | {r.twice:,} ({r.twice / r.records:.2%}) | "
                  f"{r.kills} | {r.records / r.seconds:,.0f} | {'n/a' if r.p99_ms is None else f'{r.p99_ms:,.0f}'} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
