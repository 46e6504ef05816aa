"""The operator's own settings, read once from its environment (see docs/operator.md)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from squall.errors import ConfigError

PodMonitorMode = Literal["auto", "true", "false"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class Settings:
    """What the operator watches and the defaults it renders with."""

    namespaces: tuple[str, ...] = ()  # empty: every namespace
    image: str | None = None  # for topologies without spec.image
    log_level: str = "INFO"
    podmonitor: PodMonitorMode = "auto"  # auto: render a PodMonitor when its CRD is installed
    liveness: str = "http://0.0.0.0:8080/healthz"  # kopf's liveness endpoint (the Deployment probes it)

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read ``SQUALL_OPERATOR_*``; raise :class:`ConfigError` naming the variable on a bad value."""
        env = os.environ if env is None else env
        namespaces = tuple(ns.strip() for ns in env.get("SQUALL_OPERATOR_NAMESPACES", "").split(",") if ns.strip())
        level = env.get("SQUALL_OPERATOR_LOG_LEVEL", "INFO").strip().upper()
        if level not in LOG_LEVELS:
            raise ConfigError(f"SQUALL_OPERATOR_LOG_LEVEL={level!r}: use one of {', '.join(LOG_LEVELS)}")
        podmonitor = env.get("SQUALL_OPERATOR_PODMONITOR", "auto").strip().lower()
        if podmonitor not in ("auto", "true", "false"):
            raise ConfigError(f"SQUALL_OPERATOR_PODMONITOR={podmonitor!r}: use auto, true or false")
        return cls(namespaces=namespaces, image=env.get("SQUALL_OPERATOR_IMAGE", "").strip() or None,
                   log_level=level, podmonitor=podmonitor,  # type: ignore[arg-type]  # checked above
                   liveness=env.get("SQUALL_OPERATOR_LIVENESS", "").strip() or cls.liveness)

    @property
    def log_level_number(self) -> int:
        return logging.getLevelNamesMapping()[self.log_level]
