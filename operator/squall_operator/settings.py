"""The operator's own settings, read once from its environment (see docs/operator.md)."""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from squall.contract import HEALTH_PATH, check_ports
from squall.errors import ConfigError

PodMonitorMode = Literal["auto", "true", "false"]
FailurePolicy = Literal["Fail", "Ignore"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PREFIX = "SQUALL_OPERATOR_"
KNOWN = frozenset(PREFIX + name for name in (
    "NAMESPACES", "IMAGE", "LOG_LEVEL", "PODMONITOR", "PODMONITOR_LABELS", "LIVENESS", "WEBHOOK_HOST", "WEBHOOK_PORT",
    "WEBHOOK_FAILURE_POLICY", "RESYNC_SECONDS", "METRICS_PORT", "TLS", "NETWORK_POLICY", "METRICS_NAMESPACES",
    "POD_NAMESPACE", "LEASE"))
# What Kubernetes sets in a pod for a Service of that name (squall-operator): not settings
SERVICE_VARIABLE = re.compile(rf"{PREFIX}(SERVICE_(HOST|PORT)\w*|PORT(_\d+_(TCP|UDP|SCTP)\w*)?)")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """What the operator watches and the defaults it renders with."""

    namespaces: tuple[str, ...] = ()  # empty: every namespace
    image: str | None = None  # for topologies without spec.image
    log_level: str = "INFO"
    podmonitor: PodMonitorMode = "auto"  # auto: render a PodMonitor when its CRD is installed
    podmonitor_labels: tuple[tuple[str, str], ...] = ()  # added to each PodMonitor's labels
    liveness: str = "http://0.0.0.0:8080/healthz"  # /healthz and /readyz at this address (the Deployment's probes)
    webhook_host: str | None = None  # the validating webhook's host name as the API server reaches it; None: off
    webhook_port: int = 9443
    webhook_failure_policy: FailurePolicy = "Fail"
    resync_seconds: float = 60.0  # every Topology is reconciled this often (drift repair)
    metrics_port: int = 9090  # the operator's /metrics
    tls: bool = True  # mutual TLS between a topology's pods, with a CA of its own in a Secret
    network_policy: bool = True  # a NetworkPolicy per Topology
    metrics_namespaces: tuple[str, ...] = ()  # besides the operator's own: may scrape the topologies' pods
    own_namespace: str | None = None  # where the operator runs (it reads the pods' /errors)
    lease: str | None = None  # the Lease in own_namespace whose holder reconciles (leader.py); None: this one does

    @property
    def metrics_from(self) -> tuple[str, ...] | None:
        """The namespaces a topology's NetworkPolicy lets reach its metrics port (None: no NetworkPolicy)."""
        if not self.network_policy:
            return None
        return tuple(dict.fromkeys((*self.metrics_namespaces, *([self.own_namespace] if self.own_namespace else []))))

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read ``SQUALL_OPERATOR_*``; raise :class:`ConfigError` naming the variable on a bad value."""
        env = os.environ if env is None else env
        for name in sorted(env):
            if name.startswith(PREFIX) and name not in KNOWN and not SERVICE_VARIABLE.fullmatch(name):
                close = difflib.get_close_matches(name, KNOWN, n=1)
                log.warning("%s is not a setting of the operator and is ignored%s", name,
                            f"; did you mean {close[0]}?" if close else f" (settings: {', '.join(sorted(KNOWN))})")
        namespaces = _names(env, "SQUALL_OPERATOR_NAMESPACES")
        level = env.get("SQUALL_OPERATOR_LOG_LEVEL", "INFO").strip().upper()
        if level not in LOG_LEVELS:
            raise ConfigError(f"SQUALL_OPERATOR_LOG_LEVEL={level!r}: use one of {', '.join(LOG_LEVELS)}")
        podmonitor = env.get("SQUALL_OPERATOR_PODMONITOR", "auto").strip().lower()
        if podmonitor not in ("auto", "true", "false"):
            raise ConfigError(f"SQUALL_OPERATOR_PODMONITOR={podmonitor!r}: use auto, true or false")
        monitor_labels = []
        for item in env.get("SQUALL_OPERATOR_PODMONITOR_LABELS", "").split(","):
            key, eq, value = item.strip().partition("=")
            if not item.strip():
                continue
            if not eq or not key.strip():
                raise ConfigError(f"SQUALL_OPERATOR_PODMONITOR_LABELS: {item.strip()!r} is not key=value; write "
                                  "e.g. release=kube-prometheus-stack,team=data")
            monitor_labels.append((key.strip(), value.strip()))
        policy = env.get("SQUALL_OPERATOR_WEBHOOK_FAILURE_POLICY", "Fail").strip().capitalize()
        if policy not in ("Fail", "Ignore"):
            raise ConfigError(f"SQUALL_OPERATOR_WEBHOOK_FAILURE_POLICY={policy!r}: use Fail or Ignore")
        settings = cls(tls=_flag(env, "SQUALL_OPERATOR_TLS"),
                       network_policy=_flag(env, "SQUALL_OPERATOR_NETWORK_POLICY"),
                       metrics_namespaces=_names(env, "SQUALL_OPERATOR_METRICS_NAMESPACES"),
                       own_namespace=env.get("SQUALL_OPERATOR_POD_NAMESPACE", "").strip() or None,
                       namespaces=namespaces, image=env.get("SQUALL_OPERATOR_IMAGE", "").strip() or None,
                       log_level=level, podmonitor=podmonitor,  # type: ignore[arg-type]  # checked above
                       podmonitor_labels=tuple(monitor_labels),
                       liveness=env.get("SQUALL_OPERATOR_LIVENESS", "").strip() or cls.liveness,
                       webhook_host=env.get("SQUALL_OPERATOR_WEBHOOK_HOST", "").strip() or None,
                       webhook_port=_number(env, "SQUALL_OPERATOR_WEBHOOK_PORT", cls.webhook_port, integer=True),
                       webhook_failure_policy=policy,  # type: ignore[arg-type]  # checked above
                       resync_seconds=_number(env, "SQUALL_OPERATOR_RESYNC_SECONDS", cls.resync_seconds),
                       metrics_port=_number(env, "SQUALL_OPERATOR_METRICS_PORT", cls.metrics_port, integer=True),
                       lease=env.get("SQUALL_OPERATOR_LEASE", "").strip() or None)
        if settings.lease is not None and settings.own_namespace is None:
            raise ConfigError(f"SQUALL_OPERATOR_LEASE={settings.lease!r} needs SQUALL_OPERATOR_POD_NAMESPACE, the "
                              "namespace of the Lease (the chart sets both)")
        settings._check_ports()
        return settings

    def _check_ports(self) -> None:
        """Each of the operator's servers on a port of its own: two on one port both bind, and each takes
        some of the connections."""
        try:
            liveness = urlsplit(self.liveness).port or 80
        except ValueError:
            raise ConfigError(f"SQUALL_OPERATOR_LIVENESS={self.liveness!r}: its port is not one (1 to 65535)") from None
        if urlsplit(self.liveness).path not in ("", HEALTH_PATH):
            raise ConfigError(f"SQUALL_OPERATOR_LIVENESS={self.liveness!r}: the path is {HEALTH_PATH} (and /readyz "
                              "the readiness probe's)")
        check_ports({"SQUALL_OPERATOR_WEBHOOK_PORT": self.webhook_port,
                     "SQUALL_OPERATOR_METRICS_PORT": self.metrics_port, "SQUALL_OPERATOR_LIVENESS": liveness})

    @property
    def log_level_number(self) -> int:
        return logging.getLevelNamesMapping()[self.log_level]


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool = False) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = 0
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name}={raw!r}: use a positive {'integer' if integer else 'number'}")
    return value


def _names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of names."""
    return tuple(n.strip() for n in env.get(name, "").split(",") if n.strip())


def _flag(env: Mapping[str, str], name: str, default: bool = True) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in ("true", "false"):
        raise ConfigError(f"{name}={raw!r}: use true or false")
    return raw == "true"
