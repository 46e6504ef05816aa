"""One worker or acker process: the entrypoint a Kubernetes pod (or ``squall run``) starts.

Configured by the topology spec file and the environment of the pod contract only
(:mod:`squall.contract`, docs/processes.md): which process it is and where its peers listen.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client import generate_latest

from squall import contract
from squall.contract import ACKER, LEAVE_SECONDS, WORKER, process_count
from squall.errors import CommandError, ConfigError, SquallError
from squall.executor.runtime import Runtime
from squall.metrics.collector import RuntimeCollector, recorded_latency
from squall.metrics.http import MetricsServer
from squall.metrics.registry import process_registry
from squall.metrics.scrape import latency_path
from squall.process.control import COMMAND_WAIT
from squall.process.log_levels import LogLevels
from squall.process.thread_names import name_native_threads
from squall.proto.squall_pb2 import ControlRequest, ProcessState
from squall.topology.assignment import assign
from squall.topology.plan import Plan
from squall.topology.spec import TopologySpec, file_stamp, load_spec
from squall.transport import Transport
from squall.transport.codec import Decoder
from squall.transport.tls import Credentials

log = logging.getLogger("squall.process")

HEALTHY_WITHIN = 10.0  # seconds since the scheduler loop last ran
# A draining process with nothing pending of its own stays up until it has been idle this long, and at
# least this long after its SIGTERM: its bolts and acker may still be serving trees of other workers'
# spouts, and the SIGTERMs of a topology's processes land one by one (what a peer's spouts emit until
# theirs lands must find it up, or it is stranded in a link to a process that left).
DRAIN_QUIET = 1.0
# A rebalance drains for at most the message timeout, then switches or activates the spouts again. Held
# this much longer than twice that, its rebalancer is gone (an operator down mid-drain, for as long as it
# stays down): the spouts go again, and a rebalancer that comes back deactivates them anew.
HOLD_MARGIN = 60.0
# The loggers set_log_level overrides: the OS process's, as logging is, so that a rebalance's switch (a new
# Process in the same OS process) keeps setting them back on time.
LOG_LEVELS = LogLevels()
# What a process is doing (Process.state): opening its spouts and preparing its bolts; draining to exit;
# its spouts held by a rebalance; a link or stream to a peer not up; processing, or suspended.
STATES = ("starting", "draining", "rebalancing", "waiting_for_peers", "suspended", "active")
READY_STATES = frozenset({"suspended", "active"})


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < 0:
        raise ConfigError(f"{name}={value} must be >= 0")
    return value


def _ordinal(env: Mapping[str, str], role: str) -> int:
    """The index from SQUALL_<ROLE>_INDEX, or from a StatefulSet hostname such as wordcount-worker-3."""
    var = contract.index_var(role)
    index = _int(env, var)
    if index is not None:
        return index
    match = re.search(r"-(\d+)$", env.get("HOSTNAME", ""))
    if not match:
        raise ConfigError(f"set {var}, or run with a StatefulSet hostname ending in "
                          f"-<ordinal> (HOSTNAME={env.get('HOSTNAME', '')!r})")
    return int(match.group(1))


def peer_addresses(template: str, count: int, *, topology: str, namespace: str, var: str) -> list[str]:
    """Addresses of ``count`` peers from a template with ``{i}`` or a comma-separated list (which may name
    more: the processes a rescale may add)."""
    if "{i}" in template:
        try:
            return [template.format(i=i, topology=topology, namespace=namespace) for i in range(count)]
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"{var}: bad template {template!r} ({exc}); use {{i}}, {{topology}}, "
                              "{namespace}") from None
    addresses = [a.strip() for a in template.split(",") if a.strip()]
    if len(addresses) < count:
        raise ConfigError(f"{var} lists {len(addresses)} address(es) but there are {count}; give one per "
                          "process or a template containing {i}")
    return addresses[:count]


@dataclass(frozen=True)
class ProcessConfig:
    """Everything a process reads from its environment, read once: :class:`Process` reads nothing else."""

    role: str
    index: int
    spec: TopologySpec
    spec_path: Path
    worker_addresses: list[str]
    acker_addresses: list[str]
    bind_host: str
    grpc_port: int
    metrics_port: int
    final_metrics_file: Path | None = None
    tls: Credentials | None = None  # None: plaintext gRPC (squall run --insecure)
    namespace: str = "default"
    peers: tuple[tuple[str, str], ...] = ()  # (role, address template or list), for a switch to another spec
    parent_pid: int | None = None  # squall run's: gone, this process stops (it would run on, unsupervised)

    @classmethod
    def from_env(cls, role: str, env: Mapping[str, str] | None = None) -> ProcessConfig:
        env = os.environ if env is None else env
        path = env.get(contract.TOPOLOGY)
        if not path:
            raise ConfigError(f"{contract.TOPOLOGY} is not set: point it at the topology YAML file")
        final = env.get(contract.FINAL_METRICS_FILE)
        tls = env.get(contract.TLS_DIR)
        cfg = cls(role=role, index=_ordinal(env, role), spec=load_spec(path), spec_path=Path(path),
                  worker_addresses=[], acker_addresses=[], bind_host=env.get(contract.BIND_HOST, "0.0.0.0"),
                  grpc_port=_int(env, contract.GRPC_PORT_VAR, contract.GRPC_PORT),
                  metrics_port=_int(env, contract.METRICS_PORT_VAR, contract.METRICS_PORT),
                  final_metrics_file=Path(final) if final else None,
                  tls=Credentials.load(tls) if tls else None, namespace=env.get(contract.NAMESPACE, "default"),
                  peers=tuple((r, env.get(contract.peers_var(r)) or contract.peer_template(r)) for r in contract.ROLES),
                  parent_pid=_int(env, contract.PARENT_PID))
        contract.check_ports({contract.GRPC_PORT_VAR: cfg.grpc_port, contract.METRICS_PORT_VAR: cfg.metrics_port})
        running = cfg.running(cfg.spec)
        if running is None:
            raise ConfigError(f"{role} index {cfg.index} is out of range: the topology has "
                              f"{process_count(cfg.spec, role)} {role}(s)")
        return running

    def running(self, spec: TopologySpec) -> ProcessConfig | None:
        """This process's configuration for ``spec``, or None if ``spec`` has no place for it (fewer
        processes of its role): what a switch to another spec (a rebalance) starts from."""
        if self.index >= process_count(spec, self.role):
            return None
        peers = dict(self.peers)
        addresses = {r: peer_addresses(peers[r], process_count(spec, r), topology=spec.name, namespace=self.namespace,
                                       var=contract.peers_var(r)) for r in contract.ROLES}
        return replace(self, spec=spec, worker_addresses=addresses[WORKER], acker_addresses=addresses[ACKER])

    @property
    def name(self) -> str:
        return contract.process_name(self.role, self.index)


class Process:
    """Builds the runtime, transport and metrics of one process, and runs it until SIGTERM, or until a
    rebalance switches it to another spec (:attr:`switch_to`: :func:`main` then builds the next one)."""

    def __init__(self, cfg: ProcessConfig, *, switched: bool = False) -> None:
        """``switched``: built by a rebalance's switch, not at the pod's start."""
        self.cfg = cfg
        self.switched = switched
        self.fingerprint = cfg.spec.fingerprint()
        plan = Plan(cfg.spec)
        wiring = assign(plan.layout).wiring(cfg.role, cfg.index)
        addresses = {contract.process_name(WORKER, i): a for i, a in enumerate(cfg.worker_addresses)}
        addresses |= {contract.process_name(ACKER, j): a for j, a in enumerate(cfg.acker_addresses)}
        decoder = Decoder(plan, bolt_tasks=wiring.bolt_tasks, spout_tasks=wiring.spout_tasks,
                          acker_tasks=frozenset(wiring.acker_tasks), forwards=wiring.forwards)
        t = cfg.spec.transfer
        self.transport = Transport(name=cfg.name, fingerprint=self.fingerprint, owner=wiring.owner,
                                   ackers=wiring.ackers, acker_via=wiring.acker_via, forwards=wiring.forwards,
                                   addresses=addresses,
                                   senders=wiring.senders,
                                   decoder=decoder, bind=f"{cfg.bind_host}:{cfg.grpc_port}",
                                   batch_size=t.batch_size, flush_interval=t.flush_interval_ms / 1000,
                                   max_frame=t.max_frame_bytes, tls=cfg.tls, control=self.control)
        self.runtime = Runtime(plan, executors=wiring.executors, acker_tasks=wiring.acker_tasks,
                               remote=self.transport)
        registry = self.registry = process_registry()
        registry.register(RuntimeCollector(self.runtime, role=cfg.role, index=cfg.index, transport=self.transport,
                                           state=self.state, states=STATES))
        self.metrics = MetricsServer(registry=registry, host=cfg.bind_host, port=cfg.metrics_port,
                                     healthy=self.healthy, ready=self.ready, errors=self.recent_errors,
                                     latency=self.latency)
        self.started = False  # spouts opened and bolts prepared
        self.built_at = self.runtime.clock()
        self.activated = False
        self.suspended = cfg.spec.suspended
        self.generation = self._generation()  # of what ``suspended`` was last taken from (see _suspend)
        self.held = False  # spouts deactivated by a rebalance, until it activates or switches us
        self.held_since = 0.0  # when a rebalance's DEACTIVATE held them
        self.member = True  # False: a rebalance's new spec has no place for this process
        self.switch_to: ProcessConfig | None = None  # set by a rebalance: run this next
        self.terminated = False  # SIGTERM: drain and exit, whatever a rebalance says
        self._waiting_logged = float("-inf")
        self.draining_since: float | None = None
        self.leaving_since: float | None = None  # the drain's time ran out: the door is shut
        self._spec_stamp = file_stamp(self.cfg.spec_path)

    def latency(self) -> dict:
        """Every complete latency this process's spouts recorded (``GET /latency``)."""
        return {"complete": recorded_latency(self.runtime).to_json()}

    def recent_errors(self) -> list[dict]:
        """The last errors each component reported in this process (``GET /errors``)."""
        return [{"component": e.component, "task": e.task, "time": e.time, "error": e.error}
                for e in self.runtime.errors.recent()]

    def healthy(self) -> bool:
        """The scheduler loop ran lately (``GET /healthz``). Before the spouts are opened and the bolts
        prepared: not at the pod's start, where the startupProbe waits for it; after a switch nothing else
        waits for the new plan's ``prepare()``, so it counts as alive for as long as a start may take
        (``startupTimeoutSeconds``): the liveness probe killed a pod whose prepare took 30 s."""
        now = self.runtime.clock()
        if not self.started:
            return self.switched and now - self.built_at < self.cfg.spec.startup_timeout_seconds
        return now - self.runtime.heartbeat < HEALTHY_WITHIN

    def ready(self) -> bool:
        """Processing: streams to and from every peer are up and the spouts are active (or the topology
        is suspended); not while waiting for peers, not during a rebalance, and not while draining
        (``GET /readyz``)."""
        return self.healthy() and self.state() in READY_STATES

    def state(self) -> str:
        """What this process is doing, one of :data:`STATES` (``squall_process_state``)."""
        if not self.started:
            return "starting"
        if self.terminated or self.draining_since is not None:
            return "draining"
        if self.held:
            return "rebalancing"
        if not self.activated or not self.transport.all_connected():
            return "waiting_for_peers"
        return "suspended" if self.suspended else "active"

    def _pending(self) -> int:
        """Trees this process still waits for (for the log): its spouts' and those its ackers can decide."""
        return self.runtime.pending_trees() + sum(a.acker.trees.awaiting() for a in self.runtime.ackers)

    def _generation(self) -> int:
        """The Topology generation the spec file was rendered from (0: not known, as with squall run)."""
        try:
            return int(self.cfg.spec_path.with_name(contract.GENERATION_FILE).read_text())
        except (OSError, ValueError):
            return 0

    def _spouts_on(self) -> bool:
        return not (self.suspended or self.held)

    def _check(self) -> None:
        """On the loop, every 50 ms: activate spouts once every peer is reachable."""
        if not self.activated and self.draining_since is None and not self.transport.all_connected():
            now = self.runtime.clock()
            if now - self._waiting_logged >= 10.0:  # say who we wait for, so a stuck pod explains itself
                self._waiting_logged = now
                log.info("%s: waiting for peers before activating: %s", self.cfg.name,
                         ", ".join(self.transport.missing()))
            return
        if not self.activated and self.draining_since is None:
            self.activated = True
            log.info("%s: all peers connected%s", self.cfg.name, "; activating spouts" if self.runtime.spouts else "")
            if self.suspended:
                log.info("%s: the topology is suspended; spouts stay inactive", self.cfg.name)
            self.runtime.set_active(self._spouts_on())

    def _release_hold(self) -> None:
        """Every second: spouts held by a rebalance that never came back activate again (see HOLD_MARGIN)."""
        held_for = self.runtime.clock() - self.held_since
        if self.held and self.member and held_for >= 2 * self.cfg.spec.message_timeout_seconds + HOLD_MARGIN:
            log.warning("%s: spouts held by a rebalance for %.0f s, and neither switched nor activated since: "
                        "activating them again (was its operator or squall run stopped mid-drain?)",
                        self.cfg.name, held_for)
            self.held = False
            self._set_spouts()

    def _set_spouts(self) -> None:
        if self.activated and self.draining_since is None:
            self.runtime.set_active(self._spouts_on())

    def _suspend(self, suspended: bool, generation: int, *, why: str) -> None:
        """Follow ``suspended``, whichever says it first: the operator's command, or the spec file that
        the kubelet updates up to a minute later (which then changes nothing). Not from an older
        generation of the Topology than the last one followed: suspended and resumed within the
        kubelet's sync period, the file could say suspended after the RESUME came. Generation 0 is
        not known, and always followed."""
        if generation:
            if generation < self.generation:
                log.info("%s: %s says suspended: %s as of generation %d; generation %d is followed",
                         self.cfg.name, why, str(suspended).lower(), generation, self.generation)
                return
            self.generation = generation
        if suspended != self.suspended:
            self.suspended = suspended
            log.info("%s: topology %s (%s)", self.cfg.name, "suspended: deactivating spouts" if suspended
                     else "resumed: activating spouts", why)
            self._set_spouts()

    def _watch_spec(self) -> None:
        """Every second: follow the spec file (a mounted ConfigMap, which Kubernetes updates in place).

        ``suspended`` is followed live. Any other change is a rebalance's, which the operator carries
        out with :mod:`squall.process.control`; but a process that cannot reach every peer of its plan
        when the file changes to another plan switches to it: a pod restarted during a rebalance, before
        its mount caught up with it, joins the others as soon as it has. Only a change counts: right
        after a rebalance switched this process, the file may still hold the plan it left.
        """
        stamp = file_stamp(self.cfg.spec_path)
        if stamp == self._spec_stamp:
            return
        generation = self._generation()
        try:
            spec = load_spec(self.cfg.spec_path)
        except SquallError as exc:
            self._spec_stamp = stamp
            log.warning("%s: ignoring an unreadable spec update: %s", self.cfg.name, exc)
            return
        if self._generation() != generation:  # read across the kubelet's swap of the files: next second
            return
        self._spec_stamp = stamp
        self._suspend(spec.suspended, generation, why="the spec file")
        stuck = self.started and not self.transport.all_connected() and self.draining_since is None
        if stuck and spec.fingerprint() != self.fingerprint and self.member:
            try:
                self._switch(spec, why="its peers run the spec file's new plan")
            except CommandError as exc:
                log.warning("%s: cannot switch to the spec file's plan: %s", self.cfg.name, exc)

    # -- the operator's commands: a rebalance's, a suspend's (squall.process.control) ----------------

    def control(self, request: ControlRequest) -> ProcessState:
        """Carry out a command on the scheduler loop (called on a gRPC server thread)."""
        spec = None
        if request.command in (ControlRequest.SWITCH, ControlRequest.CHECK):
            try:
                spec = TopologySpec.from_dict(json.loads(request.spec), source="the spec to switch to")
            except (ValueError, SquallError) as exc:
                raise CommandError(str(exc)) from None
        done = threading.Event()
        state: list[ProcessState] = []
        errors: list[CommandError] = []
        # A command its caller gave up on must not run later: the caller retries it, or decides otherwise
        # (a rebalance that gave up left the processes on their plan), and a late one would undo that.
        decided = threading.Lock()
        abandoned = False

        def command() -> None:
            with decided:
                if abandoned:
                    return
                try:
                    state.append(self._command(request, spec))
                except CommandError as exc:
                    errors.append(exc)
                finally:
                    done.set()

        self.runtime.post(command)
        if not done.wait(COMMAND_WAIT):
            with decided:  # one that began meanwhile is carried out: its answer is given
                abandoned = not done.is_set()
            if abandoned:
                raise CommandError(f"{self.cfg.name}: its scheduler loop did not take the command within "
                                   f"{COMMAND_WAIT:g} s (starting, stopping, or busy in a bolt); it is not "
                                   "carried out: ask again", refused=False)
        if errors:
            raise errors[0]
        return state[0]

    def _command(self, request: ControlRequest, spec: TopologySpec | None) -> ProcessState:
        command = request.command
        if command == ControlRequest.DEACTIVATE and not self.held:
            log.info("%s: rebalance: deactivating spouts (%d tree(s) pending here)", self.cfg.name,
                     self.runtime.pending_trees())
            self.held, self.held_since = True, self.runtime.clock()
            self.runtime.set_active(False)
        elif command == ControlRequest.ACTIVATE and self.held and self.member:
            log.info("%s: rebalance: activating spouts again", self.cfg.name)
            self.held = False
            self._set_spouts()
        elif command in (ControlRequest.SUSPEND, ControlRequest.RESUME):
            self._suspend(command == ControlRequest.SUSPEND, request.generation, why="the operator's command")
        elif command == ControlRequest.SWITCH:
            assert spec is not None
            self._switch(spec, why="rebalance")
        elif command == ControlRequest.CHECK:
            assert spec is not None
            self._runnable(spec)
        elif command == ControlRequest.SET_LOG_LEVEL:
            try:
                LOG_LEVELS.set(request.logger, request.level, request.seconds, now=self.runtime.clock())
            except ValueError as exc:
                raise CommandError(f"{self.cfg.name}: {exc}") from None
            log.info("%s: logger %s at %s for %.0f s (set_log_level)", self.cfg.name, request.logger or "ROOT",
                     request.level, request.seconds)
        return self._state()

    def _expire_log_levels(self) -> None:
        """Every second: loggers whose set_log_level time is up go back to their own level."""
        for name in LOG_LEVELS.expire(self.runtime.clock()):
            log.info("%s: logger %s back to its own level (set_log_level's time is up)", self.cfg.name, name or "ROOT")

    def _runnable(self, spec: TopologySpec) -> None:
        """Refuse a spec this process could not run: another topology's, or one whose classes it cannot
        import (a className the image lacks, which validation, importing nothing, lets through)."""
        if spec.name != self.cfg.spec.name:
            raise CommandError(f"the spec to switch to is topology {spec.name!r}; this process runs "
                               f"{self.cfg.spec.name!r}")
        try:
            Plan(spec)
        except SquallError as exc:
            raise CommandError(f"{self.cfg.name} cannot run the spec to switch to: {exc}") from None

    def _switch(self, spec: TopologySpec, *, why: str) -> None:
        """Leave the loop to run ``spec`` next (:func:`main` builds it); a spec with no place for this
        process holds its spouts until it is removed; the same plan only lets the spouts go again."""
        if self.terminated:  # a switch would leave its drain, dropping what it drains
            raise CommandError(f"{self.cfg.name} is draining to exit (SIGTERM): it takes no other plan", refused=False)
        if spec.fingerprint() == self.fingerprint:  # back to its own plan: in it again, if a switch left it out
            self.held, self.member = False, True
            self._set_spouts()
            return
        self._runnable(spec)  # before leaving this plan
        try:
            cfg = self.cfg.running(spec)
        except SquallError as exc:
            raise CommandError(f"{self.cfg.name} cannot run the spec to switch to: {exc}") from None
        self.held, self.held_since = True, self.runtime.clock()
        self.runtime.set_active(False)
        if cfg is None:
            log.info("%s: %s: the new spec has no %s %d; spouts stay inactive until this process is removed",
                     self.cfg.name, why, self.cfg.role, self.cfg.index)
            self.member = False
            return
        log.info("%s: %s: switching from plan %s to plan %s (%d tree(s) pending here are dropped, with the "
                 "spouts' state: a spout that replays from a durable source emits them again)", self.cfg.name,
                 why, self.fingerprint, spec.fingerprint(), self.runtime.pending_trees())
        self.switch_to = cfg
        self.runtime.request_stop()

    def _state(self) -> ProcessState:
        rt = self.runtime
        return ProcessState(fingerprint=self.fingerprint, active=rt.active(), held=self.held,
                            connected=self.transport.all_connected(), pending=rt.pending_trees(),
                            in_flight=rt.queued() + rt.held() + self.transport.unsent() + self.transport.undelivered(),
                            member=self.member, suspended=self.suspended)

    # -- stopping ----------------------------------------------------------------------------

    def _watch_parent(self) -> None:
        """Every second, under ``squall run``: a run killed without its stop (SIGKILL, a crash) leaves its
        processes to init; they drain and exit as on SIGTERM instead of running on unsupervised."""
        if os.getppid() != self.cfg.parent_pid:
            log.warning("%s: its squall run (pid %d) is gone: stopping", self.cfg.name, self.cfg.parent_pid)
            self.terminate()

    def terminate(self) -> None:
        """SIGTERM (any thread): drain and exit, even if a rebalance is switching this process.

        Only a flag, which the loop reads at every round (:meth:`_done`): the signal handler runs on the
        scheduler's own thread, between any two of its bytecodes, maybe while it holds a lock of its own
        (the posted work's, an Event's). Posting the drain from there took that lock again: a deadlock
        that left the process deaf to SIGTERM until its SIGKILL (seen once in a test run).
        """
        self.terminated = True

    def _drain(self) -> None:
        log.info("%s: SIGTERM: deactivating spouts and draining %d pending tree(s)", self.cfg.name, self._pending())
        self.draining_since = self.runtime.clock()
        self.runtime.set_active(False)
        self.transport.stop_holding()

    def _done(self) -> bool:
        if self.draining_since is None:
            if not self.terminated:
                return False
            self._drain()
        now = self.runtime.clock()
        rt, transport = self.runtime, self.transport
        if now - self.draining_since >= self.cfg.spec.message_timeout_seconds:
            # Time is up (most often input never stopped: a lone worker restarted). Shut the door (frames
            # sent from now on fail their trees at their senders) and finish what was taken in: exiting
            # with it, its trees would wait out their timeout at their spouts.
            if self.leaving_since is None:
                log.info("%s: drained for the message timeout: taking no more in, finishing what it holds",
                         self.cfg.name)
                self.leaving_since = now
                transport.stop_receiving()
            return self._empty_handed() or now - self.leaving_since >= LEAVE_SECONDS
        # Quiet: nothing of our own pending, nothing in hand, no input for a while, counted from the
        # SIGTERM at the earliest (ticks don't count). An acker waits for the trees it can still decide:
        # a message for a tree decided before (a FAIL a peer sent for a frame that was read after all,
        # when the stream broke as the receiver exited) leaves an entry that never could be.
        quiet = now - max(transport.last_input, self.draining_since) >= DRAIN_QUIET
        if not (quiet and rt.pending_trees() == 0 and self._empty_handed()
                and all(a.acker.trees.awaiting() == 0 for a in rt.ackers)):
            return False
        # Shut the door, then look again: a frame taken in after the check above would be counted as
        # read by its sender and vanish with this process, its trees left to time out. Frames sent from
        # now on fail at their senders; any that came in meanwhile are delivered first.
        transport.stop_receiving()
        return transport.undelivered() == 0

    def _empty_handed(self) -> bool:
        """Nothing queued or held by a bolt (a batch, a Spark job), nothing received and not yet delivered,
        nothing unsent, no FAILs of dropped frames still to send."""
        rt, transport = self.runtime, self.transport
        return (rt.queued() == 0 and rt.held() == 0 and transport.unsent() == 0
                and transport.undelivered() == 0 and not transport.lost)

    def run(self) -> int:
        rt = self.runtime
        self.metrics.start()
        rt.every(0.05, self._check)
        rt.every(1.0, self._watch_spec)
        rt.every(1.0, self._release_hold)
        rt.every(1.0, self._expire_log_levels)
        if self.cfg.parent_pid is not None:
            rt.every(1.0, self._watch_parent)
        log.info("%s of topology %r: grpc :%d, metrics :%d, plan %s, tasks %s", self.cfg.name, self.cfg.spec.name,
                 self.cfg.grpc_port, self.metrics.port, self.fingerprint,
                 sorted(rt.stats) or sorted(a.task_ids[0] for a in rt.ackers))
        try:
            rt.start(active=False)  # opens spouts and prepares bolts: user code that may raise
            self.started = True
            tune_interpreter(self.cfg.spec.transfer.gil_switch_interval_ms)
            rt.run(self._done)
        finally:
            left = self._pending()
            rt.close()
            self.transport.close()
            self.metrics.stop()
            if self.cfg.final_metrics_file:  # squall run reads what each process counted up to its exit
                self.cfg.final_metrics_file.write_bytes(generate_latest(self.registry))
                latency_path(self.cfg.final_metrics_file).write_text(json.dumps(self.latency()))
        log.info("%s stopped (%d tree(s) still pending)%s", self.cfg.name, left,
                 "; starting its new plan" if self.switch_to and not self.terminated else "")
        return 0


def tune_interpreter(switch_interval_ms: float) -> None:
    """Collect less often, never re-scan what start-up built, and hand the GIL over sooner.

    A worker allocates a tuple, a dict and an edge id per emit; nearly all are freed by reference
    counting, yet each allocation counts towards CPython's collection thresholds, so the default
    (a collection every 700 allocations) scans the heap thousands of times a second. Freezing the
    start-up objects (modules, the plan, user state) keeps them out of every later scan.

    Every frame between processes passes through threads (a link's, gRPC's, a stream reader's) that
    must each take the GIL from a scheduler that rarely blocks; each waits up to the switch interval
    (CPython's default 5 ms) for it. Under load those waits make a hop, and with max spout pending the
    trees in flight wait on them (bench/HISTORY.md, "The GIL's switch interval, again").
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)
    sys.setswitchinterval(switch_interval_ms / 1000)


def main(role: str) -> int:
    """Run the process ``role`` of the pod contract, through every switch a rebalance asks for."""
    name_native_threads()
    cfg: ProcessConfig | None = ProcessConfig.from_env(role)
    current: list[Process] = []
    terminated: list[bool] = []  # a SIGTERM came: the process a switch builds next drains at once

    def on_signal(signum: int, _: object) -> None:
        if not current:
            raise SystemExit(0)  # asked to stop before anything started: nothing to drain, a clean stop
        terminated.append(True)
        current[-1].terminate()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    while cfg is not None:
        process = Process(cfg, switched=bool(current))
        current[:] = [process]
        if terminated:  # while it was built, the signal reached the process before it
            process.terminate()
        process.run()
        cfg = None if process.terminated else process.switch_to
    return 0
