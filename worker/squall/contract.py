"""The pod contract: what a worker or acker process expects of whoever starts it.

One home for the roles and their process counts, the ports and their names, the HTTP paths of the
metrics port, the spec mount, the environment variable names, the process names and the peer address
templates, used by the operator's render, ``squall run``'s supervisor and the process entrypoint
alike (docs/processes.md describes them for people). A leaf: it imports nothing of Squall's but its
errors, so that the topology, metrics and Spark modules may use it as well as the processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from squall.errors import ConfigError

if TYPE_CHECKING:
    from squall.topology.spec import TopologySpec

WORKER, ACKER = "worker", "acker"
ROLES = (WORKER, ACKER)

# A drain that reaches the message timeout (its peers emit on: a lone worker restarted) stops taking
# frames in, then has this long to finish what it took in before the process exits anyway.
LEAVE_SECONDS = 5.0
GRPC_PORT = 7070  # the transport between processes
METRICS_PORT = 9090  # the HTTP paths below
# The pods' container port names: the probes, the PodMonitor and the operator find the ports by them.
GRPC_PORT_NAME = "grpc"
METRICS_PORT_NAME = "metrics"

# On the metrics port (squall.metrics.http serves them)
METRICS_PATH = "/metrics"  # Prometheus' text format
HEALTH_PATH = "/healthz"  # liveness: 200 while the process's loop runs
READY_PATH = "/readyz"  # readiness: 200 while connected to every peer, spouts active
ERRORS_PATH = "/errors"  # the components' recent errors, JSON; ?last=N: the newest N
LATENCY_PATH = "/latency"  # every complete latency the spouts recorded, an HDR histogram as JSON

SPEC_DIR = "/etc/squall"  # where pods mount the topology spec (a ConfigMap, as a directory)
SPEC_FILE = "topology.yaml"
SPEC_PATH = f"{SPEC_DIR}/{SPEC_FILE}"
# Beside the spec file: the Topology's metadata.generation it was rendered from. The kubelet swaps a
# mounted ConfigMap's files together, so a process reading both knows how new the spec it reads is.
GENERATION_FILE = "generation"
TLS_MOUNT = "/etc/squall-tls"  # where pods mount the topology's TLS Secret (squall.transport.tls)
STATE_MOUNT = "/var/lib/squall/state"  # where worker pods mount their topology's state claim (STATE_DIR)

# The environment of a process. The spec file is the only carrier of the topology's own values.
TOPOLOGY = "SQUALL_TOPOLOGY"  # path of the spec file (required)
NAMESPACE = "SQUALL_NAMESPACE"
WORKER_PEERS = "SQUALL_WORKER_PEERS"  # a template with {i}, or a comma-separated list
ACKER_PEERS = "SQUALL_ACKER_PEERS"
GRPC_PORT_VAR = "SQUALL_GRPC_PORT"
METRICS_PORT_VAR = "SQUALL_METRICS_PORT"
BIND_HOST = "SQUALL_BIND_HOST"
TLS_DIR = "SQUALL_TLS_DIR"  # the topology's ca.crt, tls.crt and tls.key; unset: plaintext gRPC
FINAL_METRICS_FILE = "SQUALL_FINAL_METRICS_FILE"  # squall run: where a process writes its last counts
LOG_LEVEL = "SQUALL_LOG_LEVEL"  # without --log-level: DEBUG, INFO (the default), WARNING or ERROR
PARENT_PID = "SQUALL_PARENT_PID"  # squall run: its pid; a process whose parent it no longer is stops
POD_NAME = "SQUALL_POD_NAME"  # a Spark driver's own pod, for its executors' owner
SPARK_CONF = "SQUALL_SPARK_CONF"  # JSON of spark.* properties for a worker that is a Spark driver
STATE_DIR = "SQUALL_STATE_DIR"  # the embedded state store's directory (squall run's, a worker pod's volume)
STATE_REDIS_URL = "SQUALL_STATE_REDIS_URL"  # the Redis state store's URL (a pod's, from a Secret)


# What every Squall process runs with, the ``squall`` command too: see role_env.
EVERY_PROCESS = {"GRPC_ENABLE_FORK_SUPPORT": "false"}


def role_env(role: str) -> dict[str, str]:
    """What a process of ``role`` always runs with, besides the ``SQUALL_*`` variables.

    gRPC's fork support off: with it, a fork while gRPC's threads were busy (user code starting a
    subprocess with a ``preexec_fn``, as PySpark starts its JVM) ran gRPC's fork handlers and crashed
    the child, often within a few forks (``tests/procs/test_subprocesses.py``); no process forks to use
    gRPC in the child. gRPC reads the variable when it is first imported, so it must be in the
    process's environment from the start. An acker runs no user code, and numpy only stores its
    table: OpenBLAS, loaded with numpy, would start a thread per core the process sees, a node's cores
    in a container. (Workers do not import numpy themselves, and leave it to user code that does.)"""
    return EVERY_PROCESS | {"OPENBLAS_NUM_THREADS": "1"} if role == ACKER else dict(EVERY_PROCESS)


def process_count(spec: TopologySpec, role: str) -> int:
    """How many processes of ``role`` ``spec`` runs: its workers, or its ackers (by default one per worker)."""
    return spec.workers if role == WORKER else spec.num_ackers


def index_var(role: str) -> str:
    """The variable that gives a process its index (else: its StatefulSet hostname's ordinal)."""
    return f"SQUALL_{role.upper()}_INDEX"


def peers_var(role: str) -> str:
    return WORKER_PEERS if role == WORKER else ACKER_PEERS


def process_name(role: str, index: int) -> str:
    """``worker-0``, ``acker-1``: how processes name each other (stream metadata, metrics, logs)."""
    return f"{role}-{index}"


def service_name(topology: str, role: str) -> str:
    """The StatefulSet of a role and its headless Service (``<service>-<i>`` is pod i)."""
    return f"{topology}-{role}"


def peer_template(role: str, *, namespace: str | None = None) -> str:
    """Where the processes of ``role`` listen, with ``{topology}`` and ``{i}`` left to fill in: the DNS
    names a headless Service gives StatefulSet pods (namespace-qualified when ``namespace`` is given)."""
    service = service_name("{topology}", role)
    domain = f".{namespace}.svc" if namespace else ""
    return f"{service}-{{i}}.{service}{domain}:{GRPC_PORT}"


def check_ports(ports: Mapping[str, int]) -> None:
    """Raise :class:`ConfigError` unless each port (named by the setting that gave it) is one, and no two
    are the same: two servers on one port both bind it, and each takes some of the connections."""
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if not 1 <= port <= 65535:
            raise ConfigError(f"{name}={port} is not a port: use 1 to 65535")
        if port in seen:
            raise ConfigError(f"{seen[port]} and {name} are both {port}: give them different ports")
        seen[port] = name
