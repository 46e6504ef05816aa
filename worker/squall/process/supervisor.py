"""``squall run``'s local cluster: W worker and A acker processes on 127.0.0.1, started with the
same entrypoints and environment contract as pods, restarted when they die, as Kubernetes would."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml

from squall import contract
from squall.errors import CommandError, SquallError
from squall.metrics.scrape import Totals, fetch, latency_path, parse, parse_latency
from squall.process.control import ControlClient, ProcessState, drained
from squall.topology import load_spec
from squall.topology.spec import TopologySpec
from squall.transport.tls import issue

log = logging.getLogger("squall.supervisor")

#: ``{process name: /metrics URL}`` in the run directory, for ``squall top``.
PROCESSES_FILE = "processes.json"
LOCK_FILE = "lock"  # held by the run using the directory, naming its pid
QUICK_EXIT = 5.0  # seconds: an exit sooner than this after start counts towards a crash loop
CRASH_LOOP = 3
# How long a rebalance sends a command again that a process did not answer: one that could not reach its
# peers switches to the spec file's plan by itself (squall.process.pod), and a command that reaches it
# as it leaves its loop goes unanswered; its next plan listens on the same port within a second or two.
# A process too busy to take a command within its 5 s answers that it did not carry it out.
COMMAND_RETRY = 15.0


LOCAL_PORTS = 20000  # the lowest port a run's processes are given, below the kernel's ephemeral range


def free_ports(n: int) -> list[int]:
    """``n`` ports free right now (drawn as by :func:`reserve_ports`), and released again."""
    socks = reserve_ports(n)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def reserve_ports(n: int) -> list[socket.socket]:
    """``n`` distinct ports, each held by a socket bound to it and never listening: while held, no
    program can bind the port, except one of ours, since only sockets that set ``SO_REUSEPORT`` (gRPC's
    server does, and so does the metrics server) may share it.

    A run holds its processes' ports for as long as it lasts: a process binds its ports only when it
    starts (a room slot's, seconds or minutes later at a rebalance; a killed one's, again on restart),
    and in between another program could take them: under ``pytest -n 4`` a parallel test's process
    did, and a rebalance's new worker failed three times on "Address already in use".

    Drawn below the kernel's ephemeral range where it leaves room, a range the kernel never hands out
    by itself, so not even a connection's local end takes them.
    """
    low = _ephemeral_low()
    held: list[socket.socket] = []
    candidates = random.sample(range(LOCAL_PORTS, low), min(low - LOCAL_PORTS, 50 * n + 100)) \
        if low - LOCAL_PORTS >= 1000 else []
    try:
        for port in candidates:
            if len(held) == n:
                break
            s = _hold(port)
            if s is not None:
                held.append(s)
        while len(held) < n:  # no room below the range (or all of it taken): any port the kernel gives
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            probe.close()
            if (s := _hold(port)) is not None:
                held.append(s)
    except BaseException:
        for s in held:
            s.close()
        raise
    return held


def _hold(port: int) -> socket.socket | None:
    """A socket holding ``port`` with ``SO_REUSEPORT``, or None when some socket has it already.

    The probe binds without the option first: bound with it, a socket would share the port with any
    other that has it (another run's held ports, any gRPC server) rather than find it taken.
    """
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", port))
    except OSError:
        return None
    finally:
        probe.close()
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        held.bind(("127.0.0.1", port))
    except OSError:  # taken in the moment between the probe and the hold
        held.close()
        return None
    return held


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


@dataclass(frozen=True)
class Rebalanced:
    """How a :meth:`Supervisor.rebalance` drained: whether every tree finished in time, how long it took,
    and how many trees were still pending when it switched."""

    drained: bool
    seconds: float
    pending: int  # trees pending when the spouts were deactivated
    left: int  # trees still pending when it switched (0 when drained)
    abandoned: bool = False  # stopped while draining: nothing switched, the spouts stay deactivated


@dataclass
class Child:
    role: str
    index: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    proc: subprocess.Popen | None = None
    restarts: int = 0
    started: float = 0.0
    quick_exits: int = 0  # consecutive exits within QUICK_EXIT of starting
    carried: Totals = field(default_factory=Totals)  # counters of earlier incarnations
    last: Totals = field(default_factory=Totals)

    @property
    def name(self) -> str:
        return contract.process_name(self.role, self.index)

    def carry(self) -> None:
        """Keep what this process counted: it counts from 0 again (restarted, or switched to another plan).
        Its trees pending then are not: they are decided, or dropped, by then."""
        self.last.pending.clear()
        self.carried.add(self.last)
        self.last = Totals()

    def url(self, path: str) -> str:
        """``path`` (``/metrics``, ``/errors``...) on this process's metrics port."""
        return f"http://127.0.0.1:{self.metrics_port}{path}"


class Supervisor:
    """Starts and watches the processes of one topology on this machine."""

    def __init__(self, *, spec_path: str | Path, spec: TopologySpec, run_dir: str | Path,
                 env: dict[str, str] | None = None, insecure: bool = False, room: int = 0,
                 pin: bool = False) -> None:
        """``insecure``: plaintext gRPC on loopback; else the processes use mutual TLS with a CA issued
        for this run (as the operator does for pods), so no other local program can join or feed them.
        ``room``: how many processes of each role a :meth:`rebalance` may grow to (their ports are
        reserved now; at least the spec's own counts). ``pin``: each process, every thread of it, on
        one CPU of those this process may use: worker i and acker i on the i-th, round robin."""
        self.spec_path = Path(spec_path).resolve()
        self.spec = spec
        self.run_dir = Path(run_dir)
        # its logs may hold what the topology read; one the user gave, made before, is left as it is
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = lock_run_dir(self.run_dir)
        counts = {role: max(room, contract.process_count(spec, role)) for role in contract.ROLES}
        roles = [(role, i) for role in contract.ROLES for i in range(counts[role])]
        self._held = reserve_ports(2 * len(roles))  # until stop: see reserve_ports
        ports = [s.getsockname()[1] for s in self._held]
        self.slots = [Child(role, i, ports[2 * k], ports[2 * k + 1], self.run_dir / f"{role}-{i}.log")
                      for k, (role, i) in enumerate(roles)]
        self.children = self._members(spec)
        env = env or {}
        pythonpath = os.pathsep.join(p for p in [os.getcwd(), env.get("PYTHONPATH", ""),
                                                 os.environ.get("PYTHONPATH", "")] if p)
        self.env = {
            **os.environ, **env,
            "PYTHONPATH": pythonpath,
            contract.TOPOLOGY: str(self.spec_path),
            contract.BIND_HOST: "127.0.0.1",
            contract.PARENT_PID: str(os.getpid()),
            # stateful bolts keep their state under the run directory, where every process of the run finds a
            # task's store wherever the task runs (a rebalance moves tasks), and the next run resumes it
            contract.STATE_DIR: os.environ.get(contract.STATE_DIR) or str((self.run_dir / "state").resolve()),
            **{contract.peers_var(role): ",".join(f"127.0.0.1:{c.grpc_port}" for c in self.slots if c.role == role)
               for role in contract.ROLES},
        }
        self.tls = None if insecure else issue(spec.name)
        if self.tls is not None:
            self.env[contract.TLS_DIR] = str(self.tls.write(self.run_dir / "tls"))
        self.stopping = False
        self._cpus = sorted(os.sched_getaffinity(0)) if pin else []

    def _members(self, spec: TopologySpec) -> list[Child]:
        counts = {role: contract.process_count(spec, role) for role in contract.ROLES}
        wanted = [c for c in self.slots if c.index < counts[c.role]]
        if len(wanted) < sum(counts.values()):
            raise SquallError(f"this run has room for {len(self.slots) // 2} process(es) of each role (the ports "
                              f"it held from its start), not {spec.workers} worker(s) and {spec.num_ackers} acker(s): "
                              "stop it, and run the file again")
        return wanted

    def _spawn(self, child: Child) -> None:
        env = {**self.env, **contract.role_env(child.role), contract.index_var(child.role): str(child.index),
               contract.FINAL_METRICS_FILE: str(self._final_path(child)),
               contract.GRPC_PORT_VAR: str(child.grpc_port), contract.METRICS_PORT_VAR: str(child.metrics_port)}
        with open(child.log_path, "ab") as out:
            child.started = time.monotonic()
            # A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches this
            # run alone, which stops its processes in order, not each of them at once mid-start.
            child.proc = subprocess.Popen([sys.executable, "-m", "squall", child.role], env=env, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0)
        if self._cpus:
            # Popen returns once the child has exec'd Python, long before it starts a thread: every thread
            # it starts inherits the mask. Its threads hand the GIL to one another on one CPU then, not
            # across CPUs (a wake-up across vCPUs is an interrupt between them, dear on a VM).
            with contextlib.suppress(ProcessLookupError):  # it died at once: check() reports it
                os.sched_setaffinity(child.proc.pid, {self._cpus[child.index % len(self._cpus)]})

    def start(self) -> None:
        for slot in self.slots:  # this run's logs only (appended to across restarts, not across runs)
            slot.log_path.unlink(missing_ok=True)
        self._list_processes()
        for child in self.children:
            self._launch(child)

    def _list_processes(self) -> None:
        """Where `squall top` finds the processes' metrics."""
        (self.run_dir / PROCESSES_FILE).write_text(json.dumps(
            {c.name: c.url(contract.METRICS_PATH) for c in self.children}, indent=1) + "\n")

    def _launch(self, child: Child) -> None:
        self._final_path(child).unlink(missing_ok=True)
        latency_path(self._final_path(child)).unlink(missing_ok=True)
        self._spawn(child)

    def control(self, child: Child) -> ControlClient:
        """A client for ``child``'s rebalance commands (over its gRPC port, with this run's certificate)."""
        return ControlClient(f"127.0.0.1:{child.grpc_port}", tls=self.tls)

    def rebalance(self, spec: TopologySpec, *, timeout: float | None = None,
                  stopping: Callable[[], bool] = lambda: False) -> Rebalanced:
        """Move the running processes to ``spec`` as the operator moves pods (Storm's ``rebalance -w``):
        deactivate every spout, wait until no tree is in flight (at most ``timeout``, by default the
        message timeout), write ``spec`` to the spec file, start the processes it adds, stop those it
        removes, and switch the others to it; they activate once connected under the new plan.

        Once ``stopping()`` (the run is told to stop while it drains) it returns at once, abandoned: the
        run's stop drains the processes as they are."""
        timeout = self.spec.message_timeout_seconds if timeout is None else timeout
        members = self._members(spec)
        began = time.monotonic()
        clients = {c.name: self.control(c) for c in self.children}
        switching = False
        try:
            pending = sum(_answered(client.deactivate).pending for client in clients.values())
            while not (done := drained(states := [_answered(c.status) for c in clients.values()])) and \
                    time.monotonic() - began < timeout and not stopping():
                time.sleep(0.05)  # polling other processes' state: there is no event to wait on
            left = sum(s.pending for s in states)
            drain_seconds = time.monotonic() - began
            if not done and stopping():
                return Rebalanced(drained=False, seconds=drain_seconds, pending=pending, left=left, abandoned=True)
            switching = True
            if _fingerprint_in(self.spec_path) != spec.fingerprint():  # not the user's own edit, kept as written
                self.spec_path.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
            self.spec = spec
            kept, self.children = self.children, members
            self.scrape()  # what each counted up to its switch: it counts from 0 under the new plan
            for child in kept:
                if child not in self.children:  # removed: it drains (nothing is pending) and exits
                    child.proc.send_signal(signal.SIGTERM)
            for child in self.children:
                if child in kept:
                    _answered(clients[child.name].switch, spec)
                else:
                    self._launch(child)
            self._list_processes()
        except SquallError:
            if not switching:  # the run goes on with its plan: the spouts held for the drain go again
                for client in clients.values():
                    with contextlib.suppress(CommandError):
                        _answered(client.activate)
            raise
        finally:
            for client in clients.values():
                client.close()
        return Rebalanced(drained=done, seconds=drain_seconds, pending=pending, left=left)

    def _started(self) -> list[Child]:
        """Every process started so far, including those a rebalance removed (they may still drain)."""
        return [c for c in self.slots if c.proc is not None]

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def check(self) -> list[str]:
        """Restart every process that exited; returns a line for each.

        A process that keeps dying right after it starts (a bad spec, a spout that cannot open)
        is not restarted forever: :class:`SquallError` says so, with the end of its log.
        """
        events = []
        for child in self.children:
            code = child.proc.poll() if child.proc else None
            if code is not None and not self.stopping:
                quick = time.monotonic() - child.started < QUICK_EXIT
                child.quick_exits = child.quick_exits + 1 if quick else 0
                if child.quick_exits >= CRASH_LOOP:
                    tail = "\n".join(child.log_path.read_text(errors="replace").splitlines()[-15:])
                    raise SquallError(f"{child.name} exited {child.quick_exits} times right after starting "
                                      f"(last: {_exit(code)}), so it is not restarted again; the end of "
                                      f"{child.log_path}:\n{tail}")
                child.carry()
                child.restarts += 1
                events.append(f"{child.name} exited with {_exit(code)}; restarting it (restart {child.restarts}); "
                              f"log: {child.log_path}")
                self._spawn(child)
        return events

    def scrape(self) -> Totals:
        """Totals over every process, including what processes that were restarted had counted."""
        total = Totals()
        for child in self._started():
            try:
                last = parse(fetch(child.url(contract.METRICS_PATH)))
                last.recorded = parse_latency(fetch(child.url(contract.LATENCY_PATH)))
                if child.last.fingerprint not in (None, last.fingerprint):  # switched: its counters start again
                    child.carry()
                child.last = last
            except OSError:
                pass  # starting or restarting: keep its last scrape
            total.add(child.carried)
            total.add(child.last)
        return total

    def recent_errors(self, component: str) -> list[tuple[str, str]]:
        """``(process, error)`` for the errors ``component`` reported lately, from each process's ``/errors``."""
        found = []
        for child in self.children:
            try:
                errors = json.loads(fetch(child.url(contract.ERRORS_PATH)))
            except (OSError, ValueError):  # starting, restarting or gone: its log has them
                continue
            found += [(child.name, e["error"]) for e in errors if e["component"] == component]
        return found

    def _final_path(self, child: Child) -> Path:
        return self.run_dir / f"{child.name}.metrics"

    def final_totals(self) -> Totals:
        """After :meth:`stop`: totals from the metrics each process wrote as it exited."""
        total = Totals()
        for child in self._started():
            path = self._final_path(child)
            total.add(child.carried)
            if path.exists():
                final = parse(path.read_text())
                if latency_path(path).exists():
                    final.recorded = parse_latency(latency_path(path).read_text())
                total.add(final)
            else:
                total.add(child.last)
        return total

    def ready(self) -> bool:
        """True when every process answers /healthz."""
        for child in self.children:
            try:
                fetch(child.url(contract.HEALTH_PATH), timeout=0.5)
            except OSError:
                return False
        return True

    def stop(self, timeout: float | None = None, hurry: Callable[[], bool] = lambda: False) -> dict[str, int | None]:
        """SIGTERM every process (they drain), wait, SIGKILL those still running after ``timeout`` or once
        ``hurry()`` (a second Ctrl-C). Returns exit codes."""
        self.stopping = True
        timeout = self.spec.message_timeout_seconds + 10 if timeout is None else timeout
        started = self._started()
        for child in started:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(c.proc.poll() is None for c in started) and time.monotonic() < deadline and not hurry():
            time.sleep(0.1)  # children exit in their own time; no event to wait on for several
        codes: dict[str, int | None] = {}
        for child in started:
            if child.proc.poll() is None:
                child.proc.kill()
            code = child.proc.wait()
            # Ended by the SIGTERM itself: it came before the process set its handler, so nothing had started.
            # Or by the Ctrl-C that stops the run: sent to the terminal's process group while the child was
            # being spawned, before it moved to a group of its own, it stayed pending, blocked, until the
            # child had reset its handlers to the default, which ends it.
            codes[child.name] = 0 if code in (-signal.SIGTERM, -signal.SIGINT) else code
        for s in self._held:
            s.close()
        self._lock.close()
        return codes


def lock_run_dir(run_dir: Path) -> IO[str]:
    """Hold ``run_dir`` for this run (until :meth:`Supervisor.stop`, or this process's end, whatever ends
    it): two runs in one directory would share logs, certificates, the processes file and state."""
    lock = open(run_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held open for the run
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise SquallError(f"{run_dir} is in use by another squall run (pid {holder}): stop that run, or give "
                          "this one another --run-dir") from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def _fingerprint_in(path: Path) -> str | None:
    """The fingerprint of the spec file at ``path``, or None when it does not load."""
    try:
        return load_spec(path).fingerprint()
    except SquallError:
        return None


def _answered(command: Callable[..., ProcessState], *args: object) -> ProcessState:
    """Send a rebalance command, again while its process does not answer (see :data:`COMMAND_RETRY`; the
    operator does the same at its next reconcile); a refusal is raised at once. Every command is
    idempotent: a process that already runs a SWITCH's plan only lets its spouts go again."""
    deadline = time.monotonic() + COMMAND_RETRY
    while True:
        try:
            return command(*args)
        except CommandError as exc:
            if exc.refused or time.monotonic() >= deadline:
                raise
        time.sleep(0.1)  # the process restarts its server, or is busy: there is nothing to wait on


def _exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
