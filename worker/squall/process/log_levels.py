"""Storm's ``set_log_level``: a logger's level changed in every process of a running topology, for a
while, without a restart, then set back to what it was.

``squall set-log-level`` writes the change into the Topology's :data:`ANNOTATION` (a JSON object: per
logger, its level and when it ends); the operator relays what has not ended yet to every running
process over the control channel (``SET_LOG_LEVEL``, :mod:`squall.process.control`) at each reconcile,
and each process applies it with :class:`LogLevels`, which sets the logger back once its time is up.
An annotation, not a spec field: it is an operator's passing act (as ``kubectl annotate``), not what
the topology is; it changes neither the spec, nor its generation, nor what GitOps tools hold.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

#: Outside kopf's ``squall.dev/`` prefix: kopf leaves its own prefix's annotations out of what it compares,
#: and a change of this one must reach the operator's update handler.
ANNOTATION = "logging.squall.dev/levels"
ROOT = "ROOT"  # Storm's name of the root logger
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def logger_name(name: str) -> str:
    """The name as ``logging.getLogger`` takes it: ``ROOT`` (any case) and ``""`` are the root logger."""
    return "" if name.upper() == ROOT or not name else name


def level_name(text: str) -> str:
    """A level as :data:`LEVELS` names it (Storm's ``WARN`` and ``TRACE`` too), or ValueError saying which."""
    level = {"WARN": "WARNING", "TRACE": "DEBUG", "FATAL": "CRITICAL"}.get(text.upper(), text.upper())
    if level not in LEVELS:
        raise ValueError(f"{text!r} is not a log level: one of {', '.join(LEVELS)}")
    return level


@dataclass(frozen=True)
class Override:
    """A logger at ``level`` until ``until`` (a UTC time)."""

    logger: str
    level: str
    until: datetime

    def seconds_left(self, now: datetime) -> float:
        return (self.until - now).total_seconds()


def parse(text: str | None) -> list[Override]:
    """The overrides of an annotation's value; what does not parse is left out (a hand-written one)."""
    try:
        found = json.loads(text or "{}")
    except ValueError:
        return []
    out = []
    for logger, entry in (found.items() if isinstance(found, dict) else ()):
        try:
            until = datetime.strptime(entry["until"], TIME_FORMAT).replace(tzinfo=UTC)
            out.append(Override(logger=logger, level=level_name(entry["level"]), until=until))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def dump(overrides: list[Override]) -> str:
    return json.dumps({o.logger: {"level": o.level, "until": o.until.strftime(TIME_FORMAT)} for o in overrides},
                      sort_keys=True)


def active(overrides: list[Override], now: datetime) -> list[Override]:
    """The overrides not over at ``now``."""
    return [o for o in overrides if o.seconds_left(now) > 0]


class LogLevels:
    """A process's overridden loggers: each set at once, and set back to its own level (often NOTSET: its
    parent's) when its time is up (:meth:`expire`, which the process's loop calls every second)."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}  # logger → the monotonic time it is set back
        self._before: dict[str, int] = {}  # logger → its level before the first override

    def set(self, logger: str, level: str, seconds: float, *, now: float) -> None:
        """``logger`` at ``level`` for ``seconds`` from ``now``; again: the later end and the new level, while
        the level to go back to stays the one before the first."""
        name = logger_name(logger)
        target = logging.getLogger(name)
        self._before.setdefault(name, target.level)
        target.setLevel(level_name(level))
        self._until[name] = now + seconds
        if seconds <= 0:
            self.expire(now)

    def expire(self, now: float) -> list[str]:
        """Set back the loggers whose time is up at ``now``; their names."""
        done = [name for name, until in self._until.items() if until <= now]
        for name in done:
            logging.getLogger(name).setLevel(self._before.pop(name))
            del self._until[name]
        return done

    def overridden(self) -> dict[str, float]:
        """The loggers overridden now, with when each is set back."""
        return dict(self._until)
