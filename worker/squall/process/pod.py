"""One worker or acker process: the entrypoint a Kubernetes pod (or ``squall run``) starts.

Configured by the topology spec file and the environment of the pod contract only
(:mod:`squall.process.contract`, docs/processes.md): which process it is and where its peers listen.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import generate_latest

from squall.errors import ConfigError, SquallError
from squall.executor.runtime import Runtime
from squall.metrics.collector import RuntimeCollector, recorded_latency
from squall.metrics.http import MetricsServer
from squall.metrics.registry import process_registry
from squall.metrics.scrape import latency_path
from squall.process import contract
from squall.process.contract import ACKER, WORKER
from squall.topology.assignment import assign
from squall.topology.plan import Plan
from squall.topology.spec import TopologySpec, load_spec
from squall.transport import Transport
from squall.transport.codec import Decoder
from squall.transport.tls import Credentials

log = logging.getLogger("squall.process")

HEALTHY_WITHIN = 10.0  # seconds since the scheduler loop last ran
# A draining process with nothing pending of its own stays up until it has been idle this long:
# its bolts and acker may still be serving trees of other workers' spouts.
DRAIN_QUIET = 1.0


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
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
    """Addresses of ``count`` peers from a template with ``{i}`` or a comma-separated list."""
    if "{i}" in template:
        try:
            return [template.format(i=i, topology=topology, namespace=namespace) for i in range(count)]
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"{var}: bad template {template!r} ({exc}); use {{i}}, {{topology}}, "
                              "{namespace}") from None
    addresses = [a.strip() for a in template.split(",") if a.strip()]
    if len(addresses) != count:
        raise ConfigError(f"{var} lists {len(addresses)} address(es) but there are {count}; give one per "
                          "process or a template containing {i}")
    return addresses


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

    @classmethod
    def from_env(cls, role: str, env: Mapping[str, str] | None = None) -> ProcessConfig:
        env = os.environ if env is None else env
        path = env.get(contract.TOPOLOGY)
        if not path:
            raise ConfigError(f"{contract.TOPOLOGY} is not set: point it at the topology YAML file")
        spec = load_spec(path)
        index = _ordinal(env, role)
        count = spec.workers if role == WORKER else spec.num_ackers
        if index >= count:
            raise ConfigError(f"{role} index {index} is out of range: the topology has {count} {role}(s)")
        namespace = env.get(contract.NAMESPACE, "default")
        addresses = {
            r: peer_addresses(env.get(contract.peers_var(r)) or contract.peer_template(r), n, topology=spec.name,
                              namespace=namespace, var=contract.peers_var(r))
            for r, n in ((WORKER, spec.workers), (ACKER, spec.num_ackers))}
        final = env.get(contract.FINAL_METRICS_FILE)
        tls = env.get(contract.TLS_DIR)
        return cls(role=role, index=index, spec=spec, spec_path=Path(path), worker_addresses=addresses[WORKER],
                   acker_addresses=addresses[ACKER], bind_host=env.get(contract.BIND_HOST, "0.0.0.0"),
                   grpc_port=_int(env, contract.GRPC_PORT_VAR) or contract.GRPC_PORT,
                   metrics_port=_int(env, contract.METRICS_PORT_VAR) or contract.METRICS_PORT,
                   final_metrics_file=Path(final) if final else None,
                   tls=Credentials.load(tls) if tls else None)

    @property
    def name(self) -> str:
        return contract.process_name(self.role, self.index)


class Process:
    """Builds the runtime, transport and metrics of one process, and runs it until SIGTERM."""

    def __init__(self, cfg: ProcessConfig) -> None:
        self.cfg = cfg
        plan = Plan(cfg.spec)
        wiring = assign(plan.layout).wiring(cfg.role, cfg.index)
        addresses = {contract.process_name(WORKER, i): a for i, a in enumerate(cfg.worker_addresses)}
        addresses |= {contract.process_name(ACKER, j): a for j, a in enumerate(cfg.acker_addresses)}
        decoder = Decoder(plan, bolt_tasks=wiring.bolt_tasks, spout_tasks=wiring.spout_tasks,
                          acker_tasks=frozenset(wiring.acker_tasks))
        t = cfg.spec.transfer
        self.transport = Transport(name=cfg.name, plan=cfg.spec.fingerprint(), owner=wiring.owner,
                                   ackers=wiring.ackers, addresses=addresses, senders=wiring.senders,
                                   decoder=decoder, bind=f"{cfg.bind_host}:{cfg.grpc_port}",
                                   batch_size=t.batch_size, flush_interval=t.flush_interval_ms / 1000,
                                   max_frame=t.max_frame_bytes, queue_frames=8, tls=cfg.tls)
        self.runtime = Runtime(plan, executors=wiring.executors, acker_tasks=wiring.acker_tasks,
                               remote=self.transport)
        registry = self.registry = process_registry()
        registry.register(RuntimeCollector(self.runtime, role=cfg.role, index=cfg.index, transport=self.transport))
        self.metrics = MetricsServer(registry=registry, host=cfg.bind_host, port=cfg.metrics_port,
                                     healthy=self.healthy, ready=self.ready, errors=self.recent_errors,
                                     latency=self.latency)
        self.activated = False
        self.suspended = cfg.spec.suspended
        self._waiting_logged = float("-inf")
        self.draining_since: float | None = None
        self._spec_mtime = self._mtime()

    def latency(self) -> dict:
        """Every complete latency this process's spouts recorded (``GET /latency``)."""
        return {"complete": recorded_latency(self.runtime).to_json()}

    def recent_errors(self) -> list[dict]:
        """The last errors each component reported in this process (``GET /errors``)."""
        return [{"component": e.component, "task": e.task, "time": e.time, "error": e.error}
                for e in self.runtime.errors.recent()]

    def healthy(self) -> bool:
        return self.runtime.clock() - self.runtime.heartbeat < HEALTHY_WITHIN

    def ready(self) -> bool:
        """Processing: streams to and from every peer are up and the spouts are active (or the topology
        is suspended); not while waiting for peers, and not while draining (``GET /readyz``)."""
        return (self.healthy() and self.activated and self.draining_since is None
                and self.transport.all_connected())

    def _pending(self) -> int:
        return self.runtime.pending_trees() + sum(a.acker.pending for a in self.runtime.ackers)

    def _mtime(self) -> float:
        try:
            return self.cfg.spec_path.stat().st_mtime
        except OSError:
            return 0.0

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
            self.runtime.set_active(not self.suspended)

    def _watch_suspended(self) -> None:
        """Every second: follow ``suspended`` in the spec file (a mounted ConfigMap in Kubernetes).

        Suspending must not restart pods, so it is read live; every other change to the spec is
        applied by restarting the processes.
        """
        mtime = self._mtime()
        if mtime == self._spec_mtime:
            return
        self._spec_mtime = mtime
        try:
            suspended = load_spec(self.cfg.spec_path).suspended
        except SquallError as exc:
            log.warning("%s: ignoring an unreadable spec update: %s", self.cfg.name, exc)
            return
        if suspended != self.suspended:
            self.suspended = suspended
            log.info("%s: topology %s", self.cfg.name, "suspended: deactivating spouts" if suspended
                     else "resumed: activating spouts")
            if self.activated and self.draining_since is None:
                self.runtime.set_active(not suspended)

    def _drain(self) -> None:
        if self.draining_since is None:
            log.info("%s: SIGTERM: deactivating spouts and draining %d pending tree(s)", self.cfg.name,
                     self._pending())
            self.draining_since = self.runtime.clock()
            self.runtime.set_active(False)

    def _done(self) -> bool:
        if self.draining_since is None:
            return False
        now = self.runtime.clock()
        if now - self.draining_since >= self.cfg.spec.message_timeout_seconds:
            return True
        # Quiet: nothing of our own pending, nothing queued or held by a bolt (a batch, a Spark job),
        # no input for a while (ticks don't count).
        rt = self.runtime
        return (self._pending() == 0 and rt.queued() == 0 and rt.held() == 0 and self.transport.unsent() == 0
                and now - self.transport.last_input >= DRAIN_QUIET)

    def run(self) -> int:
        rt = self.runtime
        self.metrics.start()
        rt.every(0.05, self._check)
        rt.every(1.0, self._watch_suspended)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: rt.post(self._drain))
        log.info("%s of topology %r: grpc :%d, metrics :%d, tasks %s", self.cfg.name, self.cfg.spec.name,
                 self.cfg.grpc_port, self.metrics.port, sorted(rt.stats) or sorted(a.task_ids[0] for a in rt.ackers))
        try:
            rt.start(active=False)  # opens spouts and prepares bolts: user code that may raise
            tune_gc()
            rt.run(self._done)
        finally:
            left = self._pending()
            rt.close()
            self.transport.close()
            self.metrics.stop()
            if self.cfg.final_metrics_file:  # squall run reads what each process counted up to its exit
                self.cfg.final_metrics_file.write_bytes(generate_latest(self.registry))
                latency_path(self.cfg.final_metrics_file).write_text(json.dumps(self.latency()))
        log.info("%s stopped (%d tree(s) still pending)", self.cfg.name, left)
        return 0


def tune_gc() -> None:
    """Collect less often, and never re-scan what start-up built.

    A worker allocates a tuple, a dict and an edge id per emit; nearly all are freed by reference
    counting, yet each allocation counts towards CPython's collection thresholds, so the default
    (a collection every 700 allocations) scans the heap thousands of times a second. Freezing the
    start-up objects (modules, the plan, user state) keeps them out of every later scan.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)


def main(role: str) -> int:
    return Process(ProcessConfig.from_env(role)).run()
