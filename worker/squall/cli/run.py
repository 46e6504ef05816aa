"""``squall run TOPOLOGY.yaml``: run a topology on this machine, with live progress and a summary.

By default it starts the topology's worker and acker processes on 127.0.0.1 (the entrypoints
pods run); ``--in-process`` runs everything in this process instead (``LocalCluster``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from squall import contract
from squall.cli.options import positive
from squall.errors import SquallError
from squall.metrics.scrape import Totals
from squall.process.supervisor import Supervisor, lock_run_dir
from squall.testing import LocalCluster
from squall.topology import load_spec, validate
from squall.topology.assignment import check_state_kept
from squall.topology.spec import TopologySpec, file_stamp


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a topology locally until --duration, --trees or Ctrl-C")
    p.add_argument("topology", help="path to the topology YAML")
    p.add_argument("--duration", type=positive(float), metavar="SECONDS", help="stop after this many seconds")
    p.add_argument("--trees", type=positive(int), metavar="N", help="stop after N spout tuple trees were acked")
    p.add_argument("--in-process", action="store_true",
                   help="run every executor in this process (LocalCluster) instead of worker/acker processes")
    p.add_argument("--run-dir", default=".squall/run", help="where process logs go (default .squall/run)")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext gRPC between the processes (default: mutual TLS with a CA made for this run)")
    p.add_argument("--pin", action="store_true",
                   help="pin each process, all its threads, to one CPU (worker i and acker i on the i-th, round "
                        "robin): pays when the processes outnumber the CPUs (docs/operations.md)")
    p.set_defaults(func=run)


SUSPENDED = "suspended: the spouts stay inactive until the file says suspended: false"
ROOM = 2  # a run may grow to twice its workers (or ackers) by an edit of its file: their ports are held
QUIET_HINT = 10.0  # s without an emit or a tree in flight before a run waiting for --trees says why


class Progress:
    """Prints a progress line per second and the summary table at the end."""

    def __init__(self, spec: TopologySpec) -> None:
        self.spec = spec
        self.spouts = [s.name for s in spec.spouts]
        self.tty = sys.stderr.isatty()
        self.start = self.last_t = time.monotonic()
        self.last_acked = 0.0
        self.stopped: float | None = None  # when stopping began: draining is not counted in the rate
        self.told: set[str] = set()  # components whose first error was printed
        self.emitted = 0.0  # by the spouts, at the last line
        self.quiet_since: float | None = None  # since when no spout emitted and no tree was in flight
        self.quiet_said = False  # the hint was printed for this quiet spell
        self.suspended = spec.suspended  # as the file said last

    def follow(self, spec: TopologySpec) -> None:
        """Count and list the components of ``spec`` from now on (a rebalance's)."""
        self.spec = spec
        self.spouts = [s.name for s in spec.spouts]

    def say(self, text: str) -> None:
        """A line between progress lines (on a terminal, below the one being redrawn)."""
        print(f"\n{text}" if self.tty else text, file=sys.stderr, flush=True)

    def acked(self, t: Totals) -> float:
        return sum(t.acked[s] for s in self.spouts)

    def line(self, t: Totals) -> None:
        now = time.monotonic()
        acked = self.acked(t)
        rate = (acked - self.last_acked) / max(now - self.last_t, 1e-9)
        self.last_acked, self.last_t = acked, now
        text = (f"acked {acked:>11,.0f}  {rate:>9,.0f}/s  failed {sum(t.failed[s] for s in self.spouts):>7,.0f}  "
                f"timed out {sum(t.timed_out[s] for s in self.spouts):>7,.0f}  "
                f"pending {sum(t.pending[s] for s in self.spouts):>6,.0f}  "
                f"p99 {t.recorded.quantile(0.99) * 1000:>6.1f} ms")
        print(f"\r{text}" if self.tty else text, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def summary(self, t: Totals) -> str:
        elapsed = (self.stopped or time.monotonic()) - self.start
        rows = [("component", "emitted", "executed", "acked", "failed", "timed out", "errors")]
        for comp in self.spec.components():
            n = comp.name
            rows.append((n, *(f"{v:,.0f}" for v in (t.emitted[n], t.executed[n], t.acked[n], t.failed[n],
                                                     t.timed_out[n], t.errors[n]))))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        table = "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                                   strict=True)))
                          for r in rows)
        acked = self.acked(t)
        pending = sum(t.pending[s] for s in self.spouts)
        left = (f"\n{pending:,.0f} tree(s) were still in flight when the run stopped: their spouts saw neither "
                "ack nor fail") if pending else ""
        left += "".join(f"\nbolt {b.name!r} executed {t.executed[b.name]:,.0f} tuples and acked or failed none: "
                        "unless it holds them on purpose (a batch), call self.collector.ack(tup) in execute, or "
                        "derive it from BasicBolt, which acks when execute returns; their trees time out"
                        for b in self.spec.bolts
                        if t.executed[b.name] and not t.acked[b.name] and not t.failed[b.name])
        return (f"{'' if not self.tty else chr(10)}{table}\n\n{acked:,.0f} trees acked in {elapsed:.1f} s "
                f"({acked / elapsed:,.0f}/s); complete latency p50 {t.recorded.quantile(0.5) * 1000:.1f} ms, "
                f"p99 {t.recorded.quantile(0.99) * 1000:.1f} ms, p99.9 {t.recorded.quantile(0.999) * 1000:.1f} ms "
                f"(every sample, within 0.8 %){left}")

    def first_errors(self, t: Totals, recent: Callable[[str], list[tuple[str, str]]], where: str) -> None:
        """Print the first error of each component that reported one since the last call: the terminal
        says what broke at once, the processes' logs (``where``) have the traceback and the rest. (An
        in-process run logs to the terminal itself.)"""
        for comp in self.spec.components():
            if t.errors[comp.name] and comp.name not in self.told:
                errors = recent(comp.name)
                if errors:
                    self.told.add(comp.name)
                    process, error = errors[0]
                    self.say(f"{comp.name} reported an error ({process}): {error}; more in {where}")

    def waiting_for_trees(self, t: Totals, args: argparse.Namespace) -> None:
        """Say once per quiet spell why a run waiting for ``--trees`` may never end: its spouts stopped emitting."""
        emitted = sum(t.emitted[s] for s in self.spouts)
        quiet = args.trees is not None and emitted == self.emitted and not sum(t.pending[s] for s in self.spouts)
        self.emitted, now = emitted, time.monotonic()
        if not quiet or self.suspended:  # suspended, its spouts emit nothing by design (said at the start)
            self.quiet_since, self.quiet_said = None, False
            return
        self.quiet_since = self.quiet_since or now
        if now - self.quiet_since >= QUIET_HINT and not self.quiet_said:
            self.quiet_said = True
            broken = [s for s in self.spouts if t.errors[s]]
            why = (f"spout {', '.join(map(repr, broken))} reported errors (above; a spout whose open() raised "
                   "emits nothing until a later call of it returns): fix it and run again" if broken else
                   "the spouts' input may be exhausted")
            self.say(f"no spout has emitted for {QUIET_HINT:.0f} s and no tree is in flight, with "
                     f"{self.acked(t):,.0f} of --trees {args.trees:,} acked: {why}; Ctrl-C stops the run")

    def should_stop(self, t: Totals, args: argparse.Namespace) -> bool:
        if args.trees is not None and self.acked(t) >= args.trees:
            return True
        return args.duration is not None and time.monotonic() - self.start >= args.duration


class SpecFile:
    """The topology file of a process-mode run, as its user edits it: a change of plan is a rebalance.

    ``suspended`` alone the processes follow themselves (they re-read the file every second); any
    other change :meth:`follow` applies as the operator applies a changed Topology, with the
    supervisor's drain-and-switch (Storm's ``rebalance -w``). A file that does not load, a plan
    this run has no room for, or one that changes a stateful bolt's tasks (its state is kept per task),
    is reported and the run goes on with the plan it has."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.stamp = file_stamp(self.path)

    def follow(self, sup: Supervisor, progress: Progress, stopping: Callable[[], bool]) -> None:
        stamp = file_stamp(self.path)
        if stamp == self.stamp:
            return
        self.stamp = stamp
        try:
            spec = load_spec(self.path)
            validate(spec)
            check_state_kept(sup.spec, spec)
        except SquallError as exc:
            progress.say(f"{self.path} changed but is not applied (the run goes on with its plan): {exc}")
            return
        if spec.fingerprint() == sup.spec.fingerprint():  # the same plan: `suspended`, or what only pods have, changed
            if spec.suspended != progress.suspended:
                progress.suspended = spec.suspended
                progress.say(SUSPENDED if spec.suspended else "resumed: the spouts activate")
            return
        progress.say(f"{self.path} changed: rebalancing to {spec.workers} worker(s) and {spec.num_ackers} "
                     f"acker(s); spouts deactivate while the trees in flight drain (at most "
                     f"{sup.spec.message_timeout_seconds} s)...")
        try:
            done = sup.rebalance(spec, stopping=stopping)
        except SquallError as exc:
            progress.say(f"not rebalanced, the run goes on with its plan: {exc}")
            return
        if done.abandoned:
            progress.say(f"rebalance abandoned after {done.seconds:.1f} s: the run stops")
            return
        progress.follow(spec)
        progress.say(f"rebalanced in {done.seconds:.1f} s" + ("" if done.drained else
                     f"; {done.left} tree(s) still in flight were dropped (a spout that replays from a "
                     "durable source emits them again)"))


class StopSignals:
    """Ctrl-C, SIGTERM or SIGHUP (the terminal closed): the first stops the run gracefully, another one
    while it drains stops its processes at once. With ``interrupt`` (a run in this process, whose user
    code may be stuck in a call that never returns to the loop that reads the count), the second raises
    :class:`KeyboardInterrupt` wherever this process is, once: raised again while the first unwinds, one
    escaped the code that catches it, and the run ended with SIGINT's status and a traceback."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.count = 0
        self.interrupt = False
        for sig in self.SIGNALS:
            signal.signal(sig, self._handler)

    def _handler(self, *_: object) -> None:
        self.count += 1
        if self.count > 1 and self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt

    def __call__(self) -> bool:
        return self.count > 0

    def again(self) -> bool:
        return self.count > 1

    def ignore(self) -> None:
        """The run is over: later signals have nothing to stop. Ignored rather than handled: as Python
        finalizes it gives every signal with a handler of its own its default action back, and a Ctrl-C
        landing then killed the process with SIGINT's status instead of the run's."""
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.topology)
    validate(spec)
    stop_requested = StopSignals()
    progress = Progress(spec)
    try:
        if args.in_process:
            return _in_process(spec, args, progress, stop_requested)
        return _processes(spec, args, progress, stop_requested)
    finally:
        stop_requested.ignore()


def _in_process(spec: TopologySpec, args: argparse.Namespace, progress: Progress,
                stop_requested: StopSignals) -> int:
    print(f"running {spec.name!r} in this process; Ctrl-C to stop, twice to stop at once", file=sys.stderr)
    stop_requested.interrupt = True
    if spec.suspended:
        progress.say("suspended: the spouts stay inactive (a run in this process does not follow its file: run it "
                     "with suspended: false)")
    if spec.checkpointing and not os.environ.get(contract.STATE_DIR):
        # its stateful bolts keep their state where the processes of a run would: under the run directory,
        # which the run holds, as theirs (another run in it would share the task files)
        run_dir = Path(args.run_dir)
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        held = lock_run_dir(run_dir)  # noqa: F841 - held until this process ends
        os.environ[contract.STATE_DIR] = str((run_dir / "state").resolve())
    with LocalCluster(spec) as cluster:
        def totals() -> Totals:
            return _totals(cluster)

        def until(_: LocalCluster) -> bool:
            if time.monotonic() - progress.last_t >= 1.0:
                t = totals()
                progress.waiting_for_trees(t, args)
                progress.line(t)
                if progress.should_stop(t, args):
                    return True
            elif args.trees is not None and cluster.trees_acked() >= args.trees:
                return True
            return stop_requested() or progress.should_stop(Totals(), args)

        try:
            cluster.run(until=until)
            progress.stopped = time.monotonic()
            _drain(cluster, progress)
            stop_requested.interrupt = False  # the loop is back: Ctrl-Cs while the summary prints only count
        except KeyboardInterrupt:
            print(progress.summary(totals()))
            print("stopped at once (Ctrl-C again): trees in flight were neither acked nor failed", file=sys.stderr)
            return 130
        print(progress.summary(totals()))
    return 0


def _drain(cluster: LocalCluster, progress: Progress) -> None:
    """Stop as the processes do: the spouts deactivate and the trees in flight end (acked, failed or timed
    out, their spouts told) for at most the message timeout; another Ctrl-C stops at once."""
    timeout = cluster.spec.message_timeout_seconds
    if cluster.pending():
        progress.say(f"stopping: spouts deactivate, in-flight trees drain (for at most the message timeout, "
                     f"{timeout} s; Ctrl-C again stops at once)...")
    cluster.deactivate()
    cluster.run(until=lambda c: c.pending() == 0, seconds=timeout)


def _totals(cluster: LocalCluster) -> Totals:
    """The cluster's counts as the totals a process-mode run scrapes."""
    t = Totals()
    for comp in cluster.spec.components():
        c = cluster.counts(comp.name)
        for name in ("acked", "failed", "timed_out", "emitted", "executed", "errors", "pending"):
            getattr(t, name)[comp.name] = getattr(c, name)
    for spout in cluster.spec.spouts:
        t.latency.merge(cluster.complete_latency(spout.name))
        t.recorded.merge(cluster.recorded_latency(spout.name))
    return t


def _processes(spec: TopologySpec, args: argparse.Namespace, progress: Progress,
               stop_requested: StopSignals) -> int:
    sup = Supervisor(spec_path=args.topology, spec=spec, run_dir=Path(args.run_dir), insecure=args.insecure,
                     room=ROOM * max(spec.workers, spec.num_ackers), pin=args.pin,
                     env={contract.LOG_LEVEL: args.log_level})
    security = "plaintext gRPC" if args.insecure else "mutual TLS"
    print(f"running {spec.name!r}: {spec.workers} worker(s) and {spec.num_ackers} acker(s) on 127.0.0.1 "
          f"({security}); "
          f"logs in {sup.run_dir}/; Ctrl-C to stop", file=sys.stderr)
    spec_file = SpecFile(args.topology)  # before anything is said: an edit from then on is followed
    sup.start()
    if spec.suspended:
        progress.say(SUSPENDED)
    totals = Totals()
    given_up: SquallError | None = None  # a process that keeps dying at start: the run stops
    try:
        while not stop_requested():
            time.sleep(1.0)  # the CLI's refresh period; the processes do the work
            if stop_requested():
                break
            try:
                for event in sup.check():
                    progress.say(event)
            except SquallError as exc:
                given_up = exc
                break
            spec_file.follow(sup, progress, stop_requested)
            totals = sup.scrape()
            progress.first_errors(totals, sup.recent_errors, f"{sup.run_dir}/")
            progress.waiting_for_trees(totals, args)
            progress.line(totals)
            if progress.should_stop(totals, args):
                break
    finally:
        progress.stopped = time.monotonic()
        progress.say(f"stopping: spouts deactivate, in-flight trees drain (for at most the message timeout, "
                     f"{sup.spec.message_timeout_seconds} s, then {contract.LEAVE_SECONDS:g} s to finish what is in "
                     "hand; Ctrl-C again stops at once)...")
        codes = sup.stop(hurry=stop_requested.again)
        totals = sup.final_totals()
    bad = {name: code for name, code in codes.items() if code != 0}
    print(progress.summary(totals))
    if given_up is not None:
        raise given_up
    if stop_requested.again():
        print(f"stopped at once (Ctrl-C again): {', '.join(sorted(bad)) or 'no process'} killed before "
              "draining; their trees in flight were neither acked nor failed", file=sys.stderr)
        return 130
    restarted = {child.name: child.restarts for child in sup.children if child.restarts}
    if bad:
        print(f"processes that did not exit cleanly: {bad}; see their logs in {sup.run_dir}/", file=sys.stderr)
    if restarted:  # a crash the run recovered from is still a crash: a script that runs it must see it
        print("processes that exited during the run and were restarted: "
              f"{', '.join(f'{name} ({n} time(s))' for name, n in restarted.items())}; see their logs in "
              f"{sup.run_dir}/", file=sys.stderr)
    return 1 if bad or restarted else 0
